"""Core: settings, errors, the console, table declarations. Imports nothing of the project."""

from __future__ import annotations
