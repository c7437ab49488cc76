"""make chaos (issue 41): seeded durable workflows under seeded faults, checked by an oracle of counts."""

import sys
from pathlib import Path

# e2e/ holds what chaos shares with the end-to-end tests (harness.py, scenarios.py, fake_services.py, ports.py):
# importable as top-level modules, as bench/ does it.
_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)
