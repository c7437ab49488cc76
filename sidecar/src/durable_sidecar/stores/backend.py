"""The two backends behind one store interface: open either with its stores, and migrate a database by URL.

Takes plain values, not the settings object: wiring.py (the one place that
reads settings into parts) decides what to open.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..urls import SQLITE_SCHEME, sqlite_path_of
from . import base
from .checkpoints import CheckpointStore
from .files import FileStore
from .idempotency import IdempotencyStore
from .instances import InstanceStore
from .limits import LimitStore
from .operations import OperationStore
from .postgres import checkpoints as pg_checkpoints
from .postgres import idempotency as pg_idempotency
from .postgres import instances as pg_instances
from .postgres import migrate as pg_migrate
from .postgres import sessions as pg_sessions
from .postgres.db import RUNNER as PG_RUNNER
from .postgres.db import PostgresDatabase
from .purge import PurgeStore
from .replay import ReplayStore
from .schema import Dialect, Migration
from .search_fields import SearchFieldStore
from .sessions import SessionStore
from .sqlite.db import RUNNER as SQLITE_RUNNER
from .sqlite.db import SqliteDatabase
from .versions import VersionStore
from .waits import WaitStore

log = logging.getLogger(__name__)

# How long a migration run outside the sidecar (tests, `durable-sidecar migrate`) waits for the file's write lock.
_MIGRATE_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class Backend:
    """An open database with the stores that speak its dialect."""

    dialect: Dialect
    db: base.Database
    instances: InstanceStore
    checkpoints: CheckpointStore
    idempotency: IdempotencyStore
    # Versions and the mailbox, waits, retries and suspension: one implementation each over the backend's runner.
    versions: VersionStore
    waits: WaitStore
    sessions: SessionStore
    limits: LimitStore
    purge: PurgeStore
    search_fields: SearchFieldStore
    operations: OperationStore
    replay: ReplayStore
    files: FileStore
    applied: tuple[str, ...] = ()  # migrations applied when it opened


async def open_sqlite(path: str, *, owner: bool, migrate: bool, retry_attempts: int, wait_timeout_seconds: float,
                      compress_threshold_bytes: int) -> Backend:
    """The embedded database. owner: this process serves the file (its exclusive lock; a second sidecar fails at
    once); operator commands (the CLI) open it without."""
    lite = SqliteDatabase(path, owner=owner, create=owner or migrate, retry_attempts=retry_attempts,
                          wait_timeout_seconds=wait_timeout_seconds)
    await lite.open()
    try:
        applied = await lite.migrate() if migrate else []
    except BaseException:
        await lite.close()
        raise
    instances, keys = InstanceStore(SQLITE_RUNNER), IdempotencyStore(SQLITE_RUNNER)
    return Backend("sqlite", lite, instances,
                   CheckpointStore(SQLITE_RUNNER, compress_threshold_bytes=compress_threshold_bytes),
                   keys, VersionStore(SQLITE_RUNNER),
                   WaitStore(SQLITE_RUNNER, instances), SessionStore(SQLITE_RUNNER, instances, keys),
                   LimitStore(SQLITE_RUNNER), PurgeStore(SQLITE_RUNNER), SearchFieldStore(SQLITE_RUNNER),
                   OperationStore(SQLITE_RUNNER), ReplayStore(SQLITE_RUNNER), FileStore(SQLITE_RUNNER),
                   tuple(applied))


async def open_postgres(url: str, *, migrate: bool, min_size: int, max_size: int, connect_timeout: float,
                        retry_attempts: int, pool_timeout: float, compress_threshold_bytes: int) -> Backend:
    # Migrating first fails fast with a clear message when PostgreSQL is unreachable.
    applied = await pg_migrate.migrate(url) if migrate else []
    pool = PostgresDatabase(url, min_size=min_size, max_size=max_size, connect_timeout=connect_timeout,
                            retry_attempts=retry_attempts, pool_timeout=pool_timeout)
    await pool.open()
    instances, keys = pg_instances.InstanceStore(), pg_idempotency.IdempotencyStore()
    return Backend("postgres", pool, instances,
                   pg_checkpoints.CheckpointStore(compress_threshold_bytes=compress_threshold_bytes),
                   keys, VersionStore(PG_RUNNER), WaitStore(PG_RUNNER, instances),
                   pg_sessions.SessionStore(instances, keys), LimitStore(PG_RUNNER), PurgeStore(PG_RUNNER),
                   SearchFieldStore(PG_RUNNER), OperationStore(PG_RUNNER), ReplayStore(PG_RUNNER), FileStore(PG_RUNNER),
                   tuple(applied))


async def migrate(url: str, migrations: list[Migration] | None = None) -> list[str]:
    """Applies pending migrations to the database at url (postgresql://… or sqlite:///path); returns their names."""
    if not url.startswith(SQLITE_SCHEME):
        return await pg_migrate.migrate(url, migrations)
    lite = SqliteDatabase(sqlite_path_of(url), owner=False, create=True, retry_attempts=1,
                          wait_timeout_seconds=_MIGRATE_WAIT_SECONDS)
    await lite.open()
    try:
        return await lite.migrate(migrations)
    finally:
        await lite.close()
