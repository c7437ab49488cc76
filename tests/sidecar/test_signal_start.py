"""Signal-with-start (issue 44): SignalInstance with start_if_absent starts the instance of an unknown key in the
same transaction as the delivery, so an event can never race its instance's start."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import grpc
import pytest
from durable.v1 import common_pb2, events_pb2, instance_pb2

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs, two_sidecar_processes
from tests.sidecar.storage import fetch
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start
from tests.sidecar.test_events import audit, await_event, claim_key, get, mailbox, refused, signal

STARTED = events_pb2.SIGNAL_OUTCOME_STARTED
STORED = events_pb2.SIGNAL_OUTCOME_STORED
DUPLICATE = events_pb2.SIGNAL_OUTCOME_DUPLICATE
ORDER = {"orderId": "A-1", "customer": {"id": 7}}
WEBHOOK = {"headers": {"x-request-id": "r-1"}, "body": {"orderId": "A-1", "items": 3, "address": "Main St 1"}}


async def signal_start(s: Stubs, key: str, dedupe: str, start_item: object = ORDER, **kw: object
                       ) -> events_pb2.SignalInstanceResponse:
    raw = start_item if isinstance(start_item, bytes) else json.dumps(start_item).encode()
    return await signal(s, key, dedupe, {"paid": True}, name="paid", start_if_absent=True, start_item_json=raw,
                        sender="payments", **kw)


async def count_instances(url: str, key: str) -> int:
    return int((await fetch(url, "SELECT count(*) FROM durable_instances WHERE instance_key = %s", key))[0][0])


async def test_a_signal_starts_an_absent_instance_held_for_its_delivery_which_starts_it_with_its_own_item(
        harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    sent = await signal_start(s, key, "pay-1")
    assert sent.outcome == STARTED and sent.event.dedupe_id == "pay-1" and not sent.event.HasField("consumed_at")
    inst = sent.instance
    # Held for its delivery: no execution holds it and no Resume Trigger takes it (its start item is a stand-in).
    assert inst.status == common_pb2.INSTANCE_STATUS_RUNNING and inst.lease_owner == "" and inst.last_sequence == 0
    assert not inst.HasField("wake_at") and not await claim_key(s, key)
    kinds = [(k, a) for k, a, _ in await audit(database_url, key)]
    assert kinds == [("started", "payments"), ("signalled", "payments")]
    assert "by signal paid (dedupe id pay-1)" in (await audit(database_url, key))[0][2]
    # The order's delivery starts it, with its own item (not the signal's).
    order = await start(s, key, "exec-1", start_item_json=json.dumps(WEBHOOK).encode(), include_state=True,
                        search_fields_json=b'{"customerId": "C-1"}')
    assert order.outcome == instance_pb2.START_OUTCOME_STARTED and order.instance.lease_owner == "exec-1"
    assert json.loads((await get(s, key)).search_fields_json) == {"customerId": "C-1"}  # the delivery's fields
    # The same call again (a network retry of the delivering execution): the same answer, Start.
    again = await start(s, key, "exec-1", start_item_json=json.dumps(WEBHOOK).encode(), include_state=True)
    assert again.outcome == instance_pb2.START_OUTCOME_STARTED and again.instance.resume_count == 0
    assert json.loads(order.start_item_json) == WEBHOOK and not order.HasField("latest_checkpoint")
    # The workflow reaches its Wait for Event: the event is already in the mailbox.
    await save(s, item(key, "ordered", WEBHOOK))
    got = await await_event(s, key, name="paid")
    assert got.outcome == events_pb2.AWAIT_OUTCOME_RECEIVED and json.loads(got.event.payload_json) == {"paid": True}
    assert await mailbox(database_url, key) == [("pay-1", "paid", True)]
    assert [k for k, _, _ in await audit(database_url, key)][:3] == ["started", "signalled", "start_item_delivered"]


async def test_an_operator_runs_a_held_instance_from_the_signals_start_item(harness: Harness) -> None:
    """No delivery comes: ResumeInstance hands it to the Resume Trigger, which runs it from the stand-in."""
    s = harness.alpha
    key = new_key()
    await signal_start(s, key, "pay-1")
    await s.recovery.ResumeInstance(events_pb2.ResumeInstanceRequest(
        workflow_id=WF, instance_key=key, actor="alice", reason="the order came by phone"), metadata=s.metadata)
    handed = await claim_key(s, key)
    assert len(handed) == 1 and handed[0].reason == instance_pb2.RESUME_REASON_REDRIVE
    resumed = await start(s, key, "exec-1", claim_token=handed[0].claim_token, include_state=True)
    assert resumed.outcome == instance_pb2.START_OUTCOME_RESUMED and json.loads(resumed.start_item_json) == ORDER


async def test_an_existing_instance_is_signalled_as_usual_and_keeps_its_start_item(harness: Harness,
                                                                                   database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, "exec-1", start_item_json=b'{"orderId": "original"}')
    sent = await signal_start(s, key, "pay-1", {"orderId": "from-signal"})
    assert sent.outcome == STORED and sent.instance.lease_owner == "exec-1"
    again = await signal_start(s, key, "pay-1", {"orderId": "from-signal"})
    assert again.outcome == DUPLICATE
    found = await start(s, key, "exec-1", include_state=True)
    assert json.loads(found.start_item_json) == {"orderId": "original"}
    assert [k for k, _, _ in await audit(database_url, key)].count("started") == 1
    # A repeated signal-with-start of a started instance: a duplicate, still one instance.
    key2 = new_key()
    assert (await signal_start(s, key2, "pay-9")).outcome == STARTED
    assert (await signal_start(s, key2, "pay-9")).outcome == DUPLICATE
    assert await count_instances(database_url, key2) == 1


async def test_an_empty_start_item_is_an_empty_object_and_a_finished_instance_takes_no_more_events(
        harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    assert (await signal_start(s, key, "pay-1", b"")).outcome == STARTED
    await s.recovery.ResumeInstance(events_pb2.ResumeInstanceRequest(
        workflow_id=WF, instance_key=key, actor="alice", reason="run it"), metadata=s.metadata)
    handed = await claim_key(s, key)
    resumed = await start(s, key, "exec-1", claim_token=handed[0].claim_token, include_state=True)
    assert json.loads(resumed.start_item_json) == {}
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1"), metadata=s.metadata)
    code, msg = await refused(signal_start(s, key, "pay-2"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "completed" in msg


async def test_bad_signal_with_start_input_is_refused_naming_the_field_and_starts_nothing(
        harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    cases = [
        (signal(s, key, "d-1", {}, start_item_json=b'{"a": 1}'), grpc.StatusCode.INVALID_ARGUMENT, "start_if_absent"),
        (signal_start(s, key, "d-1", b"[1, 2]"), grpc.StatusCode.INVALID_ARGUMENT, "start_item_json"),
        (signal_start(s, key, "d-1", b"{nope"), grpc.StatusCode.INVALID_ARGUMENT, "start_item_json"),
        (signal_start(s, key, ""), grpc.StatusCode.INVALID_ARGUMENT, "dedupe_id"),
        (signal(s, key, "d-1", {}, name="", start_if_absent=True), grpc.StatusCode.INVALID_ARGUMENT, "event_name"),
    ]
    for call, want, field in cases:
        code, msg = await refused(call)
        assert code == want and field in msg, (code, msg)
    assert await count_instances(database_url, key) == 0
    assert await mailbox(database_url, key) == []


@pytest.mark.parametrize("harness", [{"max_state_bytes": 4096}], indirect=True)
async def test_a_start_item_above_the_state_limit_is_refused_and_starts_nothing(harness: Harness,
                                                                               database_url: str) -> None:
    key = new_key()
    code, msg = await refused(signal_start(harness.alpha, key, "d-1", {"x": "y" * 5000}))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "start_item_json" in msg and "4096" in msg
    assert await count_instances(database_url, key) == 0


async def test_signal_with_start_racing_a_start_makes_one_instance_and_one_delivery(harness: Harness,
                                                                                  database_url: str) -> None:
    s = harness.alpha
    keys = [new_key() for _ in range(30)]

    async def race(key: str, n: int) -> tuple[events_pb2.SignalInstanceResponse, instance_pb2.StartOrResumeResponse]:
        first = signal_start(s, key, f"pay-{key}")
        second = start(s, key, f"exec-{n}", start_item_json=json.dumps(ORDER).encode())
        if n % 2:
            got = await asyncio.gather(first, second)
        else:
            two, one = await asyncio.gather(second, first)
            got = (one, two)
        return got[0], got[1]

    results = await asyncio.gather(*[race(k, n) for n, k in enumerate(keys)])
    for key, (sent, started) in zip(keys, results, strict=True):
        assert await count_instances(database_url, key) == 1
        assert await mailbox(database_url, key) == [(f"pay-{key}", "paid", False)]
        assert [k for k, _, _ in await audit(database_url, key)].count("started") == 1
        # Whoever came first made it; the delivery starts it either way (a signal's instance is held for it).
        assert sent.outcome in (STARTED, STORED) and started.outcome == instance_pb2.START_OUTCOME_STARTED
    outcomes = Counter(sent.outcome for sent, _ in results)
    assert set(outcomes) <= {STARTED, STORED}


@pytest.mark.postgres_only(reason="two sidecar processes on one database: the embedded database has one owner")
async def test_signal_with_start_racing_starts_and_signals_through_two_processes() -> None:
    async with two_sidecar_processes("signal-start-two-procs", "ns-signal-start") as (url, stubs):
        keys = [new_key() for _ in range(20)]
        calls = []
        for n, key in enumerate(keys):
            a, b = stubs[n % 2], stubs[(n + 1) % 2]
            calls += [signal_start(a, key, f"pay-{key}"), signal_start(b, key, f"pay-{key}"),
                      signal_start(b, key, f"ship-{key}"), start(a, key, f"exec-{n}")]
        replies = await asyncio.gather(*calls)
        for n, key in enumerate(keys):
            assert await count_instances(url, key) == 1
            box = await mailbox(url, key)
            assert sorted(d for d, _, _ in box) == sorted([f"pay-{key}", f"ship-{key}"])
            signals = [r.outcome for r in replies[4 * n:4 * n + 3]]
            assert signals.count(DUPLICATE) == 1 and signals.count(STARTED) <= 1
            rows = await fetch(url, "SELECT count(*) FROM durable_instance_events WHERE instance_key = %s "
                                    "AND kind = 'started'", key)
            assert rows[0][0] == 1
        inst = await get(stubs[0], keys[0])
        assert inst.instance_key == keys[0]



async def test_the_order_delivery_after_a_signal_start_runs_the_instance_with_its_own_item(
        harness: Harness, database_url: str) -> None:
    """Found in session 10: the order's webhook that came after its payment's signal-with-start was refused as
    another delivery (DIFFERENT, 422), since the start item was the signal's. It is the delivery the signal's
    start item stood in for: it replaces it and, as no execution took the instance yet, starts it."""
    s = harness.alpha
    key = new_key()
    assert (await signal_start(s, key, "pay-1", {"from": "payment"})).outcome == STARTED
    order = await start(s, key, "exec-order", start_item_json=json.dumps(WEBHOOK).encode(), check_delivery=True,
                        include_state=True)
    assert order.outcome == instance_pb2.START_OUTCOME_STARTED and order.instance.lease_owner == "exec-order"
    assert json.loads(order.start_item_json) == WEBHOOK
    assert not await claim_key(s, key)  # taken: the Resume Trigger does not hand it out as well
    # The wait takes the payment from the mailbox; the order's item is the instance's start item.
    got = await await_event(s, key, name="paid", execution="exec-order")
    assert got.outcome == events_pb2.AWAIT_OUTCOME_RECEIVED
    again = await start(s, key, "exec-again", start_item_json=json.dumps(
        {**WEBHOOK, "headers": {"x-request-id": "r-2"}}).encode(), check_delivery=True)
    assert again.outcome == instance_pb2.START_OUTCOME_BUSY  # a re-delivery of the order, answered in progress
    other = await start(s, key, "exec-other", start_item_json=json.dumps({"body": {"orderId": "B-2"}}).encode(),
                        check_delivery=True)
    assert other.outcome == instance_pb2.START_OUTCOME_DIFFERENT  # compared with the order's item from now on
    assert json.loads(other.start_item_json) == WEBHOOK
    kinds = [k for k, _, _ in await audit(database_url, key)]
    assert kinds[:3] == ["started", "signalled", "start_item_delivered"]
    assert await count_instances(database_url, key) == 1


async def test_the_order_delivery_after_an_operator_ran_the_held_instance_is_answered_in_progress(
        harness: Harness) -> None:
    """Run already (an operator resumed it, the trigger took it): the order is answered as a re-delivery (in
    progress), and a later resume of the instance reads the order's item as its start item."""
    s = harness.alpha
    key = new_key()
    await signal_start(s, key, "pay-1", {"from": "payment"})
    await s.recovery.ResumeInstance(events_pb2.ResumeInstanceRequest(
        workflow_id=WF, instance_key=key, actor="alice", reason="run it"), metadata=s.metadata)
    handed = await claim_key(s, key)
    assert len(handed) == 1
    order = await start(s, key, "exec-order", start_item_json=json.dumps(WEBHOOK).encode(), check_delivery=True)
    assert order.outcome == instance_pb2.START_OUTCOME_BUSY
    resumed = await start(s, key, "exec-trigger", claim_token=handed[0].claim_token, include_state=True)
    assert resumed.outcome == instance_pb2.START_OUTCOME_RESUMED and json.loads(resumed.start_item_json) == WEBHOOK
    # A delivery replaces only a signal's start item: the next different one is another delivery.
    other = await start(s, key, "exec-other", start_item_json=json.dumps({"body": {"orderId": "B-2"}}).encode(),
                        check_delivery=True)
    assert other.outcome == instance_pb2.START_OUTCOME_DIFFERENT
