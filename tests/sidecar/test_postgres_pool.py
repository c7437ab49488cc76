"""The PostgreSQL connections: one caller at a time keeps one warm connection, concurrent callers get them all.

psycopg_pool hands out idle connections oldest first. Once a burst had grown the pool, a lone caller went
round every connection, each time to the PostgreSQL backend that had slept longest (about 0.4 ms more per
save, measured in docs/bench/findings.md); the hot connection is taken first whenever it is free.
"""

from __future__ import annotations

import asyncio

import pytest
from durable_sidecar.stores.base import Conn
from durable_sidecar.stores.postgres.db import PostgresDatabase, pg

from tests.sidecar.helpers import create_database, drop_database

pytestmark = pytest.mark.postgres_only(reason="the PostgreSQL connection pools")


async def _backend(conn: Conn, pause_seconds: float = 0.0) -> int:
    cur = await pg(conn).execute("SELECT pg_backend_pid() AS pid, pg_sleep(%s)", (pause_seconds,))
    row = await cur.fetchone()
    assert row is not None
    return int(row["pid"])


async def test_calls_one_at_a_time_reuse_one_connection_after_a_burst_used_them_all() -> None:
    url = create_database()
    db = PostgresDatabase(url, min_size=2, max_size=6, connect_timeout=5, retry_attempts=1)
    try:
        await db.open()
        assert db.pool_stats()["pool_size"] == 2 and db.pool_stats()["pool_max"] == 6
        # Six callers at once, each holding its connection a moment: six connections, the pool's whole size.
        burst = await asyncio.gather(*(db.single(lambda c: _backend(c, 0.2)) for _ in range(6)))
        assert len(set(burst)) == 6
        assert db.pool_stats()["pool_size"] == 6
        # Then one at a time, in statements and in transactions: always the same backend.
        alone = [await db.single(_backend) for _ in range(12)] + [await db.transaction(_backend) for _ in range(4)]
        assert len(set(alone)) == 1, alone
        # Two at a time: the hot connection and one other, never a wait for each other.
        pairs = [await asyncio.gather(db.single(lambda c: _backend(c, 0.02)), db.single(lambda c: _backend(c, 0.02)))
                 for _ in range(4)]
        assert all(len(set(p)) == 2 for p in pairs)
    finally:
        await db.close()
        drop_database(url)


async def test_one_connection_in_all_is_the_one_pool() -> None:
    url = create_database()
    db = PostgresDatabase(url, min_size=1, max_size=1, connect_timeout=5, retry_attempts=1)
    try:
        await db.open()
        assert db.hot is None and len(db.pools) == 1
        assert db.pool_stats()["pool_max"] == 1
        assert len({await db.single(_backend) for _ in range(3)}) == 1
    finally:
        await db.close()
        drop_database(url)
