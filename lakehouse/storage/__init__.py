"""Storage: Delta writes, tables by name, leases, the lake's bucket, the model run log."""

from __future__ import annotations
