"""Benchmarks of the sidecar side by side with raw PostgreSQL, a no-op gRPC floor and DBOS Transact."""

import sys
from pathlib import Path

# e2e/ holds what the benchmarks share with the end-to-end tests (ports.py, harness.py, fake_services.py):
# importable as top-level modules from every bench module, once, here.
_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)
