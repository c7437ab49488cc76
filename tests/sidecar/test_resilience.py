"""Redis outages and sidecar crashes change no answer."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from durable.v1 import checkpoint_pb2, instance_pb2
from durable_sidecar import app

from tests.conftest import make_settings
from tests.sidecar.helpers import SidecarProcess, Stubs, channel, redis_server
from tests.sidecar.test_checkpoints import WF, item, latest, new_key, save, start


async def _answers(s: Stubs, key: str) -> tuple[bytes, int, str, int]:
    cp = await latest(s, key)
    one = await s.checkpoints.GetCheckpoint(checkpoint_pb2.GetCheckpointRequest(
        workflow_id=WF, instance_key=key, sequence=1, include_state=True), metadata=s.metadata)
    inst = await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                         metadata=s.metadata)
    return cp.state_json + one.checkpoint.state_json, cp.sequence, cp.sha256, inst.instance.last_sequence


async def test_redis_stopped_mid_test_changes_no_answer(database_url: str) -> None:
    with redis_server() as redis:
        settings = make_settings(database_url, redis_url=redis.url, auth_tokens="redis-token-1=ns-redis",
                                 redis_timeout_seconds=0.2)
        sidecar = await app.start(settings)
        ch = channel(sidecar.port)
        s = Stubs(ch, "redis-token-1")
        try:
            key = new_key()
            await start(s, key)
            await save(s, item(key, "payment", {"paid": True}), item(key, "inventory", {"sku": "A", "n": 2}))
            before = await _answers(s, key)  # served through the cache
            redis.stop()
            during = await _answers(s, key)
            assert during == before
            # Writes and a resume keep working with Redis down.
            await save(s, item(key, "shipping", {"carrier": "DHL"}))
            resumed = await start(s, "other-" + key)
            assert resumed.outcome == instance_pb2.START_OUTCOME_STARTED
            down = await _answers(s, key)
            assert json.loads(down[0][: down[0].index(b"}") + 1]) == {"carrier": "DHL"}
            redis.start()  # back, empty: answers are still the same
            after = await _answers(s, key)
            assert after == down
        finally:
            await ch.close()
            await sidecar.stop(grace=0.5)


async def eventually_cached(client: object) -> None:
    """The cache write runs after the reply: wait for it (a few seconds at most)."""
    for _ in range(100):
        if client.dbsize() > 0:  # type: ignore[attr-defined]
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the state was never cached")


async def test_flushed_cache_changes_no_answer(database_url: str) -> None:
    import redis as redis_lib

    with redis_server() as redis:
        settings = make_settings(database_url, redis_url=redis.url, auth_tokens="flush-token-1=ns-flush")
        sidecar = await app.start(settings)
        ch = channel(sidecar.port)
        s = Stubs(ch, "flush-token-1")
        try:
            key, small = new_key(), new_key()
            client = redis_lib.Redis.from_url(redis.url)
            # A small state is served by PostgreSQL by primary key, as cheaply as by Redis: never cached.
            await start(s, small)
            await save(s, item(small, "payment", {"paid": True}))
            await _answers(s, small)
            assert client.dbsize() == 0
            # A state from the compression threshold (16 KiB) on is.
            await start(s, key)
            await save(s, item(key, "payment", {"paid": True, "lines": ["x" * 100] * 200}))
            before = await _answers(s, key)
            await eventually_cached(client)
            client.flushall()
            assert await _answers(s, key) == before
            # A corrupted cache entry is ignored too (the SHA-256 must match).
            for k in client.keys("durable:v1:*:cp:*"):
                client.set(k, b'{"tampered": true}')
            assert await _answers(s, key) == before
            client.close()
        finally:
            await ch.close()
            await sidecar.stop(grace=0.5)


async def test_checkpoint_acknowledged_before_kill9_survives_restart(database_url: str) -> None:
    env = {"DURABLE_DATABASE_URL": database_url, "DURABLE_REDIS_URL": "",
           "DURABLE_AUTH_TOKENS": "crash-token-1=ns-crash"}
    proc = SidecarProcess(env)
    proc.start()
    key = new_key()
    try:
        ch = channel(proc.port)
        s = Stubs(ch, "crash-token-1")
        await start(s, key)
        acked = await save(s, item(key, "payment", {"charged": 1999}))
        assert acked.results[0].checkpoint.sequence == 1
        proc.kill9()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await latest(s, key)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        await ch.close()
        proc.start()  # same port, same database
        ch = channel(proc.port)
        s = Stubs(ch, "crash-token-1")
        got = await latest(s, key)
        assert got.sequence == 1 and json.loads(got.state_json) == {"charged": 1999}
        resumed = await start(s, key, "exec-after-crash", include_state=True)
        assert resumed.latest_checkpoint.sequence == 1
        await ch.close()
        assert proc.terminate() == 0  # SIGTERM: graceful stop exits cleanly
    finally:
        proc.stop()


async def test_one_redis_shared_by_two_databases_never_answers_for_the_other() -> None:
    """Same namespace, same key, one Redis, two databases (a database recreated from scratch, or
    staging beside production): the second database's first claim runs the side effect."""
    from durable.v1 import idempotency_pb2 as pb
    from durable_sidecar.stores.backend import migrate

    from tests.sidecar.helpers import create_database, drop_database
    from tests.sidecar.test_idempotency import claim_one, complete

    urls = [create_database(), create_database()]
    try:
        for url in urls:
            await migrate(url)
        with redis_server() as redis:
            sidecars = [await app.start(make_settings(url, redis_url=redis.url, auth_tokens="shared-token=ns-shared"))
                        for url in urls]
            channels = [channel(s.port) for s in sidecars]
            a, b = (Stubs(ch, "shared-token") for ch in channels)
            try:
                keys = [new_key(), new_key()]
                for key in keys:
                    first = await claim_one(a, key, {"amount": 5})
                    assert first.outcome == pb.CLAIM_OUTCOME_ACQUIRED
                    # Results this large are cached in Redis (smaller ones are read from PostgreSQL).
                    await complete(a, key, first.key.attempt, {"charge": "ch_1", "receipt": "r" * 20_000})
                    replay = await claim_one(a, key, {"amount": 5})
                    assert replay.outcome == pb.CLAIM_OUTCOME_DUPLICATE
                import redis as redis_lib

                assert len(redis_lib.Redis.from_url(redis.url).keys("durable:v1:*:idem:*")) == 2
                # A batch claim asks Redis first: the other database's cached keys must not answer.
                batch = pb.ClaimRequest(items=[pb.ClaimItem(scope="payment", key=k, payload_json=b'{"amount": 5}')
                                               for k in keys])
                others = (await b.idempotency.Claim(batch, metadata=b.metadata)).results
                assert [o.outcome for o in others] == [pb.CLAIM_OUTCOME_ACQUIRED] * 2, \
                    "the other database's completed key was replayed"
            finally:
                for ch in channels:
                    await ch.close()
                for s in sidecars:
                    await s.stop(grace=0.5)
    finally:
        for url in urls:
            drop_database(url)
