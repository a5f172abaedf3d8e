"""Report: Data Docs, the pages of plots and tables, publishing."""

from __future__ import annotations
