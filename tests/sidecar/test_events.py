"""Waiting for the outside world and failing well (issue 15): Await Event, Signal, retry policy, suspension, redrive."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import grpc
import pytest
from durable.v1 import audit_pb2, common_pb2, events_pb2, instance_pb2, limits_pb2
from durable_sidecar.domain import RetryPolicy
from durable_sidecar.services.events import backoff_ms
from google.protobuf.timestamp_pb2 import Timestamp

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs, two_sidecar_processes
from tests.sidecar.storage import ago, expire_instance_lease, fetch
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start

WAITING = events_pb2.AWAIT_OUTCOME_WAITING
RECEIVED = events_pb2.AWAIT_OUTCOME_RECEIVED
DELIVERED = events_pb2.SIGNAL_OUTCOME_DELIVERED
STORED = events_pb2.SIGNAL_OUTCOME_STORED
DUPLICATE = events_pb2.SIGNAL_OUTCOME_DUPLICATE


async def await_event(s: Stubs, key: str, name: str = "delivered", execution: str = "exec-1",
                      **kw: object) -> events_pb2.AwaitEventResponse:
    return await s.events.AwaitEvent(events_pb2.AwaitEventRequest(
        workflow_id=WF, instance_key=key, execution_id=execution, event_name=name, **kw), metadata=s.metadata)


async def signal(s: Stubs, key: str, dedupe: str, payload: object = None, name: str = "delivered",
                 **kw: object) -> events_pb2.SignalInstanceResponse:
    return await s.events.SignalInstance(events_pb2.SignalInstanceRequest(
        workflow_id=WF, instance_key=key, event_name=name, dedupe_id=dedupe,
        payload_json=json.dumps(payload).encode() if payload is not None else b"", **kw), metadata=s.metadata)


async def claim(s: Stubs, claimant: str = "trigger-1") -> list[instance_pb2.ResumableInstance]:
    reply = await s.instances.ClaimResumable(
        instance_pb2.ClaimResumableRequest(workflow_ids=[WF], claimant=claimant, max_instances=100),
        metadata=s.metadata)
    return list(reply.instances)


async def claim_key(s: Stubs, key: str) -> list[instance_pb2.ResumableInstance]:
    return [r for r in await claim(s) if r.instance.instance_key == key]


async def get(s: Stubs, key: str) -> common_pb2.Instance:
    reply = await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                          metadata=s.metadata)
    return reply.instance


async def audit(url: str, key: str) -> list[tuple[str, str, str]]:
    rows = await fetch(url, "SELECT kind, actor, detail FROM durable_instance_events WHERE instance_key = %s "
                            "ORDER BY id", key)
    return [(r[0], r[1], r[2]) for r in rows]


async def mailbox(url: str, key: str) -> list[tuple[str, str, bool]]:
    rows = await fetch(url, "SELECT dedupe_id, event_name, consumed_at IS NOT NULL FROM durable_instance_mailbox "
                            "WHERE instance_key = %s ORDER BY id", key)
    return [(r[0], r[1], bool(r[2])) for r in rows]


async def refused(call: object) -> tuple[grpc.StatusCode, str]:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    raise AssertionError("the call was not refused")


async def started_with_checkpoint(s: Stubs, key: str, **kw: object) -> None:
    await start(s, key, "exec-1", **kw)
    await save(s, item(key, "shipped", {"carrier": "dhl"}))


async def due_now(url: str, key: str) -> None:
    """Database time moves past the instance's wake-up (a backoff or a wait's deadline)."""
    await fetch(url, f"UPDATE durable_instances SET wake_at = {ago(url, 1)} WHERE instance_key = %s", key)


# --- Await Event and Signal ---------------------------------------------------------------------------


async def test_signal_before_the_wait_is_kept_and_consumed_by_the_next_wait(harness: Harness,
                                                                             database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await started_with_checkpoint(s, key)
    sent = await signal(s, key, "dlv-1", {"tracking": "T1"}, sender="carrier-webhook")
    assert sent.outcome == STORED and sent.event.dedupe_id == "dlv-1" and not sent.event.HasField("consumed_at")
    other = await signal(s, key, "pay-1", {"paid": True}, name="paid")
    assert other.outcome == STORED
    got = await await_event(s, key)
    assert got.outcome == RECEIVED and json.loads(got.event.payload_json) == {"tracking": "T1"}
    assert got.event.HasField("consumed_at") and got.event.sender == "carrier-webhook"
    # The caller keeps its lease and goes on at once; the instance is active, not waiting.
    assert got.instance.lease_owner == "exec-1" and got.instance.run_state == common_pb2.RUN_STATE_ACTIVE
    assert got.instance.awaited_event == ""
    # A repeated call (same execution, no checkpoint since) answers the same and consumes nothing more.
    again = await await_event(s, key)
    assert again.outcome == RECEIVED and again.event.dedupe_id == "dlv-1"
    assert await mailbox(database_url, key) == [("dlv-1", "delivered", True), ("pay-1", "paid", False)]
    listed = await s.events.ListEvents(events_pb2.ListEventsRequest(workflow_id=WF, instance_key=key,
                                                                    pending_only=True), metadata=s.metadata)
    assert [e.dedupe_id for e in listed.events] == ["pay-1"]


async def test_signal_after_the_wait_wakes_the_instance_with_the_payload(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await started_with_checkpoint(s, key)
    parked = await await_event(s, key)
    assert parked.outcome == WAITING and parked.instance.run_state == common_pb2.RUN_STATE_WAITING
    assert parked.instance.lease_owner == "" and parked.instance.awaited_event == "delivered"
    assert not parked.instance.HasField("wait_deadline")
    # Waiting is not stalled: no claim takes it (even should a lease time be left behind), a re-delivered
    # trigger is told to keep out.
    stalled = await s.instances.ListInstances(instance_pb2.ListInstancesRequest(workflow_id=WF, stalled_only=True),
                                              metadata=s.metadata)
    assert key not in [i.instance_key for i in stalled.instances]
    await expire_instance_lease(database_url, key)
    assert await claim_key(s, key) == []
    assert (await start(s, key, "exec-redelivered")).outcome == instance_pb2.START_OUTCOME_BUSY
    assert (await await_event(s, key)).outcome == WAITING  # a repeated call changes nothing
    sent = await signal(s, key, "dlv-7", {"delivered_at": "2026-12-01"})
    assert sent.outcome == DELIVERED and sent.event.HasField("consumed_at")
    assert sent.instance.run_state == common_pb2.RUN_STATE_SCHEDULED
    handed = await claim_key(s, key)
    assert len(handed) == 1 and handed[0].reason == instance_pb2.RESUME_REASON_EVENT
    assert handed[0].event.event_name == "delivered"
    assert json.loads(handed[0].event.payload_json) == {"delivered_at": "2026-12-01"}
    resumed = await start(s, key, "exec-2", claim_token=handed[0].claim_token)
    assert resumed.outcome == instance_pb2.START_OUTCOME_RESUMED
    assert resumed.wait_outcome == instance_pb2.RESUME_REASON_EVENT and resumed.event.dedupe_id == "dlv-7"
    # The execution that took the event dies before a checkpoint: the event is handed out again, never lost.
    await expire_instance_lease(database_url, key)
    again = await claim_key(s, key)
    assert len(again) == 1 and again[0].reason == instance_pb2.RESUME_REASON_EVENT
    assert again[0].event.dedupe_id == "dlv-7"
    # Once a checkpoint is saved after it, the wait is history.
    await start(s, key, "exec-3", claim_token=again[0].claim_token)
    await save(s, item(key, "delivered", {"ok": True}, execution="exec-3"))
    assert (await start(s, key, "exec-3")).event.dedupe_id == ""
    kinds = [k for k, _, _ in await audit(database_url, key)]
    assert "awaiting_event" in kinds and "signalled" in kinds


async def test_same_dedupe_id_twice_delivers_once(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await started_with_checkpoint(s, key)
    await await_event(s, key)
    first = await signal(s, key, "webhook-42", {"n": 1})
    second = await signal(s, key, "webhook-42", {"n": 2})
    assert first.outcome == DELIVERED and second.outcome == DUPLICATE
    assert json.loads(second.event.payload_json) == {"n": 1} and second.event.HasField("consumed_at")
    assert await mailbox(database_url, key) == [("webhook-42", "delivered", True)]
    assert len(await claim_key(s, key)) == 1
    # Still a duplicate once the instance finished (the sender's retry must not fail).
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(workflow_id=WF, instance_key=key,
                                                                            execution_id="exec-1"),
                                       metadata=s.metadata)
    assert (await signal(s, key, "webhook-42", {"n": 3})).outcome == DUPLICATE


async def test_concurrent_signals_consume_one_event_per_wait(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await started_with_checkpoint(s, key)
    await await_event(s, key)
    replies = await asyncio.gather(*[signal(s, key, f"d-{i % 10}", {"i": i}) for i in range(30)])
    outcomes = Counter(r.outcome for r in replies)
    assert outcomes[DELIVERED] == 1 and outcomes[STORED] == 9 and outcomes[DUPLICATE] == 20
    box = await mailbox(database_url, key)
    assert len(box) == 10 and sum(consumed for _, _, consumed in box) == 1


async def test_timeout_hands_the_instance_out_with_its_own_reason(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await started_with_checkpoint(s, key)
    parked = await await_event(s, key, timeout_seconds=3600)
    assert parked.outcome == WAITING and parked.instance.HasField("wait_deadline")
    assert await claim_key(s, key) == []  # not due yet
    await due_now(database_url, key)
    handed = await claim_key(s, key)
    assert len(handed) == 1 and handed[0].reason == instance_pb2.RESUME_REASON_TIMEOUT
    assert not handed[0].HasField("event") and handed[0].instance.awaited_event == ""
    resumed = await start(s, key, "exec-2", claim_token=handed[0].claim_token)
    assert resumed.wait_outcome == instance_pb2.RESUME_REASON_TIMEOUT
    # The wait is over: a late signal is kept for a later wait.
    assert (await signal(s, key, "late-1", {"late": True})).outcome == STORED
    assert "wait_timed_out" in [k for k, _, _ in await audit(database_url, key)]
    # A deadline in the past times out at the next claim.
    key2 = new_key()
    await started_with_checkpoint(s, key2)
    await await_event(s, key2, deadline=Timestamp(seconds=1_000_000_000))
    handed2 = await claim_key(s, key2)
    assert len(handed2) == 1 and handed2[0].reason == instance_pb2.RESUME_REASON_TIMEOUT


async def test_signal_to_unknown_or_finished_instance_is_a_clear_error(harness: Harness) -> None:
    s = harness.alpha
    code, msg = await refused(signal(s, new_key(), "d-1", {}))
    assert code == grpc.StatusCode.NOT_FOUND and "only with start_if_absent" in msg
    key = new_key()
    await started_with_checkpoint(s, key)
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(workflow_id=WF, instance_key=key,
                                                                            execution_id="exec-1"),
                                       metadata=s.metadata)
    code, msg = await refused(signal(s, key, "d-1", {}))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "completed" in msg and "no more events" in msg
    code, _ = await refused(await_event(s, key))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    code, _ = await refused(await_event(s, new_key()))
    assert code == grpc.StatusCode.NOT_FOUND
    # Another namespace does not see the instance.
    key3 = new_key()
    await started_with_checkpoint(s, key3)
    code, _ = await refused(signal(harness.beta, key3, "d-1", {}))
    assert code == grpc.StatusCode.NOT_FOUND


async def test_bad_event_and_retry_inputs_are_invalid_argument_and_change_nothing(harness: Harness,
                                                                                   database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await started_with_checkpoint(s, key)
    cases = [
        signal(s, key, "", {}),
        signal(s, key, "d\x00", {}),
        signal(s, key, "d-1", {}, name=""),
        s.events.SignalInstance(events_pb2.SignalInstanceRequest(workflow_id=WF, instance_key=key, event_name="x",
                                                                 dedupe_id="d-2", payload_json=b"{nope"),
                                metadata=s.metadata),
        await_event(s, key, name=""),
        await_event(s, key, timeout_seconds=0),
        await_event(s, key, timeout_seconds=10**9),
        start(s, key, "exec-1", retry_policy=common_pb2.RetryPolicy(jitter=2.0)),
        start(s, key, "exec-1", retry_policy=common_pb2.RetryPolicy(backoff_multiplier=float("nan"))),
        start(s, key, "exec-1", retry_policy=common_pb2.RetryPolicy(initial_backoff_ms=5000, max_backoff_ms=10)),
        start(s, key, "exec-1", retry_policy=common_pb2.RetryPolicy(max_automatic_resumes=5000)),
        s.recovery.RetryInstance(events_pb2.RetryInstanceRequest(workflow_id=WF, instance_key=key, actor="",
                                                                 reason="x"), metadata=s.metadata),
        s.recovery.ResumeInstance(events_pb2.ResumeInstanceRequest(workflow_id=WF, instance_key=key, actor="ops",
                                                                   reason=""), metadata=s.metadata),
    ]
    for call in cases:
        code, msg = await refused(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, msg
    assert await mailbox(database_url, key) == []
    inst = await get(s, key)
    assert inst.awaited_event == "" and not inst.HasField("retry_policy")


@pytest.mark.postgres_only(reason="two sidecar processes on one database: the embedded database has one owner "
                                   "(a second sidecar is refused, see test_embedded.py)")
async def test_concurrent_signals_from_two_sidecar_processes_consume_each_event_once() -> None:
    async with two_sidecar_processes("events-two-procs", "ns-events") as (url, stubs):
        key = new_key()
        await started_with_checkpoint(stubs[0], key)
        await await_event(stubs[0], key)
        # 40 deliveries of 20 dedupe ids, each id sent once through each process, all at once.
        replies = await asyncio.gather(*[signal(stubs[i % 2], key, f"d-{i // 2}", {"i": i}) for i in range(40)])
        outcomes = Counter(r.outcome for r in replies)
        assert outcomes[DELIVERED] == 1 and outcomes[STORED] == 19 and outcomes[DUPLICATE] == 20
        box = await mailbox(url, key)
        assert len(box) == 20 and sum(c for _, _, c in box) == 1
        # Each of the 19 kept events is consumed by exactly one of 19 waits, through either process.
        handed = await claim_key(stubs[1], key)
        assert len(handed) == 1 and handed[0].reason == instance_pb2.RESUME_REASON_EVENT
        await start(stubs[1], key, "exec-2", claim_token=handed[0].claim_token)
        taken = []
        for n in range(19):
            s = stubs[n % 2]
            await save(s, item(key, f"step-{n}", {"n": n}, execution="exec-2"))
            got = await await_event(s, key, execution="exec-2")
            assert got.outcome == RECEIVED
            taken.append(got.event.dedupe_id)
        assert len(set(taken)) == 19 and handed[0].event.dedupe_id not in taken
        await save(stubs[0], item(key, "all-taken", {}, execution="exec-2"))
        assert (await await_event(stubs[0], key, execution="exec-2")).outcome == WAITING


# --- Retry policy and suspension ------------------------------------------------------------------------


def test_backoff_is_exponential_capped_and_jittered() -> None:
    policy = RetryPolicy(max_automatic_resumes=10, initial_backoff_ms=1000, max_backoff_ms=5000,
                         backoff_multiplier=2.0, jitter=0.5)
    assert [backoff_ms(policy, n, lambda: 0.0) for n in range(1, 6)] == [1000, 2000, 4000, 5000, 5000]
    assert backoff_ms(policy, 3, lambda: 1.0) == 2000  # at most half taken off
    assert backoff_ms(RetryPolicy(), 7) == 0
    assert backoff_ms(RetryPolicy(initial_backoff_ms=1, backoff_multiplier=10.0), 500, lambda: 0.0) == 86_400_000


async def test_a_policy_sent_with_defaults_for_unset_takes_the_sidecars_defaults_for_the_fields_left_out(
        harness: Harness) -> None:
    s = harness.alpha
    defaults = RetryPolicy(max_automatic_resumes=20)  # the settings' defaults (DURABLE_RETRY_*)
    only_backoff = common_pb2.RetryPolicy(initial_backoff_ms=5000, defaults_for_unset=True)
    policy = (await start(s, new_key(), "exec-1", retry_policy=only_backoff)).instance.retry_policy
    assert (policy.max_automatic_resumes, policy.initial_backoff_ms, policy.max_backoff_ms,
            policy.backoff_multiplier, policy.jitter) == (defaults.max_automatic_resumes, 5000,
                                                          defaults.max_backoff_ms, defaults.backoff_multiplier,
                                                          defaults.jitter)
    # A field sent as 0 is the caller's choice (no limit), not "left out".
    unlimited = common_pb2.RetryPolicy(max_automatic_resumes=0, defaults_for_unset=True)
    assert (await start(s, new_key(), "exec-1", retry_policy=unlimited)).instance.retry_policy \
        .max_automatic_resumes == 0
    # Without the flag a field not sent is 0, as older callers meant it.
    older = common_pb2.RetryPolicy(initial_backoff_ms=5000)
    assert (await start(s, new_key(), "exec-1", retry_policy=older)).instance.retry_policy \
        .max_automatic_resumes == 0


async def test_stalled_instance_backs_off_then_is_suspended_past_the_maximum(harness: Harness,
                                                                              database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    policy = common_pb2.RetryPolicy(max_automatic_resumes=2, initial_backoff_ms=60_000, max_backoff_ms=600_000,
                                    backoff_multiplier=2.0)
    first = await start(s, key, "exec-1", retry_policy=policy)
    assert first.instance.retry_policy.max_automatic_resumes == 2
    await save(s, item(key, "charge", {"amount": 10}))
    for attempt, backoff in ((1, "60.000"), (2, "120.000")):
        await expire_instance_lease(database_url, key)
        assert await claim_key(s, key) == []  # parked for its backoff, not handed out
        inst = await get(s, key)
        assert inst.run_state == common_pb2.RUN_STATE_SCHEDULED and inst.attempt == attempt
        assert "lease lapsed" in inst.last_error
        trail = await audit(database_url, key)
        assert trail[-1][0] == "retry_scheduled" and f"attempt {attempt} of 2, backoff {backoff} s" in trail[-1][2]
        await due_now(database_url, key)
        handed = await claim_key(s, key)
        assert len(handed) == 1 and handed[0].reason == instance_pb2.RESUME_REASON_RETRY
        await start(s, key, f"exec-retry-{attempt}", claim_token=handed[0].claim_token)
    await expire_instance_lease(database_url, key)
    assert await claim_key(s, key) == []
    inst = await get(s, key)
    assert inst.status == common_pb2.INSTANCE_STATUS_SUSPENDED and inst.HasField("suspended_at")
    assert inst.lease_owner == "" and "lease lapsed" in inst.last_error
    assert (await audit(database_url, key))[-1][0] == "suspended"
    # Out of the Resume Trigger's way, and a re-delivered trigger keeps out.
    await expire_instance_lease(database_url, key)
    assert await claim_key(s, key) == []
    assert (await start(s, key, "exec-late")).outcome == instance_pb2.START_OUTCOME_BUSY
    # Listed as suspended.
    listed = await s.instances.ListInstances(instance_pb2.ListInstancesRequest(
        workflow_id=WF, instance_key_prefix=key), metadata=s.metadata)
    assert [i.status for i in listed.instances] == [common_pb2.INSTANCE_STATUS_SUSPENDED]
    for wanted, found in ((common_pb2.INSTANCE_STATUS_SUSPENDED, [key]), (common_pb2.INSTANCE_STATUS_RUNNING, [])):
        by_status = await s.instances.ListInstances(instance_pb2.ListInstancesRequest(
            workflow_id=WF, instance_key_prefix=key, statuses=[wanted]), metadata=s.metadata)
        assert [i.instance_key for i in by_status.instances] == found
    counted = await s.audit.CountInstances(audit_pb2.CountInstancesRequest(workflow_id=WF, instance_key_prefix=key),
                                           metadata=s.metadata)
    assert {c.status: c.count for c in counted.counts if c.count} == {common_pb2.INSTANCE_STATUS_SUSPENDED: 1}


async def test_fail_with_retry_counts_attempts_and_progress_resets_them(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, "exec-1", retry_policy=common_pb2.RetryPolicy(max_automatic_resumes=1))
    await save(s, item(key, "charge", {"amount": 10}))

    async def fail(execution: str) -> common_pb2.Instance:
        reply = await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
            workflow_id=WF, instance_key=key, execution_id=execution, error_message="payment API 503", retry=True),
            metadata=s.metadata)
        return reply.instance

    failed = await fail("exec-1")
    assert failed.status == common_pb2.INSTANCE_STATUS_RUNNING and failed.attempt == 1
    assert (await fail("exec-1")).attempt == 1  # a repeated call counts once
    handed = await claim_key(s, key)
    assert len(handed) == 1 and handed[0].reason == instance_pb2.RESUME_REASON_RETRY
    await start(s, key, "exec-2", claim_token=handed[0].claim_token)
    # Progress (a new checkpoint) starts the count again.
    await save(s, item(key, "ship", {"ok": True}, execution="exec-2"))
    assert (await get(s, key)).attempt == 0
    assert (await fail("exec-2")).status == common_pb2.INSTANCE_STATUS_RUNNING
    handed = await claim_key(s, key)
    await start(s, key, "exec-3", claim_token=handed[0].claim_token)
    suspended = await fail("exec-3")
    assert suspended.status == common_pb2.INSTANCE_STATUS_SUSPENDED and suspended.last_error == "payment API 503"
    detail = (await audit(database_url, key))[-1]
    assert detail[0] == "suspended" and detail[1] == "exec-3" and "payment API 503" in detail[2]


async def test_fail_with_suspend_suspends_at_once_without_counting_a_resume(harness: Harness,
                                                                           database_url: str) -> None:
    """A failure no automatic resume can mend (the Resume Point refusing another version): suspended now,
    handed to nobody, and moved on by an operator."""
    s = harness.alpha
    key = new_key()
    await start(s, key, "exec-1")  # the default policy: 20 automatic resumes
    await save(s, item(key, "charge", {"amount": 10}))

    async def fail(execution: str) -> common_pb2.Instance:
        reply = await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
            workflow_id=WF, instance_key=key, execution_id=execution, error_message="bound to version 1",
            retry=True, suspend=True), metadata=s.metadata)
        return reply.instance

    suspended = await fail("exec-1")
    assert suspended.status == common_pb2.INSTANCE_STATUS_SUSPENDED and suspended.attempt == 0
    assert suspended.last_error == "bound to version 1" and not suspended.lease_owner
    assert (await fail("exec-1")).status == common_pb2.INSTANCE_STATUS_SUSPENDED  # a repeat changes nothing
    assert await claim_key(s, key) == []
    kinds = [(k, a) for k, a, _ in await audit(database_url, key)]
    assert kinds.count(("suspended", "exec-1")) == 1 and "retry_scheduled" not in [k for k, _ in kinds]
    assert "no automatic resume can mend it: bound to version 1" in (await audit(database_url, key))[-1][2]
    await s.recovery.ResumeInstance(events_pb2.ResumeInstanceRequest(workflow_id=WF, instance_key=key, actor="ops",
                                                                     reason="moved to version 2"),
                                    metadata=s.metadata)
    handed = await claim_key(s, key)
    assert len(handed) == 1 and handed[0].reason == instance_pb2.RESUME_REASON_REDRIVE
    # Suspend without retry suspends too (FAILED is final only without either).
    other = new_key()
    await start(s, other, "exec-9")
    reply = await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
        workflow_id=WF, instance_key=other, execution_id="exec-9", error_message="refused", suspend=True),
        metadata=s.metadata)
    assert reply.instance.status == common_pb2.INSTANCE_STATUS_SUSPENDED


# --- Operator actions -----------------------------------------------------------------------------------


async def suspended_instance(s: Stubs) -> str:
    key = new_key()
    await start(s, key, "exec-1", retry_policy=common_pb2.RetryPolicy(max_automatic_resumes=0 + 1))
    await save(s, item(key, "charge", {"amount": 10}))
    for execution in ("exec-1", "exec-2"):
        await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
            workflow_id=WF, instance_key=key, execution_id=execution, error_message="boom", retry=True),
            metadata=s.metadata)
        if execution == "exec-1":
            handed = await claim_key(s, key)
            await start(s, key, "exec-2", claim_token=handed[0].claim_token)
    assert (await get(s, key)).status == common_pb2.INSTANCE_STATUS_SUSPENDED
    return key


async def test_retry_redrives_a_suspended_or_failed_instance_with_an_audit_event(harness: Harness,
                                                                                  database_url: str) -> None:
    s = harness.alpha
    key = await suspended_instance(s)
    reply = await s.recovery.RetryInstance(events_pb2.RetryInstanceRequest(
        workflow_id=WF, instance_key=key, actor="alice", reason="payment API fixed"), metadata=s.metadata)
    assert reply.instance.status == common_pb2.INSTANCE_STATUS_RUNNING and reply.instance.attempt == 0
    assert reply.instance.last_error == "" and not reply.instance.HasField("suspended_at")
    handed = await claim_key(s, key)
    assert len(handed) == 1 and handed[0].reason == instance_pb2.RESUME_REASON_REDRIVE
    resumed = await start(s, key, "exec-3", claim_token=handed[0].claim_token, include_state=True)
    assert resumed.outcome == instance_pb2.START_OUTCOME_RESUMED
    assert resumed.latest_checkpoint.step_name == "charge"
    assert ("retried", "alice") in [(k, a) for k, a, _ in await audit(database_url, key)]
    assert "payment API fixed" in (await audit(database_url, key))[-3][2] or any(
        "payment API fixed" in d for _, _, d in await audit(database_url, key))
    # A FAILED instance can be retried too; COMPLETED cannot; an unknown one is NOT_FOUND.
    failed = new_key()
    await start(s, failed, "exec-1")
    await s.instances.FailInstance(instance_pb2.FailInstanceRequest(workflow_id=WF, instance_key=failed,
                                                                    execution_id="exec-1", error_message="bad"),
                                   metadata=s.metadata)
    again = await s.recovery.RetryInstance(events_pb2.RetryInstanceRequest(
        workflow_id=WF, instance_key=failed, actor="alice", reason="rerun"), metadata=s.metadata)
    assert again.instance.status == common_pb2.INSTANCE_STATUS_RUNNING and again.instance.error_message == ""
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(workflow_id=WF, instance_key=failed,
                                                                            execution_id="exec-1"),
                                       metadata=s.metadata)
    code, msg = await refused(s.recovery.RetryInstance(events_pb2.RetryInstanceRequest(
        workflow_id=WF, instance_key=failed, actor="alice", reason="again"), metadata=s.metadata))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "completed" in msg
    code, _ = await refused(s.recovery.RetryInstance(events_pb2.RetryInstanceRequest(
        workflow_id=WF, instance_key=new_key(), actor="alice", reason="x"), metadata=s.metadata))
    assert code == grpc.StatusCode.NOT_FOUND


async def test_an_event_taken_by_an_execution_that_failed_is_handed_to_the_retried_one(harness: Harness,
                                                                                      database_url: str) -> None:
    """Found by `make chaos SEED=538622`: the execution that took the event failed before any checkpoint, the
    instance was suspended, and the operator's retry ran it again from the checkpoint before the wait. The
    event had been consumed, so the new execution waited for it for ever."""
    s = harness.alpha
    key = new_key()
    await started_with_checkpoint(s, key, retry_policy=common_pb2.RetryPolicy(max_automatic_resumes=0 + 1))
    assert (await await_event(s, key)).outcome == WAITING
    assert (await signal(s, key, "dlv-9", {"tracking": "T9"})).outcome == DELIVERED
    handed = await claim_key(s, key)
    await start(s, key, "exec-2", claim_token=handed[0].claim_token)
    for execution in ("exec-2", "exec-3"):  # the payment after the wait fails twice: suspended
        await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
            workflow_id=WF, instance_key=key, execution_id=execution, error_message="payment API 503", retry=True),
            metadata=s.metadata)
        if execution == "exec-2":
            await due_now(database_url, key)
            again = await claim_key(s, key)
            assert again[0].reason == instance_pb2.RESUME_REASON_RETRY
            assert (await start(s, key, "exec-3", claim_token=again[0].claim_token)).event.dedupe_id == "dlv-9"
    assert (await get(s, key)).status == common_pb2.INSTANCE_STATUS_SUSPENDED
    await s.recovery.RetryInstance(events_pb2.RetryInstanceRequest(
        workflow_id=WF, instance_key=key, actor="alice", reason="payment API fixed"), metadata=s.metadata)
    redriven = await claim_key(s, key)
    assert len(redriven) == 1 and redriven[0].reason == instance_pb2.RESUME_REASON_REDRIVE
    resumed = await start(s, key, "exec-4", claim_token=redriven[0].claim_token)
    assert resumed.wait_outcome == instance_pb2.RESUME_REASON_EVENT and resumed.event.dedupe_id == "dlv-9"
    # The workflow reaches its Wait for Event again: it receives the same event at once, and nothing more is taken.
    got = await await_event(s, key, execution="exec-4")
    assert got.outcome == RECEIVED and json.loads(got.event.payload_json) == {"tracking": "T9"}
    assert await mailbox(database_url, key) == [("dlv-9", "delivered", True)]
    # Once a checkpoint follows the wait, it is history for the next redrive too.
    await save(s, item(key, "paid", {"ok": True}, execution="exec-4"))
    await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-4", error_message="bad"), metadata=s.metadata)
    await s.recovery.RetryInstance(events_pb2.RetryInstanceRequest(
        workflow_id=WF, instance_key=key, actor="alice", reason="again"), metadata=s.metadata)
    last = await claim_key(s, key)
    assert (await start(s, key, "exec-5", claim_token=last[0].claim_token)).event.dedupe_id == ""


async def test_resume_ends_a_wait_and_cancel_takes_a_suspended_instance(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await started_with_checkpoint(s, key)
    # Active: nothing to resume.
    code, msg = await refused(s.recovery.ResumeInstance(events_pb2.ResumeInstanceRequest(
        workflow_id=WF, instance_key=key, actor="bob", reason="nudge"), metadata=s.metadata))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "active" in msg
    await await_event(s, key)
    resumed = await s.recovery.ResumeInstance(events_pb2.ResumeInstanceRequest(
        workflow_id=WF, instance_key=key, actor="bob", reason="carrier confirmed by phone"), metadata=s.metadata)
    assert resumed.instance.awaited_event == "" and resumed.instance.run_state == common_pb2.RUN_STATE_SCHEDULED
    handed = await claim_key(s, key)
    assert len(handed) == 1 and handed[0].reason == instance_pb2.RESUME_REASON_REDRIVE
    assert ("resumed_by_operator", "bob") in [(k, a) for k, a, _ in await audit(database_url, key)]
    # Cancel of a suspended instance, with actor and reason on record.
    key2 = await suspended_instance(s)
    cancelled = await s.instances.CancelInstance(instance_pb2.CancelInstanceRequest(
        workflow_id=WF, instance_key=key2, actor="carol", reason="customer refunded"), metadata=s.metadata)
    assert cancelled.instance.status == common_pb2.INSTANCE_STATUS_CANCELLED
    assert (await audit(database_url, key2))[-1] == ("cancelled", "carol", "customer refunded")
    code, _ = await refused(s.recovery.ResumeInstance(events_pb2.ResumeInstanceRequest(
        workflow_id=WF, instance_key=key2, actor="bob", reason="x"), metadata=s.metadata))
    assert code == grpc.StatusCode.FAILED_PRECONDITION


async def test_cli_retries_resumes_and_cancels_with_actor_and_reason(harness: Harness, database_url: str) -> None:
    from tests.sidecar.test_server import _cli

    s = harness.alpha
    ns = harness.sidecar.settings.tokens[s.token]
    key = await suspended_instance(s)
    done = await asyncio.to_thread(_cli, database_url, "instances", "retry", WF, key, "--reason", "API fixed",
                                   "--actor", "ops-alice", "--namespace", ns)
    assert done.returncode == 0, done.stderr
    assert "running (due now" in done.stdout and "ops-alice" in done.stdout
    assert ("retried", "ops-alice") in [(k, a) for k, a, _ in await audit(database_url, key)]
    # Resume of a running, active instance: a clear refusal, exit 1, nothing changed.
    handed = await claim_key(s, key)
    await start(s, key, "exec-9", claim_token=handed[0].claim_token)
    refused_run = await asyncio.to_thread(_cli, database_url, "instances", "resume", WF, key, "--reason", "x",
                                          "--namespace", ns)
    assert refused_run.returncode == 1 and "no wait to end" in refused_run.stderr
    cancelled = await asyncio.to_thread(_cli, database_url, "instances", "cancel", WF, key, "--reason",
                                        "customer gone", "--actor", "ops-bob", "--namespace", ns)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    assert (await audit(database_url, key))[-1] == ("cancelled", "ops-bob", "customer gone")
    unknown = await asyncio.to_thread(_cli, database_url, "instances", "retry", WF, new_key(), "--reason", "x",
                                      "--namespace", ns)
    assert unknown.returncode == 1 and "does not exist" in unknown.stderr


async def test_gauges_count_waiting_and_suspended_instances_and_due_timeouts(harness: Harness,
                                                                             database_url: str) -> None:
    from durable_sidecar import metrics
    from durable_sidecar.stores.gauges import instance_gauges
    from prometheus_client import REGISTRY

    s = harness.alpha
    await suspended_instance(s)  # first: it claims what is due in the workflow
    waiting, timed, active = new_key(), new_key(), new_key()
    for key in (waiting, timed, active):
        await started_with_checkpoint(s, key)
    await await_event(s, waiting)
    await await_event(s, timed, deadline=Timestamp(seconds=1_000_000_000))  # its timeout is due
    backend = "sqlite" if harness.sidecar.settings.embedded else "postgres"
    ns = harness.sidecar.settings.tokens[s.token]
    g = (await instance_gauges(harness.sidecar.db, backend))[ns]
    assert (g.running, g.waiting, g.stalled, g.suspended, g.due_wake_ups) == (1, 2, 0, 1, 1)
    metrics.set_instance_gauges({ns: g})
    assert REGISTRY.get_sample_value("durable_instances", {"namespace": ns, "state": "suspended"}) == 1
    assert REGISTRY.get_sample_value("durable_instances", {"namespace": ns, "state": "waiting"}) == 2
    metrics.set_instance_gauges({})


async def test_signal_racing_the_timeout_ends_the_wait_once_either_way(harness: Harness) -> None:
    s = harness.alpha
    for round_ in range(8):
        key = new_key()
        await started_with_checkpoint(s, key)
        await await_event(s, key, deadline=Timestamp(seconds=1_000_000_000))  # the timeout is due already
        sent, claimed = await asyncio.gather(signal(s, key, f"race-{round_}", {"r": round_}), claim_key(s, key))
        handed = claimed or await claim_key(s, key)
        assert len(handed) == 1, round_
        if sent.outcome == DELIVERED:  # the signal was recorded first: the wait ends with the event
            assert handed[0].reason == instance_pb2.RESUME_REASON_EVENT and handed[0].event.dedupe_id == f"race-{round_}"
        else:  # the timeout was claimed first: the event waits in the mailbox for the next wait
            assert sent.outcome == STORED and handed[0].reason == instance_pb2.RESUME_REASON_TIMEOUT
            assert not sent.event.HasField("consumed_at")
        assert await claim_key(s, key) == []  # handed out once


async def test_signals_and_redrives_wake_the_resume_trigger_stream_at_once(harness: Harness) -> None:
    """A signal that delivers an event to a wait, and an operator's retry, make the instance due now: the Resume
    Trigger's stream on this replica claims it at once, not at its next poll (ten minutes here). (An instance a
    signal starts is left to the next poll: its delivery may come first, see test_signal_start.py.)"""
    s = harness.alpha
    wf = f"wf-wake-{new_key()}"  # a workflow of its own: the stream claims nothing another test left due

    async def begin(key: str) -> None:
        await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
            workflow_id=wf, instance_key=key, execution_id="exec-1"), metadata=s.metadata)

    stream = s.instances.WatchResumable(instance_pb2.WatchResumableRequest(
        claimant="trigger", workflow_ids=[wf], max_instances=10, poll_interval_ms=600_000), metadata=s.metadata)
    batches = stream.__aiter__()

    async def handed_out(key: str) -> instance_pb2.ResumableInstance:
        started = asyncio.get_running_loop().time()
        while True:
            batch = await asyncio.wait_for(batches.__anext__(), timeout=30)
            found = [r for r in batch.instances if r.instance.instance_key == key]
            if found:
                # The stream polls every ten minutes; the action woke it.
                assert asyncio.get_running_loop().time() - started < 30
                return found[0]

    try:
        assert not (await asyncio.wait_for(batches.__anext__(), timeout=30)).instances  # drained: now it sleeps
        # An event delivered to a parked wait.
        waiting = new_key()
        await begin(waiting)
        await s.events.AwaitEvent(events_pb2.AwaitEventRequest(
            workflow_id=wf, instance_key=waiting, execution_id="exec-1", event_name="paid"), metadata=s.metadata)
        reply = await s.events.SignalInstance(events_pb2.SignalInstanceRequest(
            workflow_id=wf, instance_key=waiting, event_name="paid", dedupe_id="pay-1"), metadata=s.metadata)
        assert reply.outcome == DELIVERED
        assert (await handed_out(waiting)).reason == instance_pb2.RESUME_REASON_EVENT
        # An operator's retry of a failed instance.
        failed = new_key()
        await begin(failed)
        await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
            workflow_id=wf, instance_key=failed, execution_id="exec-1", error_message="bad"), metadata=s.metadata)
        await s.recovery.RetryInstance(events_pb2.RetryInstanceRequest(
            workflow_id=wf, instance_key=failed, actor="alice", reason="fixed"), metadata=s.metadata)
        assert (await handed_out(failed)).reason == instance_pb2.RESUME_REASON_REDRIVE
    finally:
        stream.cancel()


async def test_the_resume_trigger_stream_claims_a_wake_up_at_its_time_not_at_its_next_poll(harness: Harness) -> None:
    """An instance parked until a time (a rate limit's slot, a scheduled wake-up, a wait's timeout) is claimed at
    that time by a stream that polls every ten minutes: the park wakes the streams, which plan their next claim
    for it. (A user trial saw parked rate-limited orders come back up to 3 s after their slot with the Resume
    Trigger's 5 s poll, so their calls went out late, bunched with the next slots' calls.)"""
    s = harness.alpha
    wf = f"wf-timed-{new_key()}"
    stream = s.instances.WatchResumable(instance_pb2.WatchResumableRequest(
        claimant="trigger", workflow_ids=[wf], max_instances=10, poll_interval_ms=600_000), metadata=s.metadata)
    batches = stream.__aiter__()
    loop = asyncio.get_running_loop()

    async def begin(key: str) -> None:
        await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
            workflow_id=wf, instance_key=key, execution_id="exec-1"), metadata=s.metadata)

    async def handed_out(key: str, after: float) -> float:
        """Seconds from `after` until the stream hands the instance out."""
        while True:
            batch = await asyncio.wait_for(batches.__anext__(), timeout=60)
            if any(r.instance.instance_key == key for r in batch.instances):
                return loop.time() - after

    try:
        assert not (await asyncio.wait_for(batches.__anext__(), timeout=30)).instances  # drained: now it sleeps
        # A rate limit's slot: one call every 2 s, the second parked until its slot (no wait in its process).
        first, second = new_key(), new_key()
        await begin(first)
        await begin(second)
        rate = {"limit_name": f"api-{new_key()}", "limit_key": "c", "limit": 1, "period_ms": 2000}
        for key in (first, second):
            answer = await s.limits.Throttle(limits_pb2.ThrottleRequest(
                workflow_id=wf, instance_key=key, execution_id="exec-1", **rate), metadata=s.metadata)
        assert answer.outcome == limits_pb2.THROTTLE_OUTCOME_WAITING
        parked_at = loop.time()
        took = await handed_out(second, parked_at)
        assert 1.0 <= took < 30  # at its slot (2 s ahead), not at the next poll (ten minutes)
        # A scheduled wake-up 2 s ahead.
        timed = new_key()
        await begin(timed)
        await s.instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(
            workflow_id=wf, instance_key=timed, execution_id="exec-1", delay_seconds=2), metadata=s.metadata)
        took = await handed_out(timed, loop.time())
        assert 1.0 <= took < 30
    finally:
        stream.cancel()
