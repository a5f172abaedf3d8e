"""Data quality: suites, in-stream gates, whole-table checks, Data Docs and publishing."""
