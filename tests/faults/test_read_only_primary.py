"""A primary that turns read-only under the sidecar (a demotion the connections survive) answers UNAVAILABLE, then recovers.

Patroni stops PostgreSQL to demote it, which the failover tests cover; a server
made read-only without a restart keeps the pooled connections open, and every
write on them fails with SQLSTATE 25006. Those must be retried and reported as
UNAVAILABLE (retryable), never INTERNAL, and writes must work again once the
server accepts them, with no sidecar restart.
"""

from __future__ import annotations

import random
import time

import grpc
import psycopg
import pytest
from durable_sidecar import app
from durable_sidecar.stores.backend import migrate

from tests.conftest import make_settings
from tests.faults.infra import throwaway_postgres
from tests.faults.report import TALLY
from tests.sidecar.helpers import Stubs, channel
from tests.sidecar.test_checkpoints import item, new_key, save, start

pytestmark = pytest.mark.postgres_only(reason="a PostgreSQL server switched to read-only; the embedded database has no server")


POOL_MAX = 4


def _read_only(url: str, on: bool) -> None:
    """Switch the server's default, and wait until a new session sees it (the postmaster has reloaded).

    A backend already open reads the reloaded file only between two statements:
    the first statement a pooled connection runs after the reload may still see
    the old value. That is PostgreSQL's, so the test allows one write per pooled
    connection to pass before the refusals begin.
    """
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET default_transaction_read_only = {'on' if on else 'off'}")
        conn.execute("SELECT pg_reload_conf()")
    want = "on" if on else "off"
    for _ in range(200):
        with psycopg.connect(url, autocommit=True) as conn:
            if conn.execute("SHOW default_transaction_read_only").fetchone()[0] == want:
                return
        time.sleep(0.05)
    raise AssertionError(f"the server did not reload default_transaction_read_only = {want}")


async def test_writes_on_a_server_turned_read_only_are_unavailable_then_succeed_again() -> None:
    with throwaway_postgres() as pg:
        await migrate(pg.url)
        token = f"ro-{random.randrange(10**9)}"
        sidecar = await app.start(make_settings(pg.url, redis_url="", auth_tokens=f"{token}={token}",
                                                db_retry_attempts=3, db_pool_max=POOL_MAX))
        ch = channel(sidecar.port)
        s = Stubs(ch, token)
        try:
            key = new_key()
            await start(s, key)
            _read_only(pg.url, True)
            passed = 0  # writes on pooled connections that had not yet read the reload
            for attempt in range(POOL_MAX + 1):
                try:
                    await save(s, item(key, f"paid-{attempt}", {"n": attempt}))
                except grpc.aio.AioRpcError as err:
                    assert err.code() == grpc.StatusCode.UNAVAILABLE, err
                    break
                passed += 1
            else:
                pytest.fail(f"{POOL_MAX + 1} writes on a read-only server all succeeded")
            _read_only(pg.url, False)
            reply = await save(s, item(key, "shipped", {"n": 1}))
            assert reply.results[0].checkpoint.sequence == passed + 1
            TALLY.add("server turned read-only under the pool (25006)", faults=1, operations=3)
        finally:
            await ch.close()
            await sidecar.stop(grace=0.5)
