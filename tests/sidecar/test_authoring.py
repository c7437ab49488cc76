"""Round 2 authoring on both backends: lease length per instance, start items, step results merged into the
instance's state, saves that complete a claimed key in their transaction, and instance-aware claims."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import grpc
import pytest
from durable.v1 import checkpoint_pb2, common_pb2, idempotency_pb2, instance_pb2

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.storage import ago, count_checkpoints, expire_instance_lease, fetch
from tests.sidecar.test_checkpoints import WF, item, latest, new_key, save, start

SCOPE = "payment"
ADD = checkpoint_pb2.STATE_MODE_ADD_STEP_RESULT
ACQUIRED, DUPLICATE, IN_PROGRESS = (idempotency_pb2.CLAIM_OUTCOME_ACQUIRED, idempotency_pb2.CLAIM_OUTCOME_DUPLICATE,
                                    idempotency_pb2.CLAIM_OUTCOME_IN_PROGRESS)


def raw(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


async def get(s: Stubs, key: str) -> common_pb2.Instance:
    reply = await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                          metadata=s.metadata)
    return reply.instance


def lease_length(inst: common_pb2.Instance) -> float:
    """How long the current lease runs from the instance's last update (both database time)."""
    return (inst.lease_expires_at.ToDatetime() - inst.updated_at.ToDatetime()) / timedelta(seconds=1)


async def claim(s: Stubs, key: str, holder: str, **kw: Any) -> idempotency_pb2.ClaimResult:
    reply = await s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[idempotency_pb2.ClaimItem(
        scope=SCOPE, key=key, payload_json=b'{"amount":42}', holder=holder, **kw)]), metadata=s.metadata)
    return reply.results[0]


async def get_key(s: Stubs, key: str) -> idempotency_pb2.IdempotencyKey:
    return (await s.idempotency.GetKey(idempotency_pb2.GetKeyRequest(scope=SCOPE, key=key), metadata=s.metadata)).key


def completing(key: str, attempt: int, result: bytes = b"") -> checkpoint_pb2.KeyCompletion:
    return checkpoint_pb2.KeyCompletion(scope=SCOPE, key=key, attempt=attempt, result_json=result)


