"""Migrations on both backends: from empty once, re-run as a no-op, a changed applied file refused; dialects in lockstep."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from durable_sidecar.errors import FailedPrecondition
from durable_sidecar.stores.backend import migrate
from durable_sidecar.stores.schema import DIALECTS, Dialect, Migration, load_migrations

from tests.sidecar.helpers import create_database, drop_database
from tests.sidecar.storage import columns, fetch_sync, is_sqlite, table_exists


@pytest.fixture
def empty_db(backend: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of the backend under test: a new PostgreSQL database, or a new file name."""
    if backend == "sqlite":
        yield f"sqlite://{tmp_path}/data/durable.sqlite3"
        return
    url = create_database()
    yield url
    drop_database(url)


def _dialect(url: str) -> Dialect:
    return "sqlite" if is_sqlite(url) else "postgres"


def _applied(url: str) -> list[tuple[int, str]]:
    return [(r[0], r[1]) for r in fetch_sync(url, "SELECT version, name FROM durable_schema_migrations ORDER BY 1")]


async def test_migrations_from_empty_run_once_and_rerun_is_noop(empty_db: str) -> None:
    expected = [m.name for m in load_migrations(_dialect(empty_db))]
    # Several replicas (or migrating processes) at once: the lock lets exactly one apply each file.
    results = await asyncio.gather(*[migrate(empty_db) for _ in range(4)])
    applied = [name for r in results for name in r]
    assert sorted(applied) == sorted(expected)
    assert [n for _, n in _applied(empty_db)] == expected
    assert await migrate(empty_db) == []
    for table in ("durable_instances", "durable_checkpoints", "durable_idempotency_keys", "durable_versions",
                  "durable_schema_migrations"):
        assert table_exists(empty_db, table), table


async def test_changed_applied_migration_fails_startup(empty_db: str) -> None:
    migrations = load_migrations(_dialect(empty_db))
    await migrate(empty_db, migrations)
    changed = [Migration(m.version, m.name, m.sql + "\n-- edited") if m.version == 1 else m for m in migrations]
    with pytest.raises(FailedPrecondition, match="changed after it was applied"):
        await migrate(empty_db, changed)
    with pytest.raises(FailedPrecondition, match="does not know"):
        await migrate(empty_db, migrations[:-1])


async def test_failed_migration_leaves_nothing_half_applied(empty_db: str) -> None:
    migrations = [*load_migrations(_dialect(empty_db))]
    broken = Migration(len(migrations) + 1, f"{len(migrations) + 1:04d}_broken.sql",
                       "CREATE TABLE durable_half (id int); SELECT no_such_function();")
    with pytest.raises((psycopg.Error, sqlite3.Error)):
        await migrate(empty_db, [*migrations, broken])
    assert not table_exists(empty_db, "durable_half")
    assert broken.name not in [n for _, n in _applied(empty_db)]
    assert [n for _, n in _applied(empty_db)] == [m.name for m in migrations]


def test_both_dialects_have_the_same_numbered_migrations() -> None:
    names = {dialect: [m.name for m in load_migrations(dialect)] for dialect in DIALECTS}
    assert names["postgres"] == names["sqlite"]


def test_both_dialects_create_the_same_tables_and_columns(postgres_url: str, sqlite_url: str) -> None:
    assert columns(postgres_url) == columns(sqlite_url)


async def test_sidecar_on_a_schema_older_than_itself_refuses_to_start_and_says_migrate(empty_db: str) -> None:
    from durable_sidecar import app

    from tests.conftest import make_settings

    migrations = load_migrations(_dialect(empty_db))
    await migrate(empty_db, migrations[:3])  # the schema before durable_installation
    with pytest.raises(FailedPrecondition, match="durable-sidecar migrate"):
        await app.start(make_settings(empty_db, auto_migrate=False, auth_tokens="migrate-token=ns"))
    await migrate(empty_db)
    ids = [r[0] for r in fetch_sync(empty_db, "SELECT id FROM durable_installation")]
    assert len(ids) == 1 and len(ids[0]) == 32
    sidecar = await app.start(make_settings(empty_db, auto_migrate=False, auth_tokens="migrate-token=ns"))
    await sidecar.stop(grace=0.1)


async def test_sidecar_missing_only_its_newest_migration_refuses_to_start_and_names_it(empty_db: str) -> None:
    """A schema one migration behind (durable_installation present) must not start and fail on queries later."""
    from durable_sidecar import app

    from tests.conftest import make_settings

    migrations = load_migrations(_dialect(empty_db))
    await migrate(empty_db, migrations[:-1])
    with pytest.raises(FailedPrecondition, match=f"durable-sidecar migrate.*{migrations[-1].name}"):
        await app.start(make_settings(empty_db, auto_migrate=False, auth_tokens="migrate-token=ns"))
    await migrate(empty_db)
    sidecar = await app.start(make_settings(empty_db, auto_migrate=False, auth_tokens="migrate-token=ns"))
    await sidecar.stop(grace=0.1)
