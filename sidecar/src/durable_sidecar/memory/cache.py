"""MemoryCache: the in-process cache used when no Redis URL is configured; a least-recently-used map bounded by bytes.

It holds the same immutable facts as Redis would (see stores/cache.py), each
for no longer than its TTL, so a replica's own copy can be missing but never
wrong: with several sidecar replicas each keeps its own, and none needs the others'.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from .. import metrics
from ..stores.cache import Cache

# Bookkeeping per entry beyond its key and value (the dict slot, the tuple, the bytes header), roughly.
_ENTRY_OVERHEAD_BYTES = 160


class MemoryCache(Cache):
    """Best-effort, process-local; max_bytes of 0 disables it."""

    def __init__(self, *, max_bytes: int, ttl_seconds: int, max_item_bytes: int) -> None:
        super().__init__(enabled=max_bytes > 0, ttl_seconds=ttl_seconds, max_item_bytes=max_item_bytes)
        self.max_bytes = max_bytes
        self.used_bytes = 0
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()

    @staticmethod
    def _size(key: str, value: bytes) -> int:
        return len(key) + len(value) + _ENTRY_OVERHEAD_BYTES

    def _lookup(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, expires = entry
        if time.monotonic() >= expires:
            self._forget(key)
            return None
        self._entries.move_to_end(key)
        return value

    def _forget(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.used_bytes -= self._size(key, entry[0])

    async def _get(self, op: str, key: str) -> bytes | None:
        value = self._lookup(key)
        metrics.CACHE_REQUESTS.labels(op, "hit" if value is not None else "miss").inc()
        return value

    async def _get_many(self, op: str, keys: list[str]) -> list[bytes | None]:
        return [await self._get(op, key) for key in keys]

    async def _set(self, op: str, key: str, value: bytes, ttl_seconds: int) -> None:
        self._forget(key)
        size = self._size(key, value)
        if size > self.max_bytes:
            return
        self._entries[key] = (value, time.monotonic() + ttl_seconds)
        self.used_bytes += size
        while self.used_bytes > self.max_bytes:
            oldest, (old_value, _) = self._entries.popitem(last=False)
            self.used_bytes -= self._size(oldest, old_value)

    async def _delete(self, op: str, keys: list[str]) -> bool:
        for key in keys:
            self._forget(key)
        return True

    async def close(self) -> None:
        self._entries.clear()
        self.used_bytes = 0
