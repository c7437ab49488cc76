"""Instance lifecycle: start-or-resume outcomes, leases, final states, wake-ups and claims."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from durable.v1 import common_pb2, instance_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.storage import expire_instance_lease, fetch
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start


async def get(s: Stubs, key: str) -> common_pb2.Instance:
    reply = await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                          metadata=s.metadata)
    return reply.instance


async def expire_lease(database_url: str, key: str) -> None:
    """Simulates the holder dying: its lease lapses (database time moves past it)."""
    await expire_instance_lease(database_url, key)


async def test_start_then_resume_restores_the_latest_checkpoint(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    first = await start(s, key, "exec-1", lease_seconds=60)
    assert first.outcome == instance_pb2.START_OUTCOME_STARTED and first.instance.lease_owner == "exec-1"
    assert not first.HasField("latest_checkpoint")
    await save(s, item(key, "payment", {"paid": True}))
    await save(s, item(key, "inventory", {"reserved": 3}))
    # A second execution while the first holds a live lease must not run the instance.
    busy = await start(s, key, "exec-2")
    assert busy.outcome == instance_pb2.START_OUTCOME_BUSY and busy.instance.lease_owner == "exec-1"
    await expire_lease(database_url, key)
    resumed = await start(s, key, "exec-2", include_state=True)
    assert resumed.outcome == instance_pb2.START_OUTCOME_RESUMED
    assert resumed.instance.lease_owner == "exec-2" and resumed.instance.resume_count == 1
    assert resumed.latest_checkpoint.step_name == "inventory" and resumed.latest_checkpoint.sequence == 2
    assert json.loads(resumed.latest_checkpoint.state_json) == {"reserved": 3}


async def test_start_or_resume_retry_by_same_execution_gives_same_answer(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    assert (await start(s, key, "exec-1")).outcome == instance_pb2.START_OUTCOME_STARTED
    again = await start(s, key, "exec-1")
    assert again.outcome == instance_pb2.START_OUTCOME_STARTED and again.instance.resume_count == 0


async def test_concurrent_starts_of_one_key_create_one_instance(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    replies = await asyncio.gather(*[start(s, key, f"exec-{i}") for i in range(20)])
    outcomes = [r.outcome for r in replies]
    assert outcomes.count(instance_pb2.START_OUTCOME_STARTED) == 1
    assert outcomes.count(instance_pb2.START_OUTCOME_BUSY) == 19
    assert await fetch(database_url, "SELECT count(*) FROM durable_instances WHERE instance_key = %s", key) == [(1,)]


async def test_completed_instance_answers_finished_and_stays_completed(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    await save(s, item(key, "delivered", {"ok": True}))
    done = await s.instances.CompleteInstance(
        instance_pb2.CompleteInstanceRequest(workflow_id=WF, instance_key=key, execution_id="exec-1",
                                             result_json=b'{"delivered": true}'), metadata=s.metadata)
    assert done.instance.status == common_pb2.INSTANCE_STATUS_COMPLETED and done.instance.lease_owner == ""
    again = await s.instances.CompleteInstance(
        instance_pb2.CompleteInstanceRequest(workflow_id=WF, instance_key=key, execution_id="exec-1"),
        metadata=s.metadata)
    assert again.instance.finished_at == done.instance.finished_at  # retry-safe: unchanged
    redelivered = await start(s, key, "exec-9")
    assert redelivered.outcome == instance_pb2.START_OUTCOME_FINISHED
    assert redelivered.instance.status == common_pb2.INSTANCE_STATUS_COMPLETED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
            workflow_id=WF, instance_key=key, execution_id="exec-1", error_message="late"), metadata=s.metadata)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_fail_and_cancel_are_final(harness: Harness) -> None:
    s = harness.alpha
    failed, cancelled = new_key(), new_key()
    await start(s, failed)
    await start(s, cancelled)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
            workflow_id=WF, instance_key=failed, execution_id="exec-1"), metadata=s.metadata)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # a reason is required
    reply = await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
        workflow_id=WF, instance_key=failed, execution_id="exec-1", error_message="card declined"), metadata=s.metadata)
    assert reply.instance.status == common_pb2.INSTANCE_STATUS_FAILED and reply.instance.error_message == "card declined"
    reply2 = await s.instances.CancelInstance(instance_pb2.CancelInstanceRequest(
        workflow_id=WF, instance_key=cancelled, actor="ops@example.com", reason="customer asked"), metadata=s.metadata)
    assert reply2.instance.status == common_pb2.INSTANCE_STATUS_CANCELLED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
            workflow_id=WF, instance_key=cancelled, execution_id="exec-1"), metadata=s.metadata)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (await start(s, failed, "exec-2")).outcome == instance_pb2.START_OUTCOME_FINISHED


async def test_stalled_instance_is_claimed_once_and_taken_over_with_the_claim_token(
        harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, "exec-1")
    await save(s, item(key, "payment", {"paid": True}))
    await expire_lease(database_url, key)
    claims = await asyncio.gather(*[
        s.instances.ClaimResumable(instance_pb2.ClaimResumableRequest(claimant=f"n8n-{i}", workflow_ids=[WF],
                                                                      max_instances=50), metadata=s.metadata)
        for i in range(5)])
    mine = [r for c in claims for r in c.instances if r.instance.instance_key == key]
    assert len(mine) == 1
    claimed = mine[0]
    assert claimed.reason == instance_pb2.RESUME_REASON_STALLED and claimed.claim_token
    assert claimed.latest_checkpoint.step_name == "payment"
    # Without the token another execution is busy-ed out; with it, it takes over.
    assert (await start(s, key, "exec-2")).outcome == instance_pb2.START_OUTCOME_BUSY
    taken = await start(s, key, "exec-3", claim_token=claimed.claim_token, include_state=True)
    assert taken.outcome == instance_pb2.START_OUTCOME_RESUMED and taken.instance.lease_owner == "exec-3"
    assert json.loads(taken.latest_checkpoint.state_json) == {"paid": True}


async def test_scheduled_wake_up_is_delivered_when_due(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    reply = await s.instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1", delay_seconds=3600), metadata=s.metadata)
    assert reply.instance.HasField("wake_at") and reply.instance.lease_owner == ""
    # Waiting is neither stalled nor due, and a re-delivery must not run it early.
    assert (await start(s, key, "exec-2")).outcome == instance_pb2.START_OUTCOME_BUSY
    none = await s.instances.ClaimResumable(instance_pb2.ClaimResumableRequest(claimant="n8n", workflow_ids=[WF]),
                                            metadata=s.metadata)
    assert key not in [r.instance.instance_key for r in none.instances]
    past = Timestamp()
    past.FromSeconds(1_000_000_000)
    await s.instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1", wake_at=past), metadata=s.metadata)
    due = await s.instances.ClaimResumable(instance_pb2.ClaimResumableRequest(claimant="n8n", workflow_ids=[WF]),
                                           metadata=s.metadata)
    got = [r for r in due.instances if r.instance.instance_key == key]
    assert len(got) == 1 and got[0].reason == instance_pb2.RESUME_REASON_WAKE_UP
    assert not got[0].instance.HasField("wake_at")


async def test_watch_resumable_streams_claims_and_heartbeats(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    await expire_lease(database_url, key)
    stream = s.instances.WatchResumable(instance_pb2.WatchResumableRequest(
        claimant="n8n-main", workflow_ids=[WF], poll_interval_ms=100), metadata=s.metadata)
    seen: list[str] = []
    heartbeats = 0
    async for msg in stream:
        if msg.instances:
            seen += [r.instance.instance_key for r in msg.instances]
        else:
            heartbeats += 1
        if key in seen and heartbeats >= 1:
            break
    stream.cancel()
    assert seen.count(key) == 1


async def test_list_instances_filters_and_pages(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    keys = [new_key() for _ in range(5)]
    for k in keys:
        await start(s, k)
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=keys[0], execution_id="exec-1"), metadata=s.metadata)
    await expire_lease(database_url, keys[1])
    listed: list[str] = []
    token = ""
    while True:
        page = await s.instances.ListInstances(instance_pb2.ListInstancesRequest(
            workflow_id=WF, page_size=2, page_token=token), metadata=s.metadata)
        listed += [i.instance_key for i in page.instances]
        token = page.next_page_token
        if not token:
            break
    assert set(keys) <= set(listed) and len(listed) == len(set(listed))
    done = await s.instances.ListInstances(instance_pb2.ListInstancesRequest(
        workflow_id=WF, statuses=[common_pb2.INSTANCE_STATUS_COMPLETED]), metadata=s.metadata)
    assert keys[0] in [i.instance_key for i in done.instances]
    assert all(i.status == common_pb2.INSTANCE_STATUS_COMPLETED for i in done.instances)
    stalled = await s.instances.ListInstances(instance_pb2.ListInstancesRequest(
        workflow_id=WF, stalled_only=True), metadata=s.metadata)
    assert keys[1] in [i.instance_key for i in stalled.instances]
    assert keys[2] not in [i.instance_key for i in stalled.instances]


async def test_bad_instance_input_is_invalid_argument_and_changes_nothing(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    bad = [
        instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key="", execution_id="e"),
        instance_pb2.StartOrResumeRequest(workflow_id="", instance_key=key, execution_id="e"),
        instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key="k" * 256, execution_id="e"),
        instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=key, execution_id=""),
        instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=key, execution_id="e", lease_seconds=-1),
        instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=key, execution_id="e", lease_seconds=90000),
    ]
    for req in bad:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await s.instances.StartOrResume(req, metadata=s.metadata)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, req
    await start(s, key)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(
            workflow_id=WF, instance_key=key, execution_id="e", delay_seconds=-5), metadata=s.metadata)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(
            workflow_id=WF, instance_key=key, execution_id="e"), metadata=s.metadata)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
            workflow_id=WF, instance_key=key, execution_id="e", result_json=b"{oops"), metadata=s.metadata)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (await get(s, key)).status == common_pb2.INSTANCE_STATUS_RUNNING
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await get(s, new_key())
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert await fetch(database_url, "SELECT count(*) FROM durable_instances WHERE instance_key IN (%s, %s)",
                       key, "k" * 256) == [(1,)]
