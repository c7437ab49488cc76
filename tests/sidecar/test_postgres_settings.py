"""The sidecar's PostgreSQL connections commit synchronously; with autovacuum off it warns and maintains its tables.

"An acknowledged checkpoint is committed with synchronous commit" must hold on a
server (or database) whose default is synchronous_commit=off; a stronger or
other explicit setting (local, remote_apply ...) is the operator's and is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg
import pytest
from durable_sidecar.stores.base import Conn
from durable_sidecar.stores.postgres.db import PostgresDatabase, pg
from durable_sidecar.stores.postgres.migrate import migrate
from psycopg.rows import dict_row

from tests.sidecar.helpers import ADMIN_URL, create_database, drop_database

pytestmark = pytest.mark.postgres_only(reason="PostgreSQL's settings")


def _database_with(setting: str) -> str:
    url = create_database()
    name = url.rpartition("/")[2]
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = {setting}')
    return url


async def _sidecar_setting(url: str) -> list[str]:
    """synchronous_commit as each of the sidecar's connections sees it (3: the hot one and two others)."""
    db = PostgresDatabase(url, min_size=3, max_size=3, connect_timeout=5, retry_attempts=1)
    await db.open()
    try:
        async def show(conn: Conn) -> str:
            cur = await pg(conn).execute("SHOW synchronous_commit")
            row = await cur.fetchone()
            assert row is not None
            return str(row["synchronous_commit"])

        seen = []
        async with contextlib.AsyncExitStack() as held:
            # Every connection of every pool at once, so none is looked at twice.
            raws = [await held.enter_async_context(pool.connection()) for pool in db.pools for _ in range(pool.max_size)]
            for raw in raws:
                row = await (await raw.execute("SHOW synchronous_commit")).fetchone()
                assert row is not None
                seen.append(str(row["synchronous_commit"]))
        assert len(seen) == 3
        seen.append(await db.transaction(show))  # and the store's own path
        return seen
    finally:
        await db.close()


@pytest.mark.parametrize(("database_default", "expected"), [("off", "on"), ("local", "local"),
                                                           ("remote_apply", "remote_apply"), ("on", "on")])
async def test_connections_commit_synchronously_unless_the_operator_chose_another_durable_setting(
        database_default: str, expected: str) -> None:
    url = _database_with(database_default)
    try:
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as plain:
            row = plain.execute("SHOW synchronous_commit").fetchone()
            assert row is not None and row["synchronous_commit"] == database_default  # the database's own default
        assert await _sidecar_setting(url) == [expected] * 4
    finally:
        drop_database(url)


async def test_opening_warns_exactly_when_autovacuum_is_off(caplog: pytest.LogCaptureFixture) -> None:
    url = create_database()
    try:
        with psycopg.connect(url, autocommit=True) as plain:
            row = plain.execute("SELECT current_setting('autovacuum')").fetchone()
        assert row is not None
        db = PostgresDatabase(url, min_size=1, max_size=1, connect_timeout=5, retry_attempts=1)
        with caplog.at_level(logging.WARNING, logger="durable_sidecar.stores.postgres.db"):
            await db.open()
        await db.close()
        warned = [r for r in caplog.records if "autovacuum is off" in r.getMessage()]
        # This machine's shared server may run either way; the warning follows the server's setting.
        assert len(warned) == (1 if row[0] == "off" else 0), (row[0], [r.getMessage() for r in caplog.records])
    finally:
        drop_database(url)


async def _maintained(db: PostgresDatabase, table: str) -> list[str]:
    """What the stand-in did, once PostgreSQL's statistics show the last changes (flushed about once a second)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        done = await db.stand_in_for_autovacuum()
        if any(what.endswith(f" {table}") for what in done) or loop.time() > deadline:
            return done
        await asyncio.sleep(0.2)


async def test_with_autovacuum_off_the_sidecar_vacuums_and_analyses_its_own_tables_by_autovacuums_rules() -> None:
    url = create_database()
    try:
        await migrate(url)
        with psycopg.connect(url, autocommit=True) as plain:
            row = plain.execute("SELECT current_setting('autovacuum')").fetchone()
            assert row is not None
            autovacuum = row[0]
            plain.execute("CREATE TABLE not_ours (n integer)")
            plain.execute("INSERT INTO not_ours SELECT generate_series(1, 500)")
            plain.execute("""INSERT INTO durable_instances (namespace, workflow_id, instance_key, status,
                                                            created_by_execution_id)
                             SELECT 'ns', 'wf', 'k' || n, 'running', 'e' FROM generate_series(1, 200) n""")
        db = PostgresDatabase(url, min_size=1, max_size=1, connect_timeout=5, retry_attempts=1)
        await db.open()
        try:
            if autovacuum != "off":  # PostgreSQL maintains the tables itself: the sidecar leaves them alone
                assert await db.stand_in_for_autovacuum() == []
                return
            # 200 new rows: more than 50 + 10 % changed since the last analysis, few dead rows.
            done = await _maintained(db, "durable_instances")
            assert "ANALYZE durable_instances" in done and not any("not_ours" in what for what in done), done
            with psycopg.connect(url, autocommit=True) as plain:
                analysed = plain.execute("SELECT last_analyze FROM pg_stat_user_tables "
                                         "WHERE relname = 'durable_instances'").fetchone()
                assert analysed is not None and analysed[0] is not None
                # Nothing changed since: nothing is due.
                assert not any(w.endswith(" durable_instances") for w in await db.stand_in_for_autovacuum())
                plain.execute("DELETE FROM durable_instances WHERE instance_key <> 'k1'")  # 199 dead, 1 live
            done = await _maintained(db, "durable_instances")
            assert "VACUUM (ANALYZE) durable_instances" in done, done
            with psycopg.connect(url, autocommit=True) as plain:
                vacuumed = plain.execute("SELECT last_vacuum FROM pg_stat_user_tables "
                                         "WHERE relname = 'durable_instances'").fetchone()
                assert vacuumed is not None and vacuumed[0] is not None
        finally:
            await db.close()
    finally:
        drop_database(url)
