"""Smoke check of the benchmark harness (bench/)."""
