"""Checkpoints through the real gRPC server, on PostgreSQL with Redis and on the embedded database."""

from __future__ import annotations

import json
import uuid

import grpc
import pytest
from durable.v1 import checkpoint_pb2, instance_pb2

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.storage import count_checkpoints

WF = "wf-orders"


def new_key() -> str:
    return f"order-{uuid.uuid4().hex[:10]}"


async def start(s: Stubs, key: str, execution: str = "exec-1", **kw: object) -> instance_pb2.StartOrResumeResponse:
    return await s.instances.StartOrResume(
        instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=key, execution_id=execution, **kw),
        metadata=s.metadata,
    )


def item(key: str, step: str, state: object, execution: str = "exec-1", **kw: object) -> checkpoint_pb2.SaveCheckpointItem:
    raw = state if isinstance(state, bytes) else json.dumps(state).encode()
    return checkpoint_pb2.SaveCheckpointItem(workflow_id=WF, instance_key=key, step_name=step, state_json=raw,
                                             execution_id=execution, node_name="Durable Checkpoint", **kw)


async def save(s: Stubs, *items: checkpoint_pb2.SaveCheckpointItem) -> checkpoint_pb2.SaveCheckpointsResponse:
    return await s.checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=items), metadata=s.metadata)


async def latest(s: Stubs, key: str) -> checkpoint_pb2.Checkpoint:
    reply = await s.checkpoints.GetLatestCheckpoint(
        checkpoint_pb2.GetLatestCheckpointRequest(workflow_id=WF, instance_key=key, include_state=True),
        metadata=s.metadata)
    return reply.checkpoint


async def count_rows(database_url: str, key: str) -> int:
    return await count_checkpoints(database_url, key)


async def test_checkpoint_round_trip(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    started = await start(s, key)
    assert started.outcome == instance_pb2.START_OUTCOME_STARTED
    state = {"order": key, "paid": True, "amount": 42.5, "items": [1, 2, 3], "note": "ünïcode ✓"}
    reply = await save(s, item(key, "payment", state))
    cp = reply.results[0].checkpoint
    assert cp.sequence == 1 and cp.step_name == "payment" and not reply.results[0].deduplicated
    assert len(cp.sha256) == 64 and cp.size_bytes == len(json.dumps(state).encode())
    assert cp.execution_id == "exec-1" and cp.node_name == "Durable Checkpoint"
    got = await latest(s, key)
    assert json.loads(got.state_json) == state and got.sha256 == cp.sha256
    one = await s.checkpoints.GetCheckpoint(
        checkpoint_pb2.GetCheckpointRequest(workflow_id=WF, instance_key=key, sequence=1, include_state=True),
        metadata=s.metadata)
    assert json.loads(one.checkpoint.state_json) == state
    inst = (await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                          metadata=s.metadata)).instance
    assert inst.last_sequence == 1 and inst.last_step == "payment" and inst.checkpoint_count == 1


