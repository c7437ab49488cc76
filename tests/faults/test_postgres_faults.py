"""PostgreSQL restarts, network faults between sidecar and PostgreSQL, and connection exhaustion.

All against a PostgreSQL cluster the test creates itself (initdb on a free port)
or a loopback proxy in front of it; the machine's shared PostgreSQL is never touched.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterator

import grpc
import psycopg
import pytest
from durable.v1 import checkpoint_pb2
from durable_sidecar import app
from durable_sidecar.stores.backend import migrate

from tests.conftest import make_settings
from tests.faults.infra import TcpProxy, ThrowawayPostgres, check_invariants
from tests.faults.report import TALLY
from tests.sidecar.helpers import Stubs, channel
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start

pytestmark = pytest.mark.postgres_only(
    reason="PostgreSQL server faults (restarts, kill -9 of the server, network faults between sidecar and server, "
           "pool and max_connections exhaustion): the embedded database has no server, network or pool")


@pytest.fixture(scope="module")
def pg() -> Iterator[ThrowawayPostgres]:
    server = ThrowawayPostgres(max_connections=30)
    server.start()
    asyncio.run(migrate(server.url))
    yield server
    server.cleanup()


async def _sidecar(database_url: str, token: str, **overrides: object) -> app.Sidecar:
    base: dict[str, object] = {"redis_url": "", "auth_tokens": f"{token}=ns-{token}", "db_pool_timeout_seconds": 2.0,
                               "db_connect_timeout_seconds": 5.0}
    base.update(overrides)
    return await app.start(make_settings(database_url, **base))


@pytest.fixture
async def stack(pg: ThrowawayPostgres) -> AsyncIterator[tuple[app.Sidecar, Stubs]]:
    token = f"pgfault-{random.randrange(10**9)}"
    sidecar = await _sidecar(pg.url, token)
    ch = channel(sidecar.port)
    yield sidecar, Stubs(ch, token)
    await ch.close()
    await sidecar.stop(grace=0.5)


async def _writer(s: Stubs, key: str, stop: asyncio.Event, acked: dict[tuple[str, int], str],
                  errors: dict[str, int]) -> int:
    ops = 0
    await start(s, key)
    n = 0
    while not stop.is_set():
        n += 1
        ops += 1
        try:
            reply = await save(s, item(key, f"step-{n}", {"n": n, "key": key}))
            cp = reply.results[0].checkpoint
            acked[(key, cp.sequence)] = cp.sha256
        except grpc.aio.AioRpcError as exc:
            errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
            await asyncio.sleep(0.05)
    return ops


def _lost(database_url: str, acked: dict[tuple[str, int], str]) -> list[str]:
    with psycopg.connect(database_url) as conn:
        stored = {(k, seq): sha for k, seq, sha in conn.execute(
            "SELECT instance_key, sequence, sha256 FROM durable_checkpoints")}
    return [f"{k}#{seq}" for (k, seq), sha in acked.items() if stored.get((k, seq)) != sha]


async def test_postgres_restarts_lose_no_acknowledged_write(pg: ThrowawayPostgres,
                                                            stack: tuple[app.Sidecar, Stubs]) -> None:
    _, s = stack
    stop = asyncio.Event()
    acked: dict[tuple[str, int], str] = {}
    errors: dict[str, int] = {}
    writers = [asyncio.create_task(_writer(s, new_key(), stop, acked, errors)) for _ in range(6)]
    restarts = 0
    recovery: list[float] = []
    for i in range(3):
        await asyncio.sleep(1.0)
        if i % 2:
            await asyncio.to_thread(pg.kill9)  # a crash, not a clean shutdown
        else:
            await asyncio.to_thread(pg.stop, "fast")
        restarts += 1
        await asyncio.sleep(0.7)
        # During the outage the sidecar answers UNAVAILABLE (never INTERNAL, never a hang).
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await save(s, item(new_key(), "x", {}))
        assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND)
        await asyncio.to_thread(pg.start)
        accepting = time.monotonic()
        probe = new_key()
        while True:  # bounded by the test timeout; measures time to recovery
            try:
                await start(s, probe)
                break
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE
                await asyncio.sleep(0.05)
        recovery.append(time.monotonic() - accepting)
    await asyncio.sleep(1.0)
    stop.set()
    ops = sum(await asyncio.gather(*writers))
    assert set(errors) <= {"UNAVAILABLE"}, errors
    lost = _lost(pg.url, acked)
    assert lost == []
    assert check_invariants(pg.url) == []
    assert len(acked) > 20
    TALLY.add("postgres restart/kill -9 while writing", faults=restarts, operations=ops, lost=len(lost),
              note=f"acked={len(acked)} errors={errors} recovery_s={[round(r, 2) for r in recovery]}")


# A one-item save is one statement in autocommit (durable_save_checkpoint, migration 0006), and so is a
# batch of plain items (durable_save_checkpoints, migration 0009): their ambiguous moment is that
# statement's answer. A batch that adds step results is a transaction: its moment is the COMMIT.
@pytest.mark.parametrize("items, cut_at, mode", [
    (1, b"durable_save_checkpoint(", checkpoint_pb2.STATE_MODE_REPLACE),
    (2, b"durable_save_checkpoints(", checkpoint_pb2.STATE_MODE_REPLACE),
    (2, b"COMMIT", checkpoint_pb2.STATE_MODE_ADD_STEP_RESULT)],
    ids=["one-statement-save", "one-statement-batch", "batch-commit"])
async def test_ambiguous_commit_is_resolved_by_idempotent_retry(pg: ThrowawayPostgres, items: int,
                                                                cut_at: bytes, mode: int) -> None:
    """The connection dies after the commit reached the server but before its answer: the retry finds the write."""
    proxy = TcpProxy(target_port=pg.port)
    proxy.start()
    token = f"ambig-{random.randrange(10**9)}"
    sidecar = await _sidecar(f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres", token)
    ch = channel(sidecar.port)
    s = Stubs(ch, token)
    try:
        keys = [new_key() for _ in range(items)]
        for key in keys:
            await start(s, key)
        proxy.reset_after = cut_at
        reply = await save(s, *[item(key, "payment", {"charged": 1999}, state_mode=mode) for key in keys])
        assert proxy.resets == 1, f"the proxy must have cut the connection at {cut_at.decode()}"
        for result in reply.results:
            assert result.checkpoint.sequence == 1
            assert result.deduplicated, "the retry inside the sidecar must have found the committed write"
        with psycopg.connect(pg.url) as conn:
            rows = conn.execute("SELECT count(*) FROM durable_checkpoints WHERE instance_key = ANY(%s)",
                                (keys,)).fetchone()
        assert rows == (items,)
        assert check_invariants(pg.url) == []
        TALLY.add(f"reset at {cut_at.decode()} (ambiguous commit, {items} item(s))", faults=1, operations=2,
                  note=f"deduplicated_on_retry={all(r.deduplicated for r in reply.results)}")
    finally:
        await ch.close()
        await sidecar.stop(grace=0.5)
        proxy.stop()


async def test_network_latency_and_drops_to_postgres(pg: ThrowawayPostgres) -> None:
    proxy = TcpProxy(target_port=pg.port)
    proxy.start()
    token = f"net-{random.randrange(10**9)}"
    sidecar = await _sidecar(f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres", token)
    ch = channel(sidecar.port)
    s = Stubs(ch, token)
    try:
        stop = asyncio.Event()
        acked: dict[tuple[str, int], str] = {}
        errors: dict[str, int] = {}
        writers = [asyncio.create_task(_writer(s, new_key(), stop, acked, errors)) for _ in range(4)]
        await asyncio.sleep(0.5)
        proxy.latency_s = 0.02
        await asyncio.sleep(1.0)
        proxy.latency_s = 0.0
        drops = 0
        for _ in range(3):
            await asyncio.to_thread(proxy.drop_all)
            drops += 1
            await asyncio.sleep(0.5)
        proxy.refusing = True
        await asyncio.to_thread(proxy.drop_all)
        await asyncio.sleep(0.5)
        proxy.refusing = False
        await asyncio.sleep(1.5)
        stop.set()
        ops = sum(await asyncio.gather(*writers))
        assert set(errors) <= {"UNAVAILABLE"}, errors
        lost = _lost(pg.url, acked)
        assert lost == [] and check_invariants(pg.url) == []
        # After the faults the sidecar works again without a restart.
        key = new_key()
        await start(s, key)
        assert (await save(s, item(key, "after", {"ok": True}))).results[0].checkpoint.sequence == 1
        TALLY.add("latency 20 ms, connection drops, refusal", faults=drops + 2, operations=ops, lost=len(lost),
                  note=f"acked={len(acked)} errors={errors}")
    finally:
        await ch.close()
        await sidecar.stop(grace=0.5)
        proxy.stop()


async def test_exhausted_pool_answers_unavailable_within_timeout_and_recovers(pg: ThrowawayPostgres) -> None:
    token = f"pool-{random.randrange(10**9)}"
    sidecar = await _sidecar(pg.url, token, db_pool_min=1, db_pool_max=1, db_pool_timeout_seconds=0.5)
    ch = channel(sidecar.port)
    s = Stubs(ch, token)
    try:
        key = new_key()
        await start(s, key)
        # Hold the instance row locked from outside: the sidecar's only connection waits on it.
        blocker = await psycopg.AsyncConnection.connect(pg.url)
        await blocker.execute("SELECT 1 FROM durable_instances WHERE instance_key = %s FOR UPDATE", (key,))
        stuck = asyncio.create_task(save(s, item(key, "slow", {"a": 1})))
        await asyncio.sleep(0.3)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await start(s, new_key())
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "connection" in (err.value.details() or "")
        # A caller's own deadline is honoured too: never a hang.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await s.checkpoints.GetLatestCheckpoint(checkpoint_pb2.GetLatestCheckpointRequest(
                workflow_id=WF, instance_key=key), metadata=s.metadata, timeout=0.2)
        assert err.value.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
        await blocker.rollback()
        await blocker.close()
        assert (await stuck).results[0].checkpoint.sequence == 1
        assert (await start(s, new_key())).outcome  # recovered
        TALLY.add("pool exhausted (1 connection held)", faults=1, operations=4)
    finally:
        await ch.close()
        await sidecar.stop(grace=0.5)


async def test_postgres_max_connections_reached_answers_unavailable_and_recovers() -> None:
    pg = ThrowawayPostgres(max_connections=6)
    pg.start()
    try:
        await migrate(pg.url)
        token = f"maxconn-{random.randrange(10**9)}"
        # No background query may grow the pool while the test holds its one connection: the health
        # ping, the gauge refresh, the session sweep (every fifth of the grace), the limit sweep and the bulk
        # operation loop would open a second one and serve the calls this test expects refused.
        sidecar = await _sidecar(pg.url, token, db_pool_min=1, db_pool_max=4, db_pool_timeout_seconds=0.7,
                                 health_check_interval_seconds=300, instance_gauges_interval_seconds=0,
                                 session_grace_seconds=300, limit_sweep_interval_seconds=300,
                                 operation_poll_interval_seconds=300)
        assert sidecar.db.pool_stats()["pool_size"] == 1
        ch = channel(sidecar.port)
        s = Stubs(ch, token)
        hogs: list[psycopg.AsyncConnection[tuple[object, ...]]] = []
        try:
            # Keep the pool's only connection busy: a save waits on a row this test locks.
            key = new_key()
            await start(s, key)
            blocker = await psycopg.AsyncConnection.connect(pg.url)
            hogs.append(blocker)
            await blocker.execute("SELECT 1 FROM durable_instances WHERE instance_key = %s FOR UPDATE", (key,))
            stuck = asyncio.create_task(save(s, item(key, "slow", {"a": 1})))
            await asyncio.sleep(0.3)
            while True:  # take every remaining server connection
                try:
                    hogs.append(await psycopg.AsyncConnection.connect(pg.url))
                except psycopg.OperationalError as exc:
                    assert "too many" in str(exc) or "remaining connection slots" in str(exc)
                    break
            # More concurrent calls than the one pooled connection can serve: the rest need new connections.
            results = await asyncio.gather(*[start(s, new_key()) for _ in range(8)], return_exceptions=True)
            codes = {r.code().name for r in results if isinstance(r, grpc.aio.AioRpcError)}
            assert codes == {"UNAVAILABLE"}, codes
            assert not [r for r in results if isinstance(r, Exception) and not isinstance(r, grpc.aio.AioRpcError)]
            for h in hogs:
                await h.close()
            assert (await stuck).results[0].checkpoint.sequence == 1
            ok = await asyncio.gather(*[start(s, new_key()) for _ in range(8)])
            assert len(ok) == 8
            TALLY.add("PostgreSQL max_connections reached", faults=1, operations=16,
                      note=f"unavailable={sum(isinstance(r, Exception) for r in results)}")
        finally:
            for h in hogs:
                await h.close()
            await ch.close()
            await sidecar.stop(grace=0.5)
    finally:
        pg.cleanup()


@pytest.mark.parametrize("pool", ["short timeouts", "the defaults"])
async def test_a_database_outage_longer_than_the_grace_ends_no_live_session(pg: ThrowawayPostgres, pool: str) -> None:
    """Found by `make chaos`: no heartbeat can be recorded while PostgreSQL is down, so the first sweep after it
    came back ended every session of a live n8n process, fenced its executions and resumed their instances. Now
    sessions are judged again only one grace and one heartbeat after a sweep works again. With the default pool
    settings a sweep does not fail but waits the outage out in its retries, then judges: the gap counts too."""
    from durable.v1 import session_pb2

    token = f"pgfault-{random.randrange(10**9)}"
    if pool == "the defaults":
        sidecar = await app.start(make_settings(pg.url, redis_url="", auth_tokens=f"{token}=ns-{token}",
                                                session_grace_seconds=1.0))
    else:
        sidecar = await _sidecar(pg.url, token, session_grace_seconds=1.0)
    ch = channel(sidecar.port)
    s = Stubs(ch, token)
    try:
        opened = await s.sessions.OpenSession(session_pb2.OpenSessionRequest(
            host="n8n-host", pid=4242, mode="regular", client="test"), metadata=s.metadata)
        sid = opened.session.session_id
        ended: list[str] = []

        async def heartbeat(seconds: float) -> None:  # as the node package does: every interval, errors ignored
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    reply = await s.sessions.Heartbeat(session_pb2.HeartbeatRequest(session_id=sid),
                                                       metadata=s.metadata, timeout=2)
                    if reply.ended:
                        ended.append(reply.end_reason)
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.2)

        await heartbeat(2.0)  # the sidecar judges sessions by now (grace + heartbeat after its start)
        await asyncio.to_thread(pg.stop, "fast")
        await asyncio.sleep(2.5)  # longer than the grace: no heartbeat can be recorded meanwhile
        await asyncio.to_thread(pg.start)
        # The database answers again; the process's next heartbeat lands a few sweeps later (its interval is
        # the sweep's, and the two are not in step).
        for _ in range(100):
            try:
                await s.sessions.ListSessions(session_pb2.ListSessionsRequest(), metadata=s.metadata, timeout=2)
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        await heartbeat(3.0)
        assert not ended, f"a live process's session was ended by a database outage: {ended}"
        listed = await s.sessions.ListSessions(session_pb2.ListSessionsRequest(), metadata=s.metadata)
        assert [x.end_reason for x in listed.sessions if x.session_id == sid] == [""]
    finally:
        await ch.close()
        await sidecar.stop(grace=0.5)
