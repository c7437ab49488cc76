"""Repeat safety, one test per RPC the node package retries: the same call twice gives the first call's outcome.

The nodes retry a call whose answer they did not get (UNAVAILABLE, a deadline
while the sidecar restarts), so the first call may have committed. Each test
sends the identical request twice and checks the answer and the rows.
"""

from __future__ import annotations

import json
from typing import Any

from durable.v1 import checkpoint_pb2, common_pb2, idempotency_pb2, instance_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.storage import count_checkpoints, expire_instance_lease, fetch
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start

SCOPE = "payment"


async def events(database_url: str, key: str, kind: str) -> int:
    rows = await fetch(database_url, "SELECT count(*) FROM durable_instance_events WHERE instance_key = %s "
                                     "AND kind = %s", key, kind)
    return int(rows[0][0])


async def get(s: Stubs, key: str) -> common_pb2.Instance:
    reply = await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                          metadata=s.metadata)
    return reply.instance


async def twice(call: Any, request: Any, s: Stubs) -> tuple[Any, Any]:
    return await call(request, metadata=s.metadata), await call(request, metadata=s.metadata)


def claim_request(key: str, holder: str = "exec-1") -> idempotency_pb2.ClaimRequest:
    return idempotency_pb2.ClaimRequest(items=[idempotency_pb2.ClaimItem(scope=SCOPE, key=key,
                                                                         payload_json=b'{"amount":42}',
                                                                         holder=holder)])


async def test_start_or_resume_repeated_gives_the_same_outcome_and_counts_once(harness: Harness,
                                                                              database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    request = instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=key, execution_id="exec-1",
                                                start_item_json=b'{"order":"A-1"}', include_state=True)
    first, second = await twice(s.instances.StartOrResume, request, s)
    assert first.outcome == second.outcome == instance_pb2.START_OUTCOME_STARTED
    assert second.instance.resume_count == 0 and second.start_item_json == b'{"order":"A-1"}'
    assert await events(database_url, key, "started") == 1
    # The same for a resume: resumed once, counted once.
    await save(s, item(key, "payment", {"paid": True}))
    await expire_instance_lease(database_url, key)
    resume = instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=key, execution_id="exec-2",
                                               include_state=True)
    first, second = await twice(s.instances.StartOrResume, resume, s)
    assert first.outcome == second.outcome == instance_pb2.START_OUTCOME_RESUMED
    assert first.instance.resume_count == second.instance.resume_count == 1
    assert second.latest_checkpoint.sequence == 1 and second.start_item_json == b'{"order":"A-1"}'
    assert await events(database_url, key, "resumed") == 1


