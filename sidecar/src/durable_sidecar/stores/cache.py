"""The cache of checkpoint states and completed idempotency results (a cache only), and its Redis implementation.

Only immutable facts are cached: a checkpoint (instance, sequence) never changes
once written, and a completed key's result never changes before it expires. So
an entry can be missing but never wrong, and losing, flushing or stopping the
cache changes no answer, only speed. Keys carry the database's installation id
(Cache.bind), so one Redis never answers for another database. Mutable rows (instances, in-progress keys)
are always read from the database. Every failure is logged, counted and
swallowed. Redis is the cache replicas share; without it each process keeps
its own (memory/cache.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from abc import ABC, abstractmethod
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from .. import metrics

log = logging.getLogger(__name__)

# After a failure the cache is skipped for this long, so a dead Redis costs one
# timeout per second at most instead of one per request.
_BACKOFF_SECONDS = 1.0


_PREFIX = "durable:v1:"


class Cache(ABC):
    """Best-effort cache; every method returns None/False instead of raising."""

    def __init__(self, *, enabled: bool, ttl_seconds: int, max_item_bytes: int) -> None:
        self.enabled = enabled
        self.ttl_seconds = ttl_seconds
        self.max_item_bytes = max_item_bytes
        self._prefix = _PREFIX

    def bind(self, installation_id: str) -> None:
        """Scopes every key to one database (its durable_installation id).

        A Redis outlives and can be shared beyond one database: without this, a
        database recreated from scratch (or a second deployment on the same
        Redis, same namespace) would be answered with the other's completed keys.
        """
        self._prefix = f"{_PREFIX}{installation_id}:"

    @property
    def scope(self) -> str:
        """What scopes every entry (the bound database): in-process caches in front of this one use it too."""
        return self._prefix

    def _key(self, kind: str, *parts: object) -> str:
        # Hash the parts: identifiers may contain ':' or be long.
        digest = hashlib.blake2b(json.dumps(parts).encode(), digest_size=16).hexdigest()
        return f"{self._prefix}{kind}:{digest}"

    @abstractmethod
    async def close(self) -> None:
        """Releases connections; the cache is empty afterwards."""

    async def ping(self) -> bool:
        """Whether the cache answers now."""
        return True

    # What an implementation provides: raw get, set and delete, counting hits and failures.
    @abstractmethod
    async def _get(self, op: str, key: str) -> bytes | None: ...

    @abstractmethod
    async def _get_many(self, op: str, keys: list[str]) -> list[bytes | None]: ...

    @abstractmethod
    async def _set(self, op: str, key: str, value: bytes, ttl_seconds: int) -> None: ...

    @abstractmethod
    async def _delete(self, op: str, keys: list[str]) -> bool:
        """Deletes the keys; False when the cache could not be reached (nothing is known to be deleted)."""

    async def _set_many(self, op: str, entries: list[tuple[str, bytes, int]]) -> None:
        """Several (key, value, ttl) at once; an implementation with round trips sends them together."""
        for key, value, ttl_seconds in entries:
            await self._set(op, key, value, ttl_seconds)

    async def _put(self, op: str, key: str, value: bytes, ttl_seconds: int) -> None:
        if self.enabled and len(value) <= self.max_item_bytes and ttl_seconds > 0:
            await self._set(op, key, value, ttl_seconds)

    # Checkpoint states, keyed by their immutable identity.
    async def get_state(self, ns: str, wf: str, key: str, sequence: int) -> bytes | None:
        if not self.enabled:
            return None
        return await self._get("checkpoint_state", self._key("cp", ns, wf, key, sequence))

    async def put_state(self, ns: str, wf: str, key: str, sequence: int, state: bytes) -> None:
        await self._put("checkpoint_state", self._key("cp", ns, wf, key, sequence), state, self.ttl_seconds)

    async def put_states(self, ns: str, states: list[tuple[str, str, int, bytes]]) -> None:
        """A batch's new states, (workflow_id, instance_key, sequence, state) each, in one go."""
        if not self.enabled or self.ttl_seconds <= 0:
            return
        entries = [(self._key("cp", ns, wf, key, seq), state, self.ttl_seconds)
                   for wf, key, seq, state in states if len(state) <= self.max_item_bytes]
        if entries:
            await self._set_many("checkpoint_state", entries)

    async def forget_states(self, ns: str, wf: str, key: str, sequences: list[int]) -> bool:
        """Deletes an instance's cached states (a purge); False when the cache could not be reached."""
        if not self.enabled or not sequences:
            return True
        return await self._delete("checkpoint_state", [self._key("cp", ns, wf, key, seq) for seq in sequences])

    # Completed idempotency keys: (fingerprint, attempt, result) frozen until expiry.
    async def get_completed_key(self, ns: str, scope: str, key: str) -> bytes | None:
        if not self.enabled:
            return None
        return await self._get("idempotency_completed", self._key("idem", ns, scope, key))

    async def put_completed_key(self, ns: str, scope: str, key: str, value: bytes, ttl_seconds: int) -> None:
        await self._put("idempotency_completed", self._key("idem", ns, scope, key), value, ttl_seconds)

    async def forget_completed_key(self, ns: str, scope: str, key: str) -> None:
        if self.enabled:
            await self._delete("idempotency_completed", [self._key("idem", ns, scope, key)])

    async def get_completed_keys(self, keys: list[tuple[str, str, str]]) -> list[bytes | None]:
        """One round trip for a batch of (namespace, scope, key); all None when the cache is unusable."""
        if not self.enabled or not keys:
            return [None] * len(keys)
        return await self._get_many("idempotency_completed", [self._key("idem", *k) for k in keys])

    async def forget_completed_keys(self, keys: list[tuple[str, str, str]]) -> None:
        if self.enabled and keys:
            await self._delete("idempotency_completed", [self._key("idem", *k) for k in keys])


