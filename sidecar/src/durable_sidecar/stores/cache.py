"""Redis cache of checkpoint states and completed idempotency results; a cache only.

Only immutable facts are cached: a checkpoint (instance, sequence) never changes
once written, and a completed key's result never changes before it expires. So
an entry can be missing but never wrong, and losing, flushing or stopping Redis
changes no answer, only speed. Mutable rows (instances, in-progress keys) are
always read from PostgreSQL. Every failure is logged, counted and swallowed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from .. import metrics

log = logging.getLogger(__name__)

# After a failure the cache is skipped for this long, so a dead Redis costs one
# timeout per second at most instead of one per request.
_BACKOFF_SECONDS = 1.0


def _key(kind: str, *parts: object) -> str:
    # Hash the parts: identifiers may contain ':' or be long.
    digest = hashlib.blake2b(json.dumps(parts).encode(), digest_size=16).hexdigest()
    return f"durable:v1:{kind}:{digest}"


class Cache:
    """Best-effort cache; every method returns None/False instead of raising."""

    def __init__(self, url: str, *, max_connections: int, timeout_seconds: float, ttl_seconds: int,
                 max_item_bytes: int) -> None:
        self.enabled = bool(url)
        self.ttl_seconds = ttl_seconds
        self.max_item_bytes = max_item_bytes
        self._down_until = 0.0
        self._client: aioredis.Redis | None = None
        if url:
            self._client = aioredis.Redis.from_url(
                url,
                max_connections=max_connections,
                socket_timeout=timeout_seconds,
                socket_connect_timeout=timeout_seconds,
                retry_on_timeout=False,
                health_check_interval=0,
            )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def ping(self) -> bool:
        if self._client is None:
            return True
        try:
            return bool(await self._client.ping())
        except (RedisError, OSError):
            return False

    def _usable(self) -> aioredis.Redis | None:
        if self._client is None or time.monotonic() < self._down_until:
            return None
        return self._client

    def _failed(self, op: str, exc: BaseException) -> None:
        self._down_until = time.monotonic() + _BACKOFF_SECONDS
        metrics.CACHE_ERRORS.labels(op).inc()
        log.warning("cache unavailable, falling back to PostgreSQL", extra={"op": op, "error": repr(exc)})

    async def _get(self, op: str, key: str) -> bytes | None:
        client = self._usable()
        if client is None:
            return None
        try:
            value: Any = await client.get(key)
        except (RedisError, OSError) as exc:
            self._failed(op, exc)
            return None
        metrics.CACHE_REQUESTS.labels(op, "hit" if value is not None else "miss").inc()
        return bytes(value) if value is not None else None

    async def _set(self, op: str, key: str, value: bytes, ttl_seconds: int) -> None:
        client = self._usable()
        if client is None or len(value) > self.max_item_bytes or ttl_seconds <= 0:
            return
        try:
            await client.set(key, value, ex=ttl_seconds)
        except (RedisError, OSError) as exc:
            self._failed(op, exc)

    async def _delete(self, op: str, keys: list[str]) -> None:
        client = self._usable()
        if client is None or not keys:
            return
        try:
            await client.delete(*keys)
        except (RedisError, OSError) as exc:
            self._failed(op, exc)

    # Checkpoint states, keyed by their immutable identity.
    async def get_state(self, ns: str, wf: str, key: str, sequence: int) -> bytes | None:
        return await self._get("checkpoint_state", _key("cp", ns, wf, key, sequence))

    async def put_state(self, ns: str, wf: str, key: str, sequence: int, state: bytes) -> None:
        await self._set("checkpoint_state", _key("cp", ns, wf, key, sequence), state, self.ttl_seconds)

    # Completed idempotency keys: (fingerprint, attempt, result) frozen until expiry.
    async def get_completed_key(self, ns: str, scope: str, key: str) -> bytes | None:
        return await self._get("idempotency_completed", _key("idem", ns, scope, key))

    async def put_completed_key(self, ns: str, scope: str, key: str, value: bytes, ttl_seconds: int) -> None:
        await self._set("idempotency_completed", _key("idem", ns, scope, key), value, ttl_seconds)

    async def forget_completed_key(self, ns: str, scope: str, key: str) -> None:
        await self._delete("idempotency_completed", [_key("idem", ns, scope, key)])

    async def get_completed_keys(self, keys: list[tuple[str, str, str]]) -> list[bytes | None]:
        """One round trip for a batch of (namespace, scope, key); all None when the cache is unusable."""
        client = self._usable()
        if client is None or not keys:
            return [None] * len(keys)
        try:
            values: list[Any] = await client.mget([_key("idem", *k) for k in keys])
        except (RedisError, OSError) as exc:
            self._failed("idempotency_completed", exc)
            return [None] * len(keys)
        for value in values:
            metrics.CACHE_REQUESTS.labels("idempotency_completed", "hit" if value is not None else "miss").inc()
        return [bytes(v) if v is not None else None for v in values]

    async def forget_completed_keys(self, keys: list[tuple[str, str, str]]) -> None:
        await self._delete("idempotency_completed", [_key("idem", *k) for k in keys])