async def test_identical_resave_returns_same_checkpoint(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    first = (await save(s, item(key, "payment", {"paid": True}))).results[0]
    again = (await save(s, item(key, "payment", {"paid": True}))).results[0]
    assert again.deduplicated and again.checkpoint.sequence == first.checkpoint.sequence == 1
    assert await count_rows(database_url, key) == 1
    # A different state for the same step is a new checkpoint, not a duplicate.
    other = (await save(s, item(key, "payment", {"paid": False}))).results[0]
    assert not other.deduplicated and other.checkpoint.sequence == 2


async def test_stale_expected_sequence_is_refused(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    await save(s, item(key, "payment", {"n": 1}, expected_sequence=0))
    await save(s, item(key, "inventory", {"n": 2}, expected_sequence=1))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await save(s, item(key, "shipping", {"n": 3}, expected_sequence=1))
    assert err.value.code() == grpc.StatusCode.ABORTED
    assert "expected newest sequence 1 but it is 2" in (err.value.details() or "")
    assert await count_rows(database_url, key) == 2
    assert (await latest(s, key)).step_name == "inventory"


async def test_10mb_state_round_trip(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    state = {"rows": [{"id": i, "sku": f"SKU-{i:08d}", "text": "x" * 80} for i in range(95_000)]}
    raw = json.dumps(state).encode()
    assert len(raw) >= 10 * 1024 * 1024
    cp = (await save(s, item(key, "bulk", raw))).results[0].checkpoint
    assert cp.size_bytes == len(raw) and cp.stored_bytes < cp.size_bytes  # compressed at rest
    got = await latest(s, key)
    assert got.state_json == raw


@pytest.mark.parametrize("harness", [{"max_state_bytes": 4096, "max_message_bytes": 2 * 1024 * 1024}],
                         indirect=True)
async def test_oversize_state_refused_and_nothing_written(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await save(s, item(key, "ok", {"small": True}), item(key, "big", {"blob": "x" * 5000}))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "items[1]" in (err.value.details() or "") and "4096" in (err.value.details() or "")
    assert await count_rows(database_url, key) == 0


async def test_batch_is_one_transaction(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key_a, key_b = new_key(), new_key()
    await start(s, key_a)
    await start(s, key_b)
    reply = await save(s, item(key_a, "a1", {"a": 1}), item(key_b, "b1", {"b": 1}), item(key_a, "a2", {"a": 2}))
    assert [r.checkpoint.sequence for r in reply.results] == [1, 1, 2]
    # The third item is fenced out: the first two of this batch must not be written either.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await save(s, item(key_a, "a3", {"a": 3}), item(key_b, "b2", {"b": 2}),
                   item(key_a, "a4", {"a": 4}, expected_sequence=2))
    assert err.value.code() == grpc.StatusCode.ABORTED and "items[2]" in (err.value.details() or "")
    assert await count_rows(database_url, key_a) == 2
    assert await count_rows(database_url, key_b) == 1


async def test_batch_numbers_deduplicates_and_advances_each_instance_once(harness: Harness,
                                                                           database_url: str) -> None:
    s = harness.alpha
    key_a, key_b = new_key(), new_key()
    await start(s, key_a)
    await start(s, key_b)
    await save(s, item(key_a, "paid", {"p": 1}))
    reply = await save(s,
                       item(key_a, "paid", {"p": 1}),                    # the stored newest, again
                       item(key_b, "b1", {"b": 1}),
                       item(key_a, "shipped", {"s": 1}),
                       item(key_a, "shipped", {"s": 1}, execution="exec-2"),  # repeats the batch's own item
                       item(key_b, "b2", {"b": 2}, execution="exec-3"))
    got = [(r.checkpoint.instance_key, r.checkpoint.sequence, r.deduplicated) for r in reply.results]
    assert got == [(key_a, 1, True), (key_b, 1, False), (key_a, 2, False), (key_a, 2, True), (key_b, 2, False)]
    assert all(r.checkpoint.HasField("created_at") for r in reply.results)
    a = (await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key_a),
                                       metadata=s.metadata)).instance
    b = (await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key_b),
                                       metadata=s.metadata)).instance
    assert (a.last_sequence, a.last_step, a.checkpoint_count, a.lease_owner) == (2, "shipped", 2, "exec-1")
    assert (b.last_sequence, b.last_step, b.checkpoint_count, b.lease_owner) == (2, "b2", 2, "exec-3")
    assert await count_rows(database_url, key_a) == 2 and await count_rows(database_url, key_b) == 2


