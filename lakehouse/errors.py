"""Errors a person reads: one line that says what happened and where."""

from __future__ import annotations


class LakehouseError(Exception):
    """A failure the CLI reports as one line and a non-zero exit, without a traceback."""


class SettingsError(LakehouseError):
    """Configuration that cannot be used: names the key and the file it came from."""