async def test_save_checkpoints_repeated_is_deduplicated_into_one_row(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    for mode in (checkpoint_pb2.STATE_MODE_REPLACE, checkpoint_pb2.STATE_MODE_ADD_STEP_RESULT):
        request = checkpoint_pb2.SaveCheckpointsRequest(items=[item(key, f"step-{mode}", {"mode": mode},
                                                                     state_mode=mode)])
        first, second = await twice(s.checkpoints.SaveCheckpoints, request, s)
        assert not first.results[0].deduplicated and second.results[0].deduplicated
        assert first.results[0].checkpoint.sequence == second.results[0].checkpoint.sequence == mode
        assert first.results[0].state_json == second.results[0].state_json
    assert await count_checkpoints(database_url, key) == 2
    assert (await get(s, key)).checkpoint_count == 2


async def test_claim_repeated_by_its_holder_gets_the_same_attempt(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    first, second = await twice(s.idempotency.Claim, claim_request(key), s)
    assert first.results[0].outcome == second.results[0].outcome == idempotency_pb2.CLAIM_OUTCOME_ACQUIRED
    assert first.results[0].key.attempt == second.results[0].key.attempt == 1


async def test_complete_repeated_with_the_same_attempt_leaves_the_result(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await s.idempotency.Claim(claim_request(key), metadata=s.metadata)
    request = idempotency_pb2.CompleteRequest(scope=SCOPE, key=key, attempt=1, result_json=b'{"charge":"ch_1"}')
    first, second = await twice(s.idempotency.Complete, request, s)
    assert first.key.status == second.key.status == idempotency_pb2.KEY_STATUS_COMPLETED
    assert second.key.result_json == b'{"charge":"ch_1"}' and second.key.updated_at == first.key.updated_at


async def test_release_repeated_with_the_same_attempt_leaves_it_released(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await s.idempotency.Claim(claim_request(key), metadata=s.metadata)
    request = idempotency_pb2.ReleaseRequest(scope=SCOPE, key=key, attempt=1, error_message="card declined")
    first, second = await twice(s.idempotency.Release, request, s)
    assert first.key.status == second.key.status == idempotency_pb2.KEY_STATUS_FAILED
    assert second.key.attempt == 1 and second.key.updated_at == first.key.updated_at
    # The next claim is attempt 2, not 3: the repeat did not release anything twice.
    again = await s.idempotency.Claim(claim_request(key, "exec-2"), metadata=s.metadata)
    assert again.results[0].key.attempt == 2


async def test_schedule_wake_up_repeated_parks_the_instance_once(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    at = Timestamp()
    at.FromJsonString("2099-05-01T09:00:00.123456Z")
    request = instance_pb2.ScheduleWakeUpRequest(workflow_id=WF, instance_key=key, execution_id="exec-1", wake_at=at)
    first, second = await twice(s.instances.ScheduleWakeUp, request, s)
    assert first.instance.wake_at == second.instance.wake_at == at
    assert second.instance == first.instance and second.instance.lease_owner == ""
    assert await events(database_url, key, "wake_scheduled") == 1
    assert (await get(s, key)) == first.instance


async def test_fail_instance_repeated_leaves_it_failed_once(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    request = instance_pb2.FailInstanceRequest(workflow_id=WF, instance_key=key, execution_id="exec-1",
                                               error_message="out of stock")
    first, second = await twice(s.instances.FailInstance, request, s)
    assert first.instance.status == common_pb2.INSTANCE_STATUS_FAILED and second.instance == first.instance
    assert await events(database_url, key, "failed") == 1


async def test_complete_instance_repeated_leaves_it_completed_once(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    request = instance_pb2.CompleteInstanceRequest(workflow_id=WF, instance_key=key, execution_id="exec-1",
                                                   result_json=b'{"shipped":true}')
    first, second = await twice(s.instances.CompleteInstance, request, s)
    assert first.instance.status == common_pb2.INSTANCE_STATUS_COMPLETED and second.instance == first.instance
    assert second.instance.result_json == b'{"shipped":true}'
    assert await events(database_url, key, "completed") == 1


async def test_save_completing_a_key_repeated_writes_one_checkpoint_and_completes_once(harness: Harness,
                                                                                     database_url: str) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key)
    await s.idempotency.Claim(claim_request(charge), metadata=s.metadata)
    result = json.dumps({"charge": "ch_1"}).encode()
    request = checkpoint_pb2.SaveCheckpointsRequest(items=[item(
        key, "Charge", result, state_mode=checkpoint_pb2.STATE_MODE_ADD_STEP_RESULT,
        complete_key=checkpoint_pb2.KeyCompletion(scope=SCOPE, key=charge, attempt=1))])
    first, second = await twice(s.checkpoints.SaveCheckpoints, request, s)
    assert not first.results[0].deduplicated and second.results[0].deduplicated
    assert first.results[0].checkpoint.sequence == second.results[0].checkpoint.sequence == 1
    assert first.results[0].completed_key == second.results[0].completed_key
    assert second.results[0].completed_key.status == idempotency_pb2.KEY_STATUS_COMPLETED
    assert second.results[0].completed_key.result_json == result
    assert await count_checkpoints(database_url, key) == 1
