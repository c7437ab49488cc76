"""Idempotency keys through the real gRPC server, on PostgreSQL with Redis and on the embedded database."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
import redis as redis_lib
from durable.v1 import idempotency_pb2 as pb
from durable_sidecar import app
from durable_sidecar.services.idempotency import fingerprint_of
from prometheus_client import REGISTRY

from tests.conftest import Harness, make_settings
from tests.sidecar.helpers import Stubs, channel, redis_server, two_sidecar_processes
from tests.sidecar.storage import ago, fetch

SCOPE = "payment"
ACQUIRED, DUPLICATE, IN_PROGRESS = pb.CLAIM_OUTCOME_ACQUIRED, pb.CLAIM_OUTCOME_DUPLICATE, pb.CLAIM_OUTCOME_IN_PROGRESS


def new_key() -> str:
    return f"charge-{uuid.uuid4().hex[:10]}"


def item(key: str, payload: object = None, *, scope: str = SCOPE, raw: bytes | None = None, **kw: Any) -> pb.ClaimItem:
    body = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
    return pb.ClaimItem(scope=scope, key=key, payload_json=body, **kw)


async def claim(s: Stubs, *items: pb.ClaimItem) -> pb.ClaimResponse:
    return await s.idempotency.Claim(pb.ClaimRequest(items=items), metadata=s.metadata)


async def claim_one(s: Stubs, key: str, payload: object = None, **kw: Any) -> pb.ClaimResult:
    return (await claim(s, item(key, payload, **kw))).results[0]


async def complete(s: Stubs, key: str, attempt: int, result: object, scope: str = SCOPE) -> pb.IdempotencyKey:
    reply = await s.idempotency.Complete(pb.CompleteRequest(scope=scope, key=key, attempt=attempt,
                                                            result_json=json.dumps(result).encode()),
                                         metadata=s.metadata)
    return reply.key


async def release(s: Stubs, key: str, attempt: int, error: str = "card declined") -> pb.IdempotencyKey:
    reply = await s.idempotency.Release(pb.ReleaseRequest(scope=SCOPE, key=key, attempt=attempt, error_message=error),
                                        metadata=s.metadata)
    return reply.key


async def get_key(s: Stubs, key: str) -> pb.IdempotencyKey:
    return (await s.idempotency.GetKey(pb.GetKeyRequest(scope=SCOPE, key=key), metadata=s.metadata)).key


async def refused(call: Awaitable[object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value.code(), err.value.details() or ""


async def sql(database_url: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    return await fetch(database_url, query, *params)


def namespace(h: Harness, s: Stubs) -> str:
    return h.sidecar.settings.tokens[s.token]


def claims_counted(outcome: str) -> float:
    return REGISTRY.get_sample_value("durable_idempotency_claims_total", {"outcome": outcome}) or 0.0


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 15.0) -> None:
    """Polls until check() holds (bounded); no assertion on how long it took."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        await asyncio.sleep(0.1)


def test_fingerprint_ignores_key_order_whitespace_and_integral_floats() -> None:
    a = fingerprint_of(b'{"amount": 42, "customer": {"id": "c1", "tags": ["a", "b"]}}')
    b = fingerprint_of(b'{ "customer" : {"tags":["a","b"],"id":"c1"},\n  "amount":42.0 }')
    assert a == b and len(a) == 64
    assert fingerprint_of(b'{"customer": {"id": "c1", "tags": ["b", "a"]}, "amount": 42}') != a  # arrays keep order
    assert fingerprint_of('{"name": "Zoë"}'.encode()) == fingerprint_of(b'{"name":"Zo\\u00eb"}')