async def refused(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value.code(), err.value.details() or ""


async def expire_key_lease(database_url: str, key: str) -> None:
    await fetch(database_url, f"UPDATE durable_idempotency_keys SET lease_expires_at = {ago(database_url, 1)} "
                              "WHERE key = %s", key)


# --- 1. the instance's lease length ------------------------------------------------------------------------------


async def test_lease_length_is_chosen_at_start_and_kept_by_saves_and_resumes(harness: Harness,
                                                                             database_url: str) -> None:
    s = harness.alpha
    default = harness.sidecar.settings.lease_seconds
    plain = new_key()
    assert (await start(s, plain)).instance.lease_seconds == default

    key = new_key()
    started = (await start(s, key, "exec-1", lease_seconds=3600)).instance
    assert started.lease_seconds == 3600 and lease_length(started) == pytest.approx(3600, abs=2)
    # A save that names no length renews with the instance's, not the sidecar's default.
    await save(s, item(key, "payment", {"paid": True}))
    inst = await get(s, key)
    assert inst.lease_seconds == 3600 and lease_length(inst) == pytest.approx(3600, abs=2)
    # A save that names one renews with it once; the instance keeps its length.
    await save(s, item(key, "inventory", {"reserved": 1}, lease_seconds=30))
    inst = await get(s, key)
    assert inst.lease_seconds == 3600 and lease_length(inst) == pytest.approx(30, abs=2)
    await save(s, item(key, "packing", {"boxes": 1}))
    assert lease_length(await get(s, key)) == pytest.approx(3600, abs=2)

    # A resume with 0 keeps the length; a resume with a length replaces it.
    await expire_instance_lease(database_url, key)
    resumed = await start(s, key, "exec-2")
    assert resumed.outcome == instance_pb2.START_OUTCOME_RESUMED
    assert resumed.instance.lease_seconds == 3600 and lease_length(resumed.instance) == pytest.approx(3600, abs=2)
    again = await start(s, key, "exec-2", lease_seconds=120)
    assert again.instance.lease_seconds == 120
    await save(s, item(key, "shipping", {"parcel": "P1"}, execution="exec-2"))
    assert lease_length(await get(s, key)) == pytest.approx(120, abs=2)
    # A caller that does not get the lease changes nothing.
    busy = await start(s, key, "exec-3", lease_seconds=999)
    assert busy.outcome == instance_pb2.START_OUTCOME_BUSY and (await get(s, key)).lease_seconds == 120



async def test_wait_seconds_lengthens_the_lease_a_start_takes_not_the_instances_length(harness: Harness,
                                                                                     database_url: str) -> None:
    """The Resume Point before an n8n Wait node: the instance is held for the wait, then renewed as always."""
    s = harness.alpha
    key = new_key()
    started = (await start(s, key, "exec-1", lease_seconds=60, wait_seconds=600)).instance
    assert started.lease_seconds == 60 and lease_length(started) == pytest.approx(660, abs=2)
    # A re-delivery while the execution waits finds the instance busy.
    assert (await start(s, key, "exec-x")).outcome == instance_pb2.START_OUTCOME_BUSY
    # The next save renews with the instance's length.
    await save(s, item(key, "payment", {"paid": True}))
    assert lease_length(await get(s, key)) == pytest.approx(60, abs=2)
    # A resume before the wait (a step output into the Wait node), and its retry by the same execution.
    await expire_instance_lease(database_url, key)
    resumed = await start(s, key, "exec-2", wait_seconds=300)
    assert resumed.outcome == instance_pb2.START_OUTCOME_RESUMED
    assert resumed.instance.lease_seconds == 60 and lease_length(resumed.instance) == pytest.approx(360, abs=2)
    again = await start(s, key, "exec-2", wait_seconds=120)
    assert again.instance.lease_seconds == 60 and lease_length(again.instance) == pytest.approx(180, abs=2)
    # Out of range: INVALID_ARGUMENT naming the field, and no instance.
    for bad in (-1, 86_401):
        other = new_key()
        code, details = await refused(start(s, other, "exec-9", wait_seconds=bad))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "wait_seconds" in details, (bad, details)
        assert await fetch(database_url, "SELECT 1 FROM durable_instances WHERE instance_key = %s", other) == []


# --- 2. the start item --------------------------------------------------------------------------------------------


async def test_start_item_is_stored_with_started_and_handed_to_every_resume_unchanged(harness: Harness,
                                                                                     database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    delivery = b'{"order": "A-1", "amount": 42.5, "note": "\xc3\xbcber"}'
    first = await start(s, key, "exec-1", start_item_json=delivery, include_state=True)
    assert first.outcome == instance_pb2.START_OUTCOME_STARTED and first.start_item_json == delivery
    # Without include_state nothing comes back; a retry of the start sees the same item.
    assert (await start(s, key, "exec-1", start_item_json=delivery)).start_item_json == b""
    assert (await start(s, key, "exec-1", include_state=True)).start_item_json == delivery
    await expire_instance_lease(database_url, key)
    # Another delivery's item never replaces the one the instance started with.
    resumed = await start(s, key, "exec-2", start_item_json=b'{"order": "B-2"}', include_state=True)
    assert resumed.outcome == instance_pb2.START_OUTCOME_RESUMED and resumed.start_item_json == delivery
    rows = await fetch(database_url, "SELECT count(*) FROM durable_instance_start_items WHERE instance_key = %s", key)
    events = await fetch(database_url, "SELECT kind FROM durable_instance_events WHERE instance_key = %s "
                                       "AND kind = 'started'", key)
    assert rows == [(1,)] and len(events) == 1
    # An instance started without one has none.
    other = new_key()
    assert (await start(s, other, include_state=True)).start_item_json == b""


async def test_large_start_item_is_compressed_at_rest_and_round_trips(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    delivery = raw({"lines": [{"sku": f"SKU-{i:06d}", "qty": i % 7} for i in range(4000)]})
    await start(s, key, start_item_json=delivery)
    assert (await start(s, key, include_state=True)).start_item_json == delivery
    stored = await fetch(database_url, "SELECT size_bytes, length(item) FROM durable_instance_start_items "
                                       "WHERE instance_key = %s", key)
    assert stored[0][0] == len(delivery) and stored[0][1] < len(delivery)


def webhook_item(body: object, request_id: str) -> bytes:
    """n8n's Webhook item: the body, and headers that change with every delivery."""
    return raw({"headers": {"x-request-id": request_id, "content-type": "application/json"}, "params": {},
                "query": {}, "body": body, "webhookUrl": "http://n8n/webhook/orders"})


async def test_check_delivery_answers_different_for_another_body_and_changes_nothing(harness: Harness,
                                                                                     database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, "exec-1", start_item_json=webhook_item({"orderId": key, "amount": 10}, "r1"))
    await expire_instance_lease(database_url, key)
    snapshot = "SELECT lease_owner, resume_count, updated_at FROM durable_instances WHERE instance_key = %s"
    events = "SELECT count(*) FROM durable_instance_events WHERE instance_key = %s"
    before = (await fetch(database_url, snapshot, key), await fetch(database_url, events, key))
    other = await start(s, key, "exec-2", start_item_json=webhook_item({"orderId": key, "amount": 9999}, "r2"),
                        check_delivery=True, include_state=True)
    assert other.outcome == instance_pb2.START_OUTCOME_DIFFERENT
    assert json.loads(other.start_item_json)["body"] == {"orderId": key, "amount": 10}
    assert (await fetch(database_url, snapshot, key), await fetch(database_url, events, key)) == before
    # Without the check, the same call is a re-delivery: it resumes the instance.
    plain = await start(s, key, "exec-2", start_item_json=webhook_item({"orderId": key, "amount": 9999}, "r2"))
    assert plain.outcome == instance_pb2.START_OUTCOME_RESUMED


async def test_check_delivery_counts_only_the_body_of_a_webhook_item_in_canonical_form(harness: Harness,
                                                                                      database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, "exec-1", start_item_json=webhook_item({"orderId": key, "amount": 10, "n": [1, 2]}, "r1"))
    # Other headers, other key order, 10.0 for 10: the same delivery (a re-delivery; exec-1 holds the lease).
    again = await start(s, key, "exec-2", check_delivery=True,
                        start_item_json=b'{"body": {"n": [1.0, 2], "amount": 10.0, "orderId": "%s"}, '
                                        b'"headers": {"x-request-id": "r7"}}' % key.encode())
    assert again.outcome == instance_pb2.START_OUTCOME_BUSY
    # Not a webhook item: the whole item counts.
    plain = new_key()
    await start(s, plain, "exec-1", start_item_json=raw({"orderId": plain, "at": 1}))
    assert (await start(s, plain, "exec-2", check_delivery=True,
                        start_item_json=raw({"at": 1, "orderId": plain}))).outcome == instance_pb2.START_OUTCOME_BUSY
    assert (await start(s, plain, "exec-2", check_delivery=True, start_item_json=raw({"orderId": plain, "at": 2}))
            ).outcome == instance_pb2.START_OUTCOME_DIFFERENT
    # An instance stored without a start item never differs.
    bare = new_key()
    await start(s, bare, "exec-1")
    assert (await start(s, bare, "exec-1", check_delivery=True, start_item_json=raw({"x": 1}))
            ).outcome == instance_pb2.START_OUTCOME_STARTED


@pytest.mark.parametrize("harness", [{"max_state_bytes": 4096, "max_message_bytes": 2 * 1024 * 1024}],
                         indirect=True)
async def test_bad_start_item_is_refused_and_starts_nothing(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    for bad in (b"{not json", b"[1, 2]", b'"text"', b"\xff\xfe"):
        code, _ = await refused(start(s, key, start_item_json=bad))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, bad
    code, details = await refused(start(s, key, start_item_json=raw({"blob": "x" * 5000})))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "4096" in details
    code, _ = await refused(get(s, key))
    assert code == grpc.StatusCode.NOT_FOUND


# --- 3. step results added to the instance's state -------------------------------------------------------------------


async def test_step_results_are_added_to_the_start_item_and_retries_deduplicate(harness: Harness,
                                                                               database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, start_item_json=b'{"order": "A-1", "amount": 10}')
    paid = (await save(s, item(key, "Charge", {"charge": "ch_1", "ok": True}, state_mode=ADD))).results[0]
    expected = b'{"order":"A-1","amount":10,"Charge":{"charge":"ch_1","ok":true}}'
    assert paid.state_json == expected and paid.checkpoint.sequence == 1 and not paid.deduplicated
    assert (await latest(s, key)).state_json == expected
    # The same step and result again: the same bytes, the checkpoint already there.
    again = (await save(s, item(key, "Charge", {"charge": "ch_1", "ok": True}, state_mode=ADD))).results[0]
    assert again.deduplicated and again.checkpoint.sequence == 1 and again.state_json == expected
    assert await count_checkpoints(database_url, key) == 1

    # Two items of one instance in one batch: the second builds on the first; a repeat inside the batch dedupes.
    batch = (await save(s, item(key, "Reserve", {"reserved": 3}, state_mode=ADD),
                        item(key, "Ship", {"parcel": "ü-1"}, state_mode=ADD),
                        item(key, "Ship", {"parcel": "ü-1"}, state_mode=ADD))).results
    assert [(r.checkpoint.sequence, r.deduplicated) for r in batch] == [(2, False), (3, False), (3, True)]
    assert batch[0].state_json == expected[:-1] + b',"Reserve":{"reserved":3}}'
    shipped = ('{"order":"A-1","amount":10,"Charge":{"charge":"ch_1","ok":true},"Reserve":{"reserved":3},'
               '"Ship":{"parcel":"ü-1"}}').encode()
    assert batch[1].state_json == batch[2].state_json == shipped
    assert (await latest(s, key)).state_json == shipped
    # A step saved again with another result replaces its result in place.
    redo = (await save(s, item(key, "Reserve", {"reserved": 4}, state_mode=ADD))).results[0]
    assert json.loads(redo.state_json)["Reserve"] == {"reserved": 4}
    assert list(json.loads(redo.state_json)) == ["order", "amount", "Charge", "Reserve", "Ship"]
    assert await count_checkpoints(database_url, key) == 4


async def test_step_result_builds_on_a_replaced_state_or_on_nothing(harness: Harness) -> None:
    s = harness.alpha
    bare = new_key()
    await start(s, bare)
    first = (await save(s, item(bare, "Lookup", [1, 2], state_mode=ADD))).results[0]
    assert first.state_json == b'{"Lookup":[1,2]}'
    # A whole state saved with REPLACE (the default) is what the next result is added to; REPLACE returns no state.
    replaced = (await save(s, item(bare, "Reset", {"fresh": True}))).results[0]
    assert replaced.state_json == b""
    assert (await save(s, item(bare, "Next", 7, state_mode=ADD))).results[0].state_json == b'{"fresh":true,"Next":7}'
    # A current state that is not an object is kept under "state".
    scalar = new_key()
    await start(s, scalar)
    await save(s, item(scalar, "Count", b"[3, 4]"))
    merged = (await save(s, item(scalar, "Total", {"sum": 7}, state_mode=ADD))).results[0]
    assert merged.state_json == b'{"state":[3,4],"Total":{"sum":7}}'


@pytest.mark.parametrize("harness", [{"max_state_bytes": 4096, "max_message_bytes": 2 * 1024 * 1024}],
                         indirect=True)
async def test_step_result_that_makes_the_state_too_large_writes_nothing(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, start_item_json=raw({"blob": "x" * 3000}))
    code, details = await refused(save(s, item(key, "Big", {"more": "y" * 2000}, state_mode=ADD)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "items[0]" in details and "4096" in details
    assert await count_checkpoints(database_url, key) == 0
    code, _ = await refused(save(s, item(key, "Odd", {"a": 1}, state_mode=7)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# --- 4. a save completes the claimed key in its own transaction --------------------------------------------------------


async def test_save_completes_the_claimed_key_with_the_step_result(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key, "exec-1")
    claimed = await claim(s, charge, "exec-1")
    assert claimed.outcome == ACQUIRED and claimed.key.attempt == 1
    result = b'{"charge": "ch_9", "amount": 42}'
    saved = (await save(s, item(key, "Charge", result, state_mode=ADD, complete_key=completing(charge, 1)))).results[0]
    done = saved.completed_key
    assert done.status == idempotency_pb2.KEY_STATUS_COMPLETED and done.attempt == 1 and done.key == charge
    assert done.result_json == result and (await get_key(s, charge)).result_json == result
    replay = await claim(s, charge, "exec-9")
    assert replay.outcome == DUPLICATE and replay.key.result_json == result
    # A retried save: the checkpoint already there, the key left as it is.
    again = (await save(s, item(key, "Charge", result, state_mode=ADD, complete_key=completing(charge, 1)))).results[0]
    assert again.deduplicated and again.checkpoint.sequence == 1
    assert again.completed_key.updated_at == done.updated_at and again.completed_key.result_json == result
    assert await count_checkpoints(database_url, key) == 1
    # An explicit result is what duplicates replay.
    other = new_key()
    await claim(s, other, "exec-1")
    explicit = (await save(s, item(key, "Refund", {"r": 1}, complete_key=completing(other, 1, b'{"id":"re_1"}'))))
    assert explicit.results[0].completed_key.result_json == b'{"id":"re_1"}'


async def test_save_with_a_stale_attempt_refuses_the_whole_batch(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key_a, key_b, charge = new_key(), new_key(), new_key()
    await start(s, key_a, "exec-1")
    await start(s, key_b, "exec-1")
    await claim(s, charge, "exec-1")
    await expire_key_lease(database_url, charge)
    taken = await claim(s, charge, "exec-2")
    assert taken.outcome == ACQUIRED and taken.key.attempt == 2
    code, details = await refused(save(s, item(key_b, "Other", {"b": 1}),
                                       item(key_a, "Charge", {"c": 1}, state_mode=ADD,
                                            complete_key=completing(charge, 1))))
    assert code == grpc.StatusCode.ABORTED and "items[1]" in details and f"{SCOPE}/{charge}" in details
    assert await count_checkpoints(database_url, key_a) == 0 and await count_checkpoints(database_url, key_b) == 0
    row = await get_key(s, charge)
    assert row.status == idempotency_pb2.KEY_STATUS_IN_PROGRESS and row.attempt == 2
    # An unknown key, a released key and a malformed completion refuse the batch as well.
    code, _ = await refused(save(s, item(key_a, "Charge", {"c": 1}, complete_key=completing(new_key(), 1))))
    assert code == grpc.StatusCode.NOT_FOUND
    released = new_key()
    await claim(s, released, "exec-1")
    await s.idempotency.Release(idempotency_pb2.ReleaseRequest(scope=SCOPE, key=released, attempt=1,
                                                               error_message="declined"), metadata=s.metadata)
    code, _ = await refused(save(s, item(key_a, "Charge", {"c": 1}, complete_key=completing(released, 1))))
    assert code == grpc.StatusCode.ABORTED
    code, _ = await refused(save(s, item(key_a, "Charge", {"c": 1}, complete_key=completing(charge, 0))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert await count_checkpoints(database_url, key_a) == 0
    # The current attempt completes it.
    ok = (await save(s, item(key_a, "Charge", {"c": 1}, execution="exec-2", complete_key=completing(charge, 2))))
    assert ok.results[0].completed_key.status == idempotency_pb2.KEY_STATUS_COMPLETED


# --- 5. instance-aware claims -------------------------------------------------------------------------------------------


async def test_claim_by_the_instances_new_holder_takes_the_key_from_the_execution_that_died(
        harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key, "exec-1")
    first = await claim(s, charge, "exec-1", lease_seconds=3600, workflow_id=WF, instance_key=key)
    assert first.outcome == ACQUIRED and first.key.attempt == 1
    # exec-1 dies mid-call; the instance is resumed by exec-2 while the key's lease is still alive.
    await expire_instance_lease(database_url, key)
    assert (await start(s, key, "exec-2")).outcome == instance_pb2.START_OUTCOME_RESUMED
    again = await claim(s, charge, "exec-2", workflow_id=WF, instance_key=key)
    assert again.outcome == ACQUIRED and again.key.attempt == 2
    # The retry of that claim is the same acquisition; the dead execution's attempt is fenced off.
    assert (await claim(s, charge, "exec-2", workflow_id=WF, instance_key=key)).key.attempt == 2
    code, _ = await refused(s.idempotency.Complete(idempotency_pb2.CompleteRequest(
        scope=SCOPE, key=charge, attempt=1, result_json=b"{}"), metadata=s.metadata))
    assert code == grpc.StatusCode.ABORTED


async def test_claim_waits_while_the_keys_holder_still_holds_the_instance(harness: Harness,
                                                                         database_url: str) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key, "exec-1")
    await claim(s, charge, "exec-1", lease_seconds=3600, workflow_id=WF, instance_key=key)
    # Someone who does not hold the instance: in progress.
    assert (await claim(s, charge, "exec-2", workflow_id=WF, instance_key=key)).outcome == IN_PROGRESS
    await expire_instance_lease(database_url, key)
    await start(s, key, "exec-2")
    # The instance's holder without naming the instance: unchanged semantics, in progress.
    assert (await claim(s, charge, "exec-2")).outcome == IN_PROGRESS
    # The instance's holder whose own lease lapsed: in progress too.
    await expire_instance_lease(database_url, key)
    assert (await claim(s, charge, "exec-2", workflow_id=WF, instance_key=key)).outcome == IN_PROGRESS
    # Another instance's holder naming this key's instance: in progress.
    other = new_key()
    await start(s, other, "exec-3")
    assert (await claim(s, charge, "exec-3", workflow_id=WF, instance_key=other)).outcome == IN_PROGRESS
    assert (await get_key(s, charge)).attempt == 1


async def test_a_claim_for_a_finished_instance_starts_no_side_effect(harness: Harness, database_url: str) -> None:
    """An execution that went on after its instance was failed (n8n's On Error "Continue" past a refused save) or
    finished must not start a side effect for it: nothing would ever resume the instance to record the call. The
    claim is refused, no key is written, a batch with such a claim claims nothing, and a completed key is still
    replayed (no call is made)."""
    s = harness.alpha
    failed, completed, cancelled, running = new_key(), new_key(), new_key(), new_key()
    for key in (failed, completed, cancelled, running):
        await start(s, key, "exec-1")
    replayed = new_key()
    first = await claim(s, replayed, "exec-1", workflow_id=WF, instance_key=completed)
    await save(s, item(completed, "Charge", {"ok": True}, complete_key=completing(replayed, first.key.attempt,
                                                                                    b'{"id":"ch_1"}')))
    await save(s, item(completed, "Done", {"ok": True}, complete_instance=True))
    await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
        workflow_id=WF, instance_key=failed, execution_id="exec-1", error_message="refused", retry=False),
        metadata=s.metadata)
    await s.instances.CancelInstance(instance_pb2.CancelInstanceRequest(
        workflow_id=WF, instance_key=cancelled, actor="ops", reason="test"), metadata=s.metadata)
    for key, status in ((failed, "failed"), (completed, "completed"), (cancelled, "cancelled")):
        charge = new_key()
        code, details = await refused(claim(s, charge, "exec-1", workflow_id=WF, instance_key=key))
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert f"instance {WF}/{key} is {status}: a finished instance starts no more side effects" in details
        assert details.startswith("items[0]:")
        assert await fetch(database_url, "SELECT count(*) FROM durable_idempotency_keys WHERE key = %s",
                           charge) == [(0,)]
    # A completed key of the finished instance is replayed; the same key without the instance is unchanged.
    again = await claim(s, replayed, "exec-1", workflow_id=WF, instance_key=completed)
    assert again.outcome == DUPLICATE and again.key.result_json == b'{"id":"ch_1"}'
    # A batch: the running instance's claim is not taken either (all or nothing), and is taken alone.
    ok, bad = new_key(), new_key()
    code, details = await refused(s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[
        idempotency_pb2.ClaimItem(scope=SCOPE, key=ok, holder="exec-1", workflow_id=WF, instance_key=running),
        idempotency_pb2.ClaimItem(scope=SCOPE, key=bad, holder="exec-1", workflow_id=WF, instance_key=failed)]),
        metadata=s.metadata))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and details.startswith("items[1]:")
    assert await fetch(database_url, "SELECT count(*) FROM durable_idempotency_keys WHERE key IN (%s, %s)",
                       ok, bad) == [(0,)]
    assert (await claim(s, ok, "exec-1", workflow_id=WF, instance_key=running)).outcome == ACQUIRED
    # A key whose holder's lease lapsed is not taken over for a finished instance either.
    lapsed = new_key()
    await start(s, other := new_key(), "exec-1")
    await claim(s, lapsed, "exec-1", workflow_id=WF, instance_key=other)
    await expire_key_lease(database_url, lapsed)
    await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
        workflow_id=WF, instance_key=other, execution_id="exec-1", error_message="refused", retry=False),
        metadata=s.metadata)
    code, _ = await refused(claim(s, lapsed, "exec-2", workflow_id=WF, instance_key=other))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert (await get_key(s, lapsed)).attempt == 1


async def test_claim_naming_half_an_instance_is_invalid(harness: Harness) -> None:
    s = harness.alpha
    for kw in ({"workflow_id": WF}, {"instance_key": "order-1"}):
        code, details = await refused(claim(s, new_key(), "exec-1", **kw))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "both" in details


async def test_step_result_that_cannot_be_merged_is_invalid_and_writes_nothing(harness: Harness,
                                                                              database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    # Valid JSON stored as sent, but with numbers a merged state could not write back exactly.
    await start(s, key, start_item_json=b'{"huge": 1e400}')
    code, details = await refused(save(s, item(key, "Charge", {"ok": True}, state_mode=ADD)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "items[0]" in details
    code, _ = await refused(save(s, item(key, "Charge", b'{"digits": ' + b"9" * 5000 + b"}", state_mode=ADD)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert await count_checkpoints(database_url, key) == 0