class RedisCache(Cache):
    """Redis, shared by every replica; a failure skips it for a second."""

    def __init__(self, url: str, *, max_connections: int, timeout_seconds: float, ttl_seconds: int,
                 max_item_bytes: int) -> None:
        super().__init__(enabled=True, ttl_seconds=ttl_seconds, max_item_bytes=max_item_bytes)
        self._down_until = 0.0
        self._client: aioredis.Redis = aioredis.Redis.from_url(
            url,
            max_connections=max_connections,
            socket_timeout=timeout_seconds,
            socket_connect_timeout=timeout_seconds,
            retry_on_timeout=False,
            health_check_interval=0,
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def ping(self) -> bool:
        try:
            return bool(await self._client.ping())
        except (RedisError, OSError):
            return False

    def _usable(self) -> aioredis.Redis | None:
        if time.monotonic() < self._down_until:
            return None
        return self._client

    def _failed(self, op: str, exc: BaseException) -> None:
        self._down_until = time.monotonic() + _BACKOFF_SECONDS
        metrics.CACHE_ERRORS.labels(op).inc()
        log.warning("cache unavailable, falling back to the database", extra={"op": op, "error": repr(exc)})

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

    async def _get_many(self, op: str, keys: list[str]) -> list[bytes | None]:
        client = self._usable()
        if client is None:
            return [None] * len(keys)
        try:
            values: list[Any] = await client.mget(keys)
        except (RedisError, OSError) as exc:
            self._failed(op, exc)
            return [None] * len(keys)
        for value in values:
            metrics.CACHE_REQUESTS.labels(op, "hit" if value is not None else "miss").inc()
        return [bytes(v) if v is not None else None for v in values]

    async def _set(self, op: str, key: str, value: bytes, ttl_seconds: int) -> None:
        client = self._usable()
        if client is None:
            return
        try:
            await client.set(key, value, ex=ttl_seconds)
        except (RedisError, OSError) as exc:
            self._failed(op, exc)

    async def _set_many(self, op: str, entries: list[tuple[str, bytes, int]]) -> None:
        client = self._usable()
        if client is None:
            return
        try:
            async with client.pipeline(transaction=False) as pipe:
                for key, value, ttl_seconds in entries:
                    pipe.set(key, value, ex=ttl_seconds)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self._failed(op, exc)

    async def _delete(self, op: str, keys: list[str]) -> bool:
        client = self._usable()
        if client is None:
            return False
        try:
            await client.delete(*keys)
        except (RedisError, OSError) as exc:
            self._failed(op, exc)
            return False
        return True
