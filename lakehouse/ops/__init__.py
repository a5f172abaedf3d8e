"""Ops: where readers stand, compaction, status, SQL, the traffic producer."""

from __future__ import annotations
