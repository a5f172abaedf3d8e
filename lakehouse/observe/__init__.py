"""Observe: what the pipeline did (progress tables), and the same as Prometheus metrics."""

from __future__ import annotations
