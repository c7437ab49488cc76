"""The storage factory: settings to the PostgreSQL or the embedded SQLite backend (one store interface), and the cache."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..settings import Settings, sqlite_path_of
from . import base
from .cache import Cache, RedisCache
from .memory_cache import MemoryCache
from .postgres import checkpoints as pg_checkpoints
from .postgres import idempotency as pg_idempotency
from .postgres import instances as pg_instances
from .postgres import migrate as pg_migrate
from .postgres import versions as pg_versions
from .postgres.db import PostgresDatabase
from .schema import Dialect, Migration
from .sqlite import checkpoints as sqlite_checkpoints
from .sqlite import idempotency as sqlite_idempotency
from .sqlite import instances as sqlite_instances
from .sqlite import versions as sqlite_versions
from .sqlite.db import SqliteDatabase

log = logging.getLogger(__name__)

# How long a migration run outside the sidecar (tests, `durable-sidecar migrate`) waits for the file's write lock.
_MIGRATE_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class Backend:
    """An open database with the stores that speak its dialect."""

    dialect: Dialect
    db: base.Database
    instances: base.InstanceStore
    checkpoints: base.CheckpointStore
    idempotency: base.IdempotencyStore
    versions: base.VersionStore
    applied: tuple[str, ...] = ()  # migrations applied when it opened


async def open_backend(settings: Settings, *, owner: bool, migrate: bool) -> Backend:
    """Opens the configured backend, applying pending migrations first when asked.

    owner: this process serves the database (the sidecar). For the embedded
    database that takes the file's exclusive lock, so a second sidecar on the
    same file fails at once; operator commands (the CLI) open it without.
    """
    threshold = settings.compress_threshold_bytes
    if settings.embedded:
        lite = SqliteDatabase(settings.sqlite_path, owner=owner, create=owner or migrate,
                              retry_attempts=settings.db_retry_attempts,
                              wait_timeout_seconds=settings.db_pool_timeout_seconds)
        await lite.open()
        try:
            applied = await lite.migrate() if migrate else []
        except BaseException:
            await lite.close()
            raise
        return Backend("sqlite", lite, sqlite_instances.InstanceStore(),
                       sqlite_checkpoints.CheckpointStore(compress_threshold_bytes=threshold),
                       sqlite_idempotency.IdempotencyStore(), sqlite_versions.VersionStore(), tuple(applied))
    # Migrating first fails fast with a clear message when PostgreSQL is unreachable.
    applied = await pg_migrate.migrate(settings.database_url) if migrate else []
    pool = PostgresDatabase(settings.database_url, min_size=settings.db_pool_min, max_size=settings.db_pool_max,
                            connect_timeout=settings.db_connect_timeout_seconds,
                            retry_attempts=settings.db_retry_attempts, pool_timeout=settings.db_pool_timeout_seconds)
    await pool.open()
    return Backend("postgres", pool, pg_instances.InstanceStore(),
                   pg_checkpoints.CheckpointStore(compress_threshold_bytes=threshold),
                   pg_idempotency.IdempotencyStore(), pg_versions.VersionStore(), tuple(applied))


async def migrate(url: str, migrations: list[Migration] | None = None) -> list[str]:
    """Applies pending migrations to the database at url (postgresql://… or sqlite:///path); returns their names."""
    if not url.startswith("sqlite://"):
        return await pg_migrate.migrate(url, migrations)
    lite = SqliteDatabase(sqlite_path_of(url), owner=False, create=True, retry_attempts=1,
                          wait_timeout_seconds=_MIGRATE_WAIT_SECONDS)
    await lite.open()
    try:
        return await lite.migrate(migrations)
    finally:
        await lite.close()


def make_cache(settings: Settings, *, shared_only: bool = False) -> Cache:
    """Redis when a URL is configured; else the in-process cache (or none at all with shared_only)."""
    if settings.redis_url:
        return RedisCache(settings.redis_url, max_connections=settings.redis_pool_max,
                          timeout_seconds=settings.redis_timeout_seconds, ttl_seconds=settings.cache_ttl_seconds,
                          max_item_bytes=settings.cache_max_item_bytes)
    return MemoryCache(max_bytes=0 if shared_only else settings.local_cache_max_bytes,
                       ttl_seconds=settings.cache_ttl_seconds, max_item_bytes=settings.cache_max_item_bytes)
