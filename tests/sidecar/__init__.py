"""Sidecar tests."""
