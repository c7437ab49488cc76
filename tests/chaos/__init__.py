"""Tests of make chaos's own parts that need no stack (the oracle)."""
