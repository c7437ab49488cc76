"""Numbered, forward-only SQL migrations (package data)."""
