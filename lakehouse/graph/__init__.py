"""Graph: nodes and selection, the walk, gold's models."""

from __future__ import annotations
