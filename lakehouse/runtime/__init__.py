"""Runtime: the Spark session, streams as jobs, supervised parts of one application."""

from __future__ import annotations
