"""Replays of completed idempotency keys without the database: from this process's memory, then the shared cache.

The fast path of a Claim only: it answers DUPLICATE for a completed key whose
payload is the same, and nothing else; every other answer, and every miss or
doubt, is the database's (services/idempotency.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ..domain import Claimed, ClaimOutcome, IdempotencyKey, KeyRef, KeyStatus, NewClaim
from ..memory.completed_keys import CompletedKeys
from ..stores.cache import Cache

if TYPE_CHECKING:
    from .idempotency import ClaimItem

log = logging.getLogger(__name__)

# A cached entry is dropped this long before the key expires, so neither the
# time a cache write takes nor a modest clock difference between this host and
# the database can make the cache answer for a key the database already holds expired.
CACHE_MARGIN = timedelta(seconds=2)


def _to_cache(key: IdempotencyKey) -> bytes:
    return json.dumps({
        "v": 1, "ns": key.namespace, "scope": key.scope, "key": key.key, "fingerprint": key.fingerprint,
        "attempt": key.attempt, "holder": key.holder,
        "result": key.result_json.decode("utf-8") if key.result_json is not None else None,
        "expires_at": key.expires_at.isoformat(), "created_at": key.created_at.isoformat(),
        "updated_at": key.updated_at.isoformat(),
    }, ensure_ascii=False).encode()


def _from_cache(raw: bytes) -> IdempotencyKey | None:
    """A cached completed key, or None for anything unreadable (a miss, never an error)."""
    try:
        d = json.loads(raw)
        if d["v"] != 1:
            return None
        return IdempotencyKey(
            namespace=d["ns"], scope=d["scope"], key=d["key"], status=KeyStatus.COMPLETED,
            fingerprint=d["fingerprint"], attempt=int(d["attempt"]), holder=d["holder"], lease_expires_at=None,
            result_json=d["result"].encode() if d["result"] is not None else None, error_message="",
            expires_at=datetime.fromisoformat(d["expires_at"]), created_at=datetime.fromisoformat(d["created_at"]),
            updated_at=datetime.fromisoformat(d["updated_at"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class CompletedKeyReplay:
    """Completed keys remembered here (CompletedKeys) and in the shared cache, and their replay."""

    def __init__(self, cache: Cache, local: CompletedKeys, *, cache_min_bytes: int) -> None:
        self.cache = cache
        self.local = local
        self.cache_min_bytes = cache_min_bytes

    def from_memory(self, namespace: str, items: list[ClaimItem],
                    prepare: Callable[[str, list[ClaimItem], list[str]], list[NewClaim]]) -> list[Claimed] | None:
        """Answers only when every item is a completed key this process remembers, with the same payload.

        The payload is recognised by the fingerprint sent or the SHA-256 of the
        raw bytes, so no JSON is parsed; the items are validated as always.
        """
        if not self.local.enabled:
            return None
        found = []
        for item in items:
            entry = self.local.get(self.cache.scope, KeyRef(namespace, item.scope, item.key))
            if entry is None:
                return None
            if item.fingerprint:
                same = item.fingerprint.lower() == entry.key.fingerprint
            elif item.payload_json:
                same = hashlib.sha256(item.payload_json).hexdigest() in entry.raw_sha256
            else:
                same = entry.key.fingerprint == ""
            if not same:
                return None
            found.append(entry.key)
        claims = prepare(namespace, items, [k.fingerprint for k in found])
        if any(c.fingerprint != k.fingerprint for c, k in zip(claims, found, strict=True)):
            return None
        return [Claimed(ClaimOutcome.DUPLICATE, k) for k in found]

    async def from_cache(self, claims: list[NewClaim]) -> list[Claimed] | None:
        """Answers only when every item is a cached completed key with the same fingerprint."""
        if not self.cache.enabled:
            return None
        raws = await self.cache.get_completed_keys([(c.ref.namespace, c.ref.scope, c.ref.key) for c in claims])
        horizon = datetime.now(UTC) + CACHE_MARGIN
        out = []
        for claim, raw in zip(claims, raws, strict=True):
            key = _from_cache(raw) if raw is not None else None
            if (key is None or key.ref != claim.ref or key.fingerprint != claim.fingerprint
                    or key.expires_at <= horizon):
                return None  # the database decides, including every mismatch
            out.append(Claimed(ClaimOutcome.DUPLICATE, key))
        return out

    async def remember(self, key: IdempotencyKey, now: datetime, raw_sha256: str = "") -> None:
        """Caches a committed completed key for no longer than it has left to live (here and in the shared cache)."""
        left = int((key.expires_at - now - CACHE_MARGIN).total_seconds())
        ttl = min(self.cache.ttl_seconds, left)
        if key.status is KeyStatus.COMPLETED and left > 0:
            self.local.put(self.cache.scope, key, raw_sha256)
        if key.status is KeyStatus.COMPLETED and ttl > 0 and len(key.result_json or b"") >= self.cache_min_bytes:
            try:
                entry = _to_cache(key)
            except (UnicodeDecodeError, ValueError):
                # Runs after the commit, so it must not fail the call: a result stored
                # before the boundary checked UTF-8 is served from the database alone.
                log.warning("completed key not cached: its stored result is not UTF-8 JSON")
                return
            await self.cache.put_completed_key(key.namespace, key.scope, key.key, entry, ttl)
