"""CompletedKeys: an in-process LRU of completed idempotency keys, in front of the shared cache (Redis).

A completed key's fingerprint, attempt and result cannot change before it
expires (see stores/cache.py), so a replica's copy may be missing but never
wrong while it is dropped before the key's expiry (with the same margin the
shared cache keeps). Entries are scoped like the shared cache's keys, by the
database's installation id, and remember the SHA-256 of the raw payloads that
matched the key's fingerprint: a claim resending the same bytes is replayed
without canonicalising its JSON or any network hop.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from .. import metrics
from ..domain import IdempotencyKey, KeyRef

# The raw forms remembered per key: a few spellings of one payload at most.
_RAW_FORMS = 4


@dataclass
class CompletedEntry:
    key: IdempotencyKey
    raw_sha256: set[str] = field(default_factory=set)


class CompletedKeys:
    """Bounded by entries; every method is synchronous and cheap (no I/O)."""

    def __init__(self, max_entries: int, *, margin: timedelta) -> None:
        self.max_entries = max_entries
        self.margin = margin
        self._entries: OrderedDict[tuple[str, KeyRef], CompletedEntry] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def get(self, scope: str, ref: KeyRef) -> CompletedEntry | None:
        if not self._entries:
            return None
        entry = self._entries.get((scope, ref))
        if entry is not None and entry.key.expires_at <= datetime.now(UTC) + self.margin:
            del self._entries[(scope, ref)]
            entry = None
        metrics.CACHE_REQUESTS.labels("idempotency_completed_local", "hit" if entry else "miss").inc()
        if entry is not None:
            self._entries.move_to_end((scope, ref))
        return entry

    def put(self, scope: str, key: IdempotencyKey, raw_sha256: str = "") -> None:
        if not self.enabled or key.expires_at <= datetime.now(UTC) + self.margin:
            return
        slot = (scope, key.ref)
        entry = self._entries.get(slot)
        if entry is None or entry.key != key:
            entry = self._entries[slot] = CompletedEntry(key)
        if raw_sha256 and len(entry.raw_sha256) < _RAW_FORMS:
            entry.raw_sha256.add(raw_sha256)
        self._entries.move_to_end(slot)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget(self, scope: str, refs: list[KeyRef]) -> None:
        for ref in refs:
            self._entries.pop((scope, ref), None)
