"""PL/pgSQL function sources (stores/postgres/sql/): applied after the numbered migrations, on fresh and existing databases."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from durable_sidecar.stores.postgres.migrate import FunctionSource, load_function_sources, migrate
from durable_sidecar.stores.schema import load_migrations

from tests.sidecar.helpers import create_database, drop_database
from tests.sidecar.storage import fetch_sync

pytestmark = pytest.mark.postgres_only(reason="PL/pgSQL functions exist on PostgreSQL only")

# The functions the stores call (stores/postgres/checkpoints.py) and the lease trigger's (migration 0011).
FUNCTIONS = ["durable_lease_end_whole_seconds", "durable_save_checkpoint", "durable_save_checkpoints",
             "durable_save_step", "durable_save_step_then"]


@pytest.fixture
def empty_postgres(backend: str) -> Iterator[str]:
    url = create_database()
    yield url
    drop_database(url)


def _body(source: FunctionSource) -> str:
    """What PostgreSQL keeps as the function's source (prosrc): the text between the $$ quotes."""
    return source.sql.split("$$")[1]


def _stored(url: str) -> dict[str, tuple[str, str]]:
    rows = fetch_sync(url, "SELECT p.proname, p.prosrc, coalesce(obj_description(p.oid, 'pg_proc'), '') "
                           "FROM pg_proc p WHERE p.proname LIKE 'durable%%' AND pg_function_is_visible(p.oid)")
    return {name: (src, mark) for name, src, mark in rows}


def test_one_source_file_per_function_the_migrations_created() -> None:
    sources = load_function_sources()
    assert [s.name for s in sources] == FUNCTIONS
    for s in sources:
        assert s.sql.count("CREATE OR REPLACE FUNCTION") == 1 and f"FUNCTION {s.name}(" in s.sql, s.name
    created = " ".join(m.sql for m in load_migrations("postgres"))
    assert all(f"CREATE FUNCTION {name}(" in created for name in FUNCTIONS)


async def test_a_fresh_database_ends_with_the_source_bodies_and_a_rerun_replaces_nothing(empty_postgres: str) -> None:
    await migrate(empty_postgres)
    stored = _stored(empty_postgres)
    for source in load_function_sources():
        assert stored[source.name] == (_body(source), source.mark), source.name
    assert sorted(stored) == FUNCTIONS  # nothing else, nothing twice
    before = fetch_sync(empty_postgres, "SELECT p.proname, p.xmin::text FROM pg_proc p WHERE p.proname LIKE 'durable%%'")
    assert await migrate(empty_postgres) == []
    after = fetch_sync(empty_postgres, "SELECT p.proname, p.xmin::text FROM pg_proc p WHERE p.proname LIKE 'durable%%'")
    assert sorted(after) == sorted(before)  # an unchanged source is not applied again


async def test_a_database_that_ran_the_old_migrations_gets_the_current_bodies(empty_postgres: str) -> None:
    # As a database migrated by the previous release: the numbered migrations only (their bodies, no marks).
    await migrate(empty_postgres, functions=[])
    old = _stored(empty_postgres)
    assert all(mark == "" for _, mark in old.values())
    sources = load_function_sources()
    # A rule edited in its file since (here: a comment inside the body): the next migrate replaces that body.
    edited = [FunctionSource(s.name, s.sql.replace("BEGIN", "BEGIN\n    -- edited", 1)) if s.name == "durable_save_step"
              else s for s in sources]
    assert await migrate(empty_postgres, functions=edited) == []
    stored = _stored(empty_postgres)
    assert "-- edited" in stored["durable_save_step"][0]
    for source in edited:
        assert stored[source.name] == (_body(source), source.mark), source.name
    # The file goes back to what it was: the body follows again.
    await migrate(empty_postgres, functions=sources)
    assert "-- edited" not in _stored(empty_postgres)["durable_save_step"][0]


async def test_a_broken_source_replaces_no_function(empty_postgres: str) -> None:
    await migrate(empty_postgres)
    before = _stored(empty_postgres)
    sources = load_function_sources()
    broken = [FunctionSource(s.name, s.sql + "\nSELECT no_such_function();")
              if s.name == FUNCTIONS[-1] else FunctionSource(s.name, s.sql.replace("BEGIN", "BEGIN\n    -- x", 1))
              for s in sources]
    with pytest.raises(psycopg.Error, match="no_such_function"):
        await migrate(empty_postgres, functions=broken)
    assert _stored(empty_postgres) == before


async def test_a_database_held_behind_the_newest_migration_gets_the_sources_once_it_reaches_it(
        empty_postgres: str) -> None:
    migrations = load_migrations("postgres")
    await migrate(empty_postgres, migrations[:7])  # 0006's durable_save_checkpoint only, as 0006 wrote it
    assert {name: mark for name, (_, mark) in _stored(empty_postgres).items()} == {"durable_save_checkpoint": ""}
    await migrate(empty_postgres)
    assert {name: mark for name, (_, mark) in _stored(empty_postgres).items()} == {
        s.name: s.mark for s in load_function_sources()}
