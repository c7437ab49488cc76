"""Long-running soak test, run by `make faults` (not by `make test`)."""