async def test_batch_refusals_name_the_item_and_write_nothing(harness: Harness, database_url: str) -> None:
    # On PostgreSQL a batch of plain items is one statement (durable_save_checkpoints): it refuses as the
    # transaction does, at the first item that fails, with nothing of the batch written.
    s = harness.alpha
    key_a, key_b, missing = new_key(), new_key(), new_key()
    await start(s, key_a)
    await start(s, key_b)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await save(s, item(key_a, "a1", {"a": 1}), item(missing, "m1", {"m": 1}), item(key_b, "b1", {"b": 1}))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "items[1]" in (err.value.details() or "")
    await save(s, item(key_b, "b1", {"b": 1}))
    await s.instances.CompleteInstance(
        instance_pb2.CompleteInstanceRequest(workflow_id=WF, instance_key=key_b, execution_id="exec-1"),
        metadata=s.metadata)
    # The finished instance's last save again is answered; a new step for it refuses the batch.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await save(s, item(key_a, "a1", {"a": 1}), item(key_b, "b1", {"b": 1}), item(key_b, "b2", {"b": 2}))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "items[2]" in (err.value.details() or "")
    assert await count_rows(database_url, key_a) == 0
    reply = await save(s, item(key_a, "a1", {"a": 1}, lease_seconds=60), item(key_b, "b1", {"b": 1}),
                       item(key_a, "a2", {"a": 2}, expected_sequence=1))
    assert [(r.checkpoint.sequence, r.deduplicated) for r in reply.results] == [(1, False), (1, True), (2, False)]
    assert reply.results[1].checkpoint.execution_id == "exec-1"
    assert await count_rows(database_url, key_a) == 2 and await count_rows(database_url, key_b) == 1


async def test_concurrent_batches_over_the_same_instances_neither_deadlock_nor_skip(harness: Harness,
                                                                                   database_url: str) -> None:
    import asyncio

    s = harness.alpha
    keys = [new_key() for _ in range(6)]
    for k in keys:
        await start(s, k)

    async def batch(n: int) -> None:
        order = keys if n % 2 else list(reversed(keys))  # opposite orders: a deadlock if locks followed them
        await save(s, *[item(k, f"step-{n}", {"n": n, "k": k}) for k in order])

    await asyncio.gather(*[batch(n) for n in range(12)])
    for k in keys:
        trail = (await s.checkpoints.ListCheckpoints(checkpoint_pb2.ListCheckpointsRequest(
            workflow_id=WF, instance_key=k, page_size=100), metadata=s.metadata)).checkpoints
        assert [c.sequence for c in trail] == list(range(1, 13))
        assert sorted(c.step_name for c in trail) == sorted(f"step-{n}" for n in range(12))


