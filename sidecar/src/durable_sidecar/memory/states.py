"""StateMemory: the newest state this process saved or started each instance with, by instance, bounded.

A step-result save adds the step's result to the instance's state. With the
state it remembers, the sidecar merges without reading the state back and saves
in one round trip (CheckpointStore.save_step_txn): the database checks that the
instance still stands where the remembered state says (its newest sequence, and
that checkpoint's SHA-256 or the start item's), so a copy made stale by another
sidecar, an operator or a restart is never written on; such a save takes the
transaction that reads the state, and the copy is replaced.

Bounded by entries and by bytes; an entry larger than a fraction of the bound is
not kept. Every method is synchronous and cheap (no I/O).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ..domain import InstanceRef


@dataclass(frozen=True)
class RememberedState:
    sequence: int  # the instance's newest sequence (0: no checkpoint, the state is the start item)
    state: bytes | None  # None: no checkpoint and no start item
    # What the database checks: the checkpoint's SHA-256 (hex) of its state; at sequence 0 the SHA-256 of the
    # stored start item's bytes, '' for none.
    digest: str


class StateMemory:
    def __init__(self, max_entries: int = 10_000, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[InstanceRef, RememberedState] = OrderedDict()
        self._bytes = 0

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.max_bytes > 0

    def get(self, ref: InstanceRef) -> RememberedState | None:
        entry = self._entries.get(ref)
        if entry is not None:
            self._entries.move_to_end(ref)
        return entry

    def put(self, ref: InstanceRef, sequence: int, state: bytes | None, digest: str) -> None:
        self.forget(ref)
        size = len(state or b"")
        if not self.enabled or size > self.max_bytes // 16:
            return
        self._entries[ref] = RememberedState(sequence, state, digest)
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= len(dropped.state or b"")

    def forget(self, ref: InstanceRef) -> None:
        dropped = self._entries.pop(ref, None)
        if dropped is not None:
            self._bytes -= len(dropped.state or b"")

    def __len__(self) -> int:
        return len(self._entries)
