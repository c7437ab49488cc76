"""Fault and abuse suite: failpoints, PostgreSQL restarts, network faults, fuzzing, limits, exhaustion."""
