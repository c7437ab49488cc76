"""Migrations: from empty once, re-run as a no-op, a changed applied file refused."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest
from durable_sidecar.errors import FailedPrecondition
from durable_sidecar.stores.migrate import Migration, load_migrations, migrate

from tests.sidecar.helpers import create_database, drop_database


@pytest.fixture
def empty_db() -> Iterator[str]:
    url = create_database()
    yield url
    drop_database(url)


def _applied(url: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT version, name FROM durable_schema_migrations ORDER BY 1")]


async def test_migrations_from_empty_run_once_and_rerun_is_noop(empty_db: str) -> None:
    expected = [m.name for m in load_migrations()]
    # Several replicas starting at once: the advisory lock lets exactly one apply each file.
    results = await asyncio.gather(*[migrate(empty_db) for _ in range(4)])
    applied = [name for r in results for name in r]
    assert sorted(applied) == sorted(expected)
    assert [n for _, n in _applied(empty_db)] == expected
    assert await migrate(empty_db) == []
    with psycopg.connect(empty_db) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"durable_instances", "durable_checkpoints", "durable_schema_migrations"} <= tables


async def test_changed_applied_migration_fails_startup(empty_db: str) -> None:
    migrations = load_migrations()
    await migrate(empty_db, migrations)
    changed = [Migration(m.version, m.name, m.sql + "\n-- edited") if m.version == 1 else m for m in migrations]
    with pytest.raises(FailedPrecondition, match="changed after it was applied"):
        await migrate(empty_db, changed)


async def test_failed_migration_leaves_nothing_half_applied(empty_db: str) -> None:
    migrations = [*load_migrations()]
    broken = Migration(len(migrations) + 1, f"{len(migrations) + 1:04d}_broken.sql",
                       "CREATE TABLE durable_half (id int); SELECT no_such_function();")
    with pytest.raises(psycopg.Error):
        await migrate(empty_db, [*migrations, broken])
    with psycopg.connect(empty_db) as conn:
        half = conn.execute("SELECT to_regclass('durable_half')").fetchone()
    assert half == (None,)
    assert broken.name not in [n for _, n in _applied(empty_db)]
