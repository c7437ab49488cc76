"""The fault suite's running tally, printed at the end of the run (see tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FaultTally:
    faults_injected: int = 0
    operations: int = 0
    lost_acknowledged_writes: int = 0
    duplicate_completions: int = 0
    lines: list[str] = field(default_factory=list)

    def add(self, test: str, *, faults: int, operations: int, lost: int = 0, duplicates: int = 0,
            note: str = "") -> None:
        self.faults_injected += faults
        self.operations += operations
        self.lost_acknowledged_writes += lost
        self.duplicate_completions += duplicates
        self.lines.append(f"{test:<58} faults={faults:<4} ops={operations:<6} lost={lost} dup={duplicates} {note}")


TALLY = FaultTally()
