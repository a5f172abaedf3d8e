"""Benchmarks: one module per measured path, each printing its ratio to a baseline.

Run one as `python -m benchmarks.<path>` from the project folder (`make bench` runs all).
"""
