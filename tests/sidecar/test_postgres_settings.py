"""The sidecar's PostgreSQL connections commit synchronously, and it warns when autovacuum is off.

"An acknowledged checkpoint is committed with synchronous commit" must hold on a
server (or database) whose default is synchronous_commit=off; a stronger or
other explicit setting (local, remote_apply ...) is the operator's and is kept.
"""

from __future__ import annotations

import contextlib
import logging

import psycopg
import pytest
from durable_sidecar.stores.base import Conn
from durable_sidecar.stores.postgres.db import PostgresDatabase, pg
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