async def test_claim_acquires_once_then_replays_the_stored_result(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    acquired_before, duplicate_before = claims_counted("acquired"), claims_counted("duplicate")
    first = await claim_one(s, key, {"order": "o-1", "amount": 42}, holder="exec-1")
    assert first.outcome == ACQUIRED and first.key.attempt == 1
    assert first.key.status == pb.KEY_STATUS_IN_PROGRESS and first.key.HasField("lease_expires_at")
    assert first.key.fingerprint == fingerprint_of(b'{"order":"o-1","amount":42}')
    assert len(first.key.derived_key) == 64
    # While the holder runs, everyone else is told so, with the lease's end.
    busy = await claim_one(s, key, {"order": "o-1", "amount": 42}, holder="exec-2")
    assert busy.outcome == IN_PROGRESS and busy.key.lease_expires_at == first.key.lease_expires_at
    done = await complete(s, key, 1, {"charge": "ch_1"})
    assert done.status == pb.KEY_STATUS_COMPLETED and not done.HasField("lease_expires_at")
    for _ in range(3):  # from PostgreSQL first, then from the cache: the same answer
        again = await claim_one(s, key, {"amount": 42, "order": "o-1"})
        assert again.outcome == DUPLICATE and json.loads(again.key.result_json) == {"charge": "ch_1"}
        assert again.key.attempt == 1 and again.key.derived_key == first.key.derived_key
    # Completing again (a retry whose answer was lost) returns the stored key unchanged.
    retried = await complete(s, key, 1, {"charge": "ch_OTHER"})
    assert json.loads(retried.result_json) == {"charge": "ch_1"} and retried.updated_at == done.updated_at
    got = await get_key(s, key)
    assert got.status == pb.KEY_STATUS_COMPLETED and json.loads(got.result_json) == {"charge": "ch_1"}
    assert claims_counted("acquired") - acquired_before == 1 and claims_counted("duplicate") - duplicate_before == 3
    # Another namespace never sees the key; its own key of the same name is separate and forwards another derived key.
    code, _ = await refused(harness.beta.idempotency.GetKey(pb.GetKeyRequest(scope=SCOPE, key=key),
                                                            metadata=harness.beta.metadata))
    assert code == grpc.StatusCode.NOT_FOUND
    other = await claim_one(harness.beta, key, {"order": "o-1", "amount": 42})
    assert other.outcome == ACQUIRED and other.key.attempt == 1 and other.key.derived_key != first.key.derived_key


@pytest.mark.postgres_only(reason="two sidecar processes on one database: the embedded database has one owner "
                                   "(a second sidecar is refused, see test_embedded.py)")
async def test_64_concurrent_claims_over_two_sidecar_processes_acquire_exactly_once() -> None:
    async with two_sidecar_processes("two-procs-token", "ns-two-procs") as (url, stubs):
        key = new_key()
        effects = 0

        async def deliver(i: int) -> int:
            nonlocal effects
            s = stubs[i % 2]
            result = await claim_one(s, key, {"order": key, "amount": 99}, holder=f"exec-{i}")
            if result.outcome == ACQUIRED:
                effects += 1
                await complete(s, key, result.key.attempt, {"charge": "ch_two"})
            return int(result.outcome)

        outcomes = Counter(await asyncio.gather(*(deliver(i) for i in range(64))))
        assert outcomes[ACQUIRED] == 1 and effects == 1
        assert outcomes[IN_PROGRESS] + outcomes[DUPLICATE] == 63
        for s in stubs:  # both processes now replay the one result
            again = await claim_one(s, key, {"amount": 99, "order": key})
            assert again.outcome == DUPLICATE and json.loads(again.key.result_json) == {"charge": "ch_two"}
        rows = await sql(url, "SELECT status, attempt FROM durable_idempotency_keys WHERE key = %s", key)
        assert rows == [("completed", 1)]


async def test_side_effect_runs_once_over_1000_deliveries_including_while_in_flight(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    payload = {"order": key, "amount": 42}
    effects = 0
    outcomes: Counter[int] = Counter()
    seen_in_flight = asyncio.Event()

    async def deliver() -> None:
        nonlocal effects
        result = await claim_one(s, key, payload)
        outcomes[result.outcome] += 1
        if result.outcome == ACQUIRED:
            effects += 1  # the side effect
            # Stay in flight until other deliveries have been told the key is in progress.
            await asyncio.wait_for(seen_in_flight.wait(), timeout=30)
            await complete(s, key, result.key.attempt, {"charge": "ch_once"})
        elif result.outcome == IN_PROGRESS:
            if outcomes[IN_PROGRESS] >= 25:
                seen_in_flight.set()
        else:
            assert result.outcome == DUPLICATE and json.loads(result.key.result_json) == {"charge": "ch_once"}

    slots = asyncio.Semaphore(32)

    async def bounded() -> None:
        async with slots:
            await deliver()

    await asyncio.gather(*(bounded() for _ in range(1000)))
    assert effects == 1 and outcomes[ACQUIRED] == 1
    assert outcomes[IN_PROGRESS] >= 25 and outcomes[DUPLICATE] >= 1
    assert sum(outcomes.values()) == 1000
    last = await claim_one(s, key, payload)
    assert last.outcome == DUPLICATE and last.key.attempt == 1


async def test_different_payload_is_failed_precondition_and_stored_result_unchanged(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    first = await claim_one(s, key, raw=b'{"order": "o-7", "amount": 10, "currency": "EUR"}')
    await complete(s, key, first.key.attempt, {"charge": "ch_7"})
    before = await get_key(s, key)
    code, details = await refused(claim(s, item(key, raw=b'{"order": "o-7", "amount": 11, "currency": "EUR"}')))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert key in details and "different payload" in details and "items[0]" in details
    assert await get_key(s, key) == before
    # The same payload with its keys reordered and other whitespace is a duplicate.
    same = await claim_one(s, key, raw=b'{\n  "currency":"EUR",\n  "amount": 10,\n  "order": "o-7"\n}')
    assert same.outcome == DUPLICATE and json.loads(same.key.result_json) == {"charge": "ch_7"}
    # A caller-computed fingerprint is compared as given (here: the sidecar's own rule).
    by_hash = await claim_one(s, key, fingerprint=before.fingerprint.upper())
    assert by_hash.outcome == DUPLICATE
    code, _ = await refused(claim(s, item(key, fingerprint="ab" * 32)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    # No fingerprint at all matches only another claim without one.
    bare = new_key()
    assert (await claim_one(s, bare)).outcome == ACQUIRED
    code, _ = await refused(claim(s, item(bare, {"a": 1})))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert await get_key(s, key) == before


async def test_mismatch_in_a_batch_claims_nothing_and_names_the_item(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    used, fresh = new_key(), new_key()
    await claim_one(s, used, {"v": 1})
    code, details = await refused(claim(s, item(fresh, {"v": 1}), item(used, {"v": 2})))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "items[1]" in details and used in details
    assert await sql(database_url, "SELECT 1 FROM durable_idempotency_keys WHERE key = %s", fresh) == []
    # The same batch without the mismatch is answered item by item, in request order.
    reply = await claim(s, item(fresh, {"v": 1}), item(used, {"v": 1}))
    assert [r.outcome for r in reply.results] == [ACQUIRED, IN_PROGRESS]
    assert [r.key.key for r in reply.results] == [fresh, used]


async def test_expired_lease_is_taken_over_and_the_zombie_complete_is_refused(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    payload = {"order": key}
    zombie = await claim_one(s, key, payload, lease_seconds=1, holder="exec-zombie")
    assert zombie.outcome == ACQUIRED and zombie.key.attempt == 1
    taken: list[pb.ClaimResult] = []

    async def taken_over() -> bool:
        result = await claim_one(s, key, payload, lease_seconds=30, holder="exec-new")
        if result.outcome == ACQUIRED:
            taken.append(result)
            return True
        assert result.outcome == IN_PROGRESS
        return False

    await eventually(taken_over, "the lapsed lease is taken over")
    new = taken[0]
    assert new.key.attempt == 2 and new.key.derived_key == zombie.key.derived_key
    code, details = await refused(s.idempotency.Complete(pb.CompleteRequest(
        scope=SCOPE, key=key, attempt=1, result_json=b'{"charge": "ch_zombie"}'), metadata=s.metadata))
    assert code == grpc.StatusCode.ABORTED and "attempt 1" in details and "attempt 2" in details
    code, _ = await refused(release(s, key, 1))
    assert code == grpc.StatusCode.ABORTED
    await complete(s, key, 2, {"charge": "ch_new"})
    code, _ = await refused(s.idempotency.Complete(pb.CompleteRequest(
        scope=SCOPE, key=key, attempt=1, result_json=b'{"charge": "ch_zombie"}'), metadata=s.metadata))
    assert code == grpc.StatusCode.ABORTED
    got = await get_key(s, key)
    assert got.attempt == 2 and json.loads(got.result_json) == {"charge": "ch_new"}
    dup = await claim_one(s, key, payload)
    assert dup.outcome == DUPLICATE and json.loads(dup.key.result_json) == {"charge": "ch_new"}


async def test_released_key_is_acquired_again_with_the_next_attempt(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    first = await claim_one(s, key, {"v": 1})
    failed = await release(s, key, first.key.attempt, "card declined")
    assert failed.status == pb.KEY_STATUS_FAILED and failed.error_message == "card declined"
    assert (await release(s, key, first.key.attempt, "card declined")) == failed  # retry-safe
    code, _ = await refused(complete(s, key, 1, {"late": True}))  # a released attempt holds nothing
    assert code == grpc.StatusCode.ABORTED
    second = await claim_one(s, key, {"v": 1})
    assert second.outcome == ACQUIRED and second.key.attempt == 2 and second.key.error_message == ""
    await complete(s, key, 2, {"charge": "ch_2"})
    code, details = await refused(release(s, key, 2))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "completed" in details
    code, _ = await refused(release(s, new_key(), 1))
    assert code == grpc.StatusCode.NOT_FOUND


async def _observe(s: Stubs, done: str, busy: str) -> list[object]:
    """Every kind of answer a client can get for two keys, as comparable values."""
    out: list[object] = []
    for request in (
        pb.ClaimRequest(items=[item(done, {"order": done, "n": 1})]),
        pb.ClaimRequest(items=[item(done, raw=f'{{ "n": 1.0, "order": "{done}" }}'.encode())]),
        pb.ClaimRequest(items=[item(busy, {"order": busy})]),
        pb.ClaimRequest(items=[item(busy, {"order": busy}), item(done, {"order": done, "n": 1})]),
        pb.ClaimRequest(items=[item(done, {"order": done, "n": 2})]),
    ):
        try:
            out.append((await s.idempotency.Claim(request, metadata=s.metadata)).SerializeToString(deterministic=True))
        except grpc.aio.AioRpcError as exc:
            out.append((exc.code(), exc.details()))
    out.append((await s.idempotency.GetKey(pb.GetKeyRequest(scope=SCOPE, key=done), metadata=s.metadata))
               .SerializeToString(deterministic=True))
    return out


async def test_redis_stopped_flushed_or_garbled_gives_identical_outcomes(database_url: str) -> None:
    with redis_server() as redis:
        settings = make_settings(database_url, redis_url=redis.url, auth_tokens="idem-redis-token=ns-idem-redis",
                                 redis_timeout_seconds=0.2)
        sidecar = await app.start(settings)
        ch = channel(sidecar.port)
        s = Stubs(ch, "idem-redis-token")
        direct = redis_lib.Redis(port=redis.port)
        try:
            done, busy = new_key(), new_key()
            first = await claim_one(s, done, {"order": done, "n": 1})
            # Redis holds completed keys with a large result (a small one is one primary-key read away).
            await complete(s, done, first.key.attempt, {"charge": "ch_cache", "receipt": "r" * 20_000})
            assert (await claim_one(s, busy, {"order": busy})).outcome == ACQUIRED
            hits_before = REGISTRY.get_sample_value("durable_cache_requests_total",
                                                    {"op": "idempotency_completed", "result": "hit"}) or 0.0
            warm = await _observe(s, done, busy)
            hits_after = REGISTRY.get_sample_value("durable_cache_requests_total",
                                                   {"op": "idempotency_completed", "result": "hit"}) or 0.0
            assert hits_after > hits_before, "the replay was not served from Redis"
            assert direct.dbsize() == 1  # only the completed key is cached
            direct.flushall()
            assert await _observe(s, done, busy) == warm
            for name in direct.keys("*"):
                direct.set(name, b"\x00not json")
            assert await _observe(s, done, busy) == warm
            redis.stop()
            assert await _observe(s, done, busy) == warm
            # New keys work end to end while Redis is down.
            other = new_key()
            got = await claim_one(s, other, {"x": 1})
            await complete(s, other, got.key.attempt, {"ok": True})
            assert (await claim_one(s, other, {"x": 1})).outcome == DUPLICATE
            redis.start()
            assert await _observe(s, done, busy) == warm
        finally:
            direct.close()
            await ch.close()
            await sidecar.stop(grace=0.5)


def local_hits() -> float:
    return REGISTRY.get_sample_value("durable_cache_requests_total",
                                     {"op": "idempotency_completed_local", "result": "hit"}) or 0.0


async def test_completed_key_is_replayed_from_memory_without_redis_or_json_work(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from durable_sidecar.services import idempotency as service

    with redis_server() as redis:
        settings = make_settings(database_url, redis_url=redis.url, auth_tokens="idem-mem-token=ns-idem-mem",
                                 redis_timeout_seconds=0.2)
        sidecar = await app.start(settings)
        ch = channel(sidecar.port)
        s = Stubs(ch, "idem-mem-token")
        try:
            key, payload = new_key(), {"order": "o-mem", "n": 1}
            first = await claim_one(s, key, payload)
            await complete(s, key, first.key.attempt, {"charge": "ch_mem"})
            assert (await claim_one(s, key, payload)).outcome == DUPLICATE  # these bytes are now known
            before = local_hits()
            redis.stop()

            def no_json_work(payload: bytes, field: str = "") -> str:
                raise AssertionError("a remembered payload was canonicalised again")

            with monkeypatch.context() as patched:
                patched.setattr(service, "fingerprint_of", no_json_work)
                for _ in range(3):
                    again = await claim_one(s, key, payload)
                    assert again.outcome == DUPLICATE and json.loads(again.key.result_json) == {"charge": "ch_mem"}
                    assert again.key.attempt == 1 and again.key.derived_key == first.key.derived_key
                sent = await claim(s, pb.ClaimItem(scope=SCOPE, key=key, fingerprint=first.key.fingerprint))
                assert sent.results[0].outcome == DUPLICATE
            assert local_hits() - before == 4
            # Another payload is never answered from memory: the database refuses it, naming the key.
            code, details = await refused(claim(s, item(key, {"order": "o-mem", "n": 2})))
            assert code == grpc.StatusCode.FAILED_PRECONDITION and key in details
        finally:
            await ch.close()
            await sidecar.stop(grace=0.5)


async def test_expired_key_starts_a_new_life_and_forgets_the_old_cached_result(harness: Harness,
                                                                               database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    old = await claim_one(s, key, {"v": "old"})
    await complete(s, key, old.key.attempt, {"charge": "ch_old"})
    assert (await claim_one(s, key, {"v": "old"})).outcome == DUPLICATE  # now cached
    await sql(database_url, f"UPDATE durable_idempotency_keys SET expires_at = {ago(database_url, 1)} "
                            "WHERE namespace = %s AND key = %s", namespace(harness, s), key)
    code, _ = await refused(get_key(s, key))
    assert code == grpc.StatusCode.NOT_FOUND
    # Expired counts as unseen: another payload is accepted. The attempt number
    # carries on so that nothing from the old life can complete the new one.
    new = await claim_one(s, key, {"v": "new"})
    assert new.outcome == ACQUIRED and new.key.attempt == 2 and new.key.fingerprint != old.key.fingerprint
    code, _ = await refused(complete(s, key, 1, {"charge": "ch_late"}))
    assert code == grpc.StatusCode.ABORTED
    # The old life's cached replay is gone: the old payload is now a mismatch, not a duplicate.
    code, _ = await refused(claim(s, item(key, {"v": "old"})))
    assert code == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize("harness", [{"reaper_interval_seconds": 0.1, "reaper_batch_size": 2}], indirect=True)
async def test_reaper_removes_only_expired_keys_that_are_not_in_progress(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    ns = namespace(harness, s)
    names = {n: new_key() for n in ("done", "failed", "done2", "alive", "stuck", "fresh")}
    for n, key in names.items():
        got = await claim_one(s, key, {"k": n})
        if n in ("done", "done2", "fresh"):
            await complete(s, key, got.key.attempt, {"n": n})
        elif n == "failed":
            await release(s, key, got.key.attempt)
    assert (await claim_one(s, names["done"], {"k": "done"})).outcome == DUPLICATE  # cached
    reaped_before = REGISTRY.get_sample_value("durable_idempotency_keys_reaped_total") or 0.0
    for n in ("done", "failed", "done2", "alive", "stuck"):
        await sql(database_url, f"UPDATE durable_idempotency_keys SET expires_at = {ago(database_url, 1)} "
                                "WHERE namespace = %s AND key = %s", ns, names[n])
    await sql(database_url, f"UPDATE durable_idempotency_keys SET lease_expires_at = {ago(database_url, 1)} "
                            "WHERE namespace = %s AND key = %s", ns, names["stuck"])

    async def left() -> set[str]:
        rows = await sql(database_url, "SELECT key FROM durable_idempotency_keys WHERE namespace = %s", ns)
        return {r[0] for r in rows}

    async def reaped() -> bool:
        return not ({names["done"], names["failed"], names["done2"]} & await left())

    await eventually(reaped, "expired keys are reaped")
    assert await left() == {names["alive"], names["stuck"], names["fresh"]}
    assert (REGISTRY.get_sample_value("durable_idempotency_keys_reaped_total") or 0.0) - reaped_before >= 3
    # The reaped key's cached replay went with it: it is acquired afresh.
    again = await claim_one(s, names["done"], {"k": "done"})
    assert again.outcome == ACQUIRED and again.key.attempt == 1
    # The stuck key (past expiry, lease lapsed) was kept; the next claim gives it a new life, attempt 2.
    stuck = await claim_one(s, names["stuck"], {"k": "different"})
    assert stuck.outcome == ACQUIRED and stuck.key.attempt == 2
    assert (await claim_one(s, names["alive"], {"k": "alive"})).outcome == IN_PROGRESS


async def test_concurrent_batches_in_opposite_orders_acquire_each_key_once(harness: Harness) -> None:
    s = harness.alpha
    keys = [new_key() for _ in range(8)]

    async def batch(order: list[str]) -> list[tuple[str, int]]:
        reply = await claim(s, *[item(k, {"k": k}) for k in order])
        return [(r.key.key, r.outcome) for r in reply.results]

    orders = [keys if i % 2 == 0 else list(reversed(keys)) for i in range(12)]
    replies = await asyncio.gather(*(batch(o) for o in orders))
    acquired = Counter(k for reply in replies for k, outcome in reply if outcome == ACQUIRED)
    assert acquired == Counter(keys)  # every key exactly once
    for order, reply in zip(orders, replies, strict=True):
        assert [k for k, _ in reply] == order  # answers in request order


async def test_bad_input_is_invalid_argument_and_writes_nothing(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    cases = [
        item(""),
        item("k" * 256),
        item(key, lease_seconds=-1),
        item(key, scope=""),
        item(key, scope="bad\nscope"),
        item(key, ttl_seconds=59),
        item(key, ttl_seconds=-5),
        item(key, lease_seconds=86_401),
        item(key, raw=b"{not json"),
        item(key, raw=b'{"a": NaN}'),
        item(key, raw=b"\xff\xfe"),
        item(key, {"a": 1}, fingerprint="ab" * 32),
        item(key, fingerprint="not-a-sha256"),
        item(key, holder="h" * 256),
    ]
    for case in cases:
        code, _ = await refused(claim(s, item(new_key(), {"ok": True}), case))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, case
    code, details = await refused(claim(s, item(key, {"a": 1}), item(key, {"a": 1})))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "once" in details
    code, _ = await refused(claim(s))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    for call in (
        s.idempotency.Complete(pb.CompleteRequest(scope=SCOPE, key="", attempt=1), metadata=s.metadata),
        s.idempotency.Complete(pb.CompleteRequest(scope=SCOPE, key=key, attempt=0), metadata=s.metadata),
        s.idempotency.Complete(pb.CompleteRequest(scope=SCOPE, key=key, attempt=1, result_json=b"{oops"),
                               metadata=s.metadata),
        s.idempotency.Release(pb.ReleaseRequest(scope="", key=key, attempt=1), metadata=s.metadata),
        s.idempotency.Release(pb.ReleaseRequest(scope=SCOPE, key=key, attempt=1, error_message="e" * 4097),
                              metadata=s.metadata),
        s.idempotency.GetKey(pb.GetKeyRequest(scope=SCOPE, key="k" * 256), metadata=s.metadata),
        s.idempotency.ListKeys(pb.ListKeysRequest(page_token="garbage!"), metadata=s.metadata),
        s.idempotency.ListKeys(pb.ListKeysRequest(page_size=1001), metadata=s.metadata),
        s.idempotency.ListKeys(pb.ListKeysRequest(statuses=[99]), metadata=s.metadata),
    ):
        code, _ = await refused(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    rows = await sql(database_url, "SELECT count(*) FROM durable_idempotency_keys WHERE namespace = %s",
                     namespace(harness, s))
    assert rows == [(0,)]


async def test_list_keys_pages_newest_first_and_filters(harness: Harness) -> None:
    s = harness.alpha
    keys = [new_key() for _ in range(5)]
    for i, key in enumerate(keys):
        got = await claim_one(s, key, {"i": i}, scope="listing")
        if i % 2 == 0:
            await complete(s, key, got.key.attempt, {"i": i}, scope="listing")
    seen: list[str] = []
    token = ""
    while True:
        reply = await s.idempotency.ListKeys(pb.ListKeysRequest(scope="listing", page_size=2, page_token=token),
                                             metadata=s.metadata)
        seen += [k.key for k in reply.keys]
        token = reply.next_page_token
        if not token:
            break
    assert seen == list(reversed(keys))
    busy = await s.idempotency.ListKeys(pb.ListKeysRequest(scope="listing", statuses=[pb.KEY_STATUS_IN_PROGRESS]),
                                        metadata=s.metadata)
    assert [k.key for k in busy.keys] == [keys[3], keys[1]]
    assert all(k.derived_key for k in busy.keys)


def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DURABLE_DATABASE_URL": database_url}
    return subprocess.run([sys.executable, "-m", "durable_sidecar", *args], env=env, capture_output=True, text=True,
                          timeout=60)


async def test_cli_keys_show_list_and_forced_release(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    ns = namespace(harness, s)
    stuck, done = new_key(), new_key()
    held = await claim_one(s, stuck, {"v": 1}, holder="exec-42")
    got = await claim_one(s, done, {"v": 2})
    await complete(s, done, got.key.attempt, {"charge": "ch_cli"})

    listed = await asyncio.to_thread(_cli, database_url, "keys", "list", "--scope", SCOPE, "--namespace", ns)
    assert listed.returncode == 0, listed.stderr
    assert "ATTEMPT" in listed.stdout and stuck in listed.stdout and done in listed.stdout
    assert "exec-42" in listed.stdout and "lease alive" in listed.stdout
    busy = await asyncio.to_thread(_cli, database_url, "keys", "list", "--status", "in_progress", "--namespace", ns)
    assert stuck in busy.stdout and done not in busy.stdout
    shown = await asyncio.to_thread(_cli, database_url, "keys", "show", SCOPE, done, "--namespace", ns)
    assert shown.returncode == 0, shown.stderr
    assert "completed" in shown.stdout and '"charge": "ch_cli"' in shown.stdout and got.key.derived_key in shown.stdout

    released = await asyncio.to_thread(_cli, database_url, "keys", "release", SCOPE, stuck, "--reason",
                                       "worker lost", "--namespace", ns)
    assert released.returncode == 0, released.stderr
    assert f"released key {SCOPE}/{stuck}: attempt 1 (holder exec-42) is now marked failed" in released.stdout
    assert "WARNING: its lease was still alive" in released.stdout and "attempt 2" in released.stdout
    after = await get_key(s, stuck)
    assert after.status == pb.KEY_STATUS_FAILED and "worker lost" in after.error_message
    code, _ = await refused(complete(s, stuck, held.key.attempt, {"late": True}))
    assert code == grpc.StatusCode.ABORTED
    again = await asyncio.to_thread(_cli, database_url, "keys", "release", SCOPE, stuck, "--namespace", ns)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    retaken = await claim_one(s, stuck, {"v": 1})
    assert retaken.outcome == ACQUIRED and retaken.key.attempt == 2

    refused_done = await asyncio.to_thread(_cli, database_url, "keys", "release", SCOPE, done, "--namespace", ns)
    assert refused_done.returncode == 1 and "is completed" in refused_done.stderr
    assert (await claim_one(s, done, {"v": 2})).outcome == DUPLICATE
    missing = await asyncio.to_thread(_cli, database_url, "keys", "show", SCOPE, "nope", "--namespace", ns)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


async def test_claim_retried_by_its_holder_gets_the_same_acquisition(harness: Harness) -> None:
    """A claim whose answer was lost is retried by the same execution: it must not lock itself out."""
    s = harness.alpha
    key = new_key()
    first = await claim_one(s, key, {"order": "o-9"}, holder="exec-7")
    assert first.outcome == pb.CLAIM_OUTCOME_ACQUIRED and first.key.attempt == 1
    again = await claim_one(s, key, {"order": "o-9"}, holder="exec-7")
    assert again.outcome == pb.CLAIM_OUTCOME_ACQUIRED and again.key.attempt == 1
    other = await claim_one(s, key, {"order": "o-9"}, holder="exec-8")
    assert other.outcome == pb.CLAIM_OUTCOME_IN_PROGRESS
    anonymous = await claim_one(s, key, {"order": "o-9"})
    assert anonymous.outcome == pb.CLAIM_OUTCOME_IN_PROGRESS