async def test_bad_checkpoint_input_is_invalid_argument_and_changes_nothing(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    cases = [
        item(key, "step", b"{not json"),
        item(key, "", {"a": 1}),
        item(key, "x" * 256, {"a": 1}),
        item(key, "step", {"a": 1}, execution=""),
        item(key, "step\n", {"a": 1}),
        item(key, "step", b""),
        item(key, "step", b"\xff\xfe"),
        item(key, "step", {"a": 1}, lease_seconds=-5),
        item(key, "step", {"a": 1}, lease_seconds=86_401),
    ]
    for case in cases:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await save(s, case)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, case
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await save(s)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await count_rows(database_url, key) == 0


async def test_save_to_unknown_or_finished_instance_is_refused(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await save(s, item(key, "payment", {"a": 1}))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "StartOrResume" in (err.value.details() or "")
    await start(s, key)
    await save(s, item(key, "payment", {"a": 1}))
    await s.instances.CompleteInstance(
        instance_pb2.CompleteInstanceRequest(workflow_id=WF, instance_key=key, execution_id="exec-1"),
        metadata=s.metadata)
    # The retry of the last save is still answered; anything new is refused.
    again = (await save(s, item(key, "payment", {"a": 1}))).results[0]
    assert again.deduplicated
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await save(s, item(key, "shipping", {"a": 2}))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_list_checkpoints_pages_in_sequence_order(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    await save(s, *[item(key, f"step-{i}", {"i": i}) for i in range(7)])
    seen: list[int] = []
    token = ""
    while True:
        reply = await s.checkpoints.ListCheckpoints(
            checkpoint_pb2.ListCheckpointsRequest(workflow_id=WF, instance_key=key, page_size=3, page_token=token),
            metadata=s.metadata)
        seen += [c.sequence for c in reply.checkpoints]
        token = reply.next_page_token
        if not token:
            break
    assert seen == list(range(1, 8))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.checkpoints.ListCheckpoints(
            checkpoint_pb2.ListCheckpointsRequest(workflow_id=WF, instance_key=key, page_token="garbage!"),
            metadata=s.metadata)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_prune_keeps_the_final_checkpoint(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    await save(s, *[item(key, f"step-{i}", {"i": i}) for i in range(5)])
    dry = await s.checkpoints.PruneCheckpoints(
        checkpoint_pb2.PruneCheckpointsRequest(workflow_id=WF, instance_key=key, keep_last=2, dry_run=True),
        metadata=s.metadata)
    assert dry.deleted_count == 3
    done = await s.checkpoints.PruneCheckpoints(
        checkpoint_pb2.PruneCheckpointsRequest(workflow_id=WF, instance_key=key, keep_last=2), metadata=s.metadata)
    assert done.deleted_count == 3 and done.instance_count == 1
    # An age rule alone that matches everything still keeps the newest.
    aged = await s.checkpoints.PruneCheckpoints(
        checkpoint_pb2.PruneCheckpointsRequest(workflow_id=WF, instance_key=key, keep_last=1), metadata=s.metadata)
    assert aged.deleted_count == 1
    again = await s.checkpoints.PruneCheckpoints(
        checkpoint_pb2.PruneCheckpointsRequest(workflow_id=WF, instance_key=key, keep_last=1), metadata=s.metadata)
    assert again.deleted_count == 0
    got = await latest(s, key)
    assert got.sequence == 5 and json.loads(got.state_json) == {"i": 4}
    inst = (await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                          metadata=s.metadata)).instance
    assert inst.checkpoint_count == 1
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.checkpoints.GetCheckpoint(
            checkpoint_pb2.GetCheckpointRequest(workflow_id=WF, instance_key=key, sequence=1), metadata=s.metadata)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_large_reads_take_at_most_half_the_pool(database_url: str) -> None:
    # 12 loads of a 2 MB state at once: they queue for their own places (half the pool's connections), first
    # come first served and without the pool timeout, so the connections small calls need stay free and no
    # load waits for one behind eleven others (with 64 at once, past the pool timeout: UNAVAILABLE).
    import asyncio

    from durable_sidecar.domain import InstanceRef
    from durable_sidecar.services.checkpoints import SaveItem
    from durable_sidecar.wiring import build_services, make_cache, open_backend

    from tests.conftest import make_settings

    settings = make_settings(database_url, redis_url="", db_pool_max=4, auth_tokens="token-large-reads=ns")
    backend = await open_backend(settings, owner=False, migrate=False)
    try:
        services = build_services(settings, backend, make_cache(settings, shared_only=True))
        service = services.checkpoints
        assert service.large_read_slots == settings.db_pool_max // 2
        ref = InstanceRef(f"ns-large-{uuid.uuid4().hex[:8]}", WF, new_key())
        await services.instances.start_or_resume(ref, execution_id="exec-1")
        state = json.dumps({"blob": "x" * (2 * 1024 * 1024)}).encode()
        await service.save(ref.namespace, [SaveItem(WF, ref.instance_key, "big", state, "exec-1", "", None, 0)])
        reading = peak = 0
        store_get = backend.checkpoints.get_txn

        async def counting_get(*args: object, **kw: object) -> object:
            nonlocal reading, peak
            reading += 1
            peak = max(peak, reading)
            try:
                return await store_get(*args, **kw)  # type: ignore[arg-type]
            finally:
                reading -= 1

        backend.checkpoints.get_txn = counting_get  # type: ignore[method-assign]
        loaded = await asyncio.gather(*[service.latest(ref, include_state=True) for _ in range(12)])
        assert all(cp.state == state for cp in loaded)
        assert 1 <= peak <= service.large_read_slots
    finally:
        await backend.db.close()
