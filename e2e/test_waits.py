"""End-to-end for issue 15: orders that wait for the carrier's event, and an order that keeps failing.

Real n8n, our nodes, the real sidecar. The examples `order-delivery.json` (an order ships, waits for
"delivered", tells the customer) and `carrier-webhook.json` (the carrier's webhook signals the order,
deduplicated by the carrier's event id) are imported as a user imports them, with a
wait timeout the test chooses per order (`timeoutSeconds` in the order) and a quick retry policy.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from conftest import REPORT, Stack, customise
from durable.v1 import audit_pb2, audit_pb2_grpc, common_pb2, events_pb2, events_pb2_grpc
from harness import NAMESPACE, REPO, http, publish_workflow, wait_until

DELIVERY_WF = "durableOrderDelivery"
CARRIER_WF = "durableCarrierWebhook"
# The retry policy the test gives the Resume Point: two automatic resumes, 1 s then 2 s apart, no jitter.
MAX_RESUMES = 2
RUNNING, COMPLETED, FAILED, SUSPENDED = (common_pb2.INSTANCE_STATUS_RUNNING, common_pb2.INSTANCE_STATUS_COMPLETED,
                                         common_pb2.INSTANCE_STATUS_FAILED, common_pb2.INSTANCE_STATUS_SUSPENDED)
WAITING = common_pb2.RUN_STATE_WAITING


def delivery_workflow(services_url: str) -> dict[str, Any]:
    wf = customise(json.loads((REPO / "examples" / "order-delivery.json").read_text()), services_url)
    for node in wf["nodes"]:
        params = node["parameters"]
        if node["name"] == "Wait for Delivery":
            # Each order says how long it waits (an hour unless the test wants a timeout).
            params.update({"resumeWhen": "after", "unit": "seconds",
                           "amount": "={{ $json.body.timeoutSeconds ?? 3600 }}"})
        elif node["type"].endswith(".resumePoint"):
            params["options"].update({"maxAutomaticResumes": MAX_RESUMES, "initialBackoffSeconds": 1,
                                      "maxBackoffSeconds": 2, "backoffMultiplier": 2, "jitter": 0})
    return wf


@pytest.fixture(scope="module")
def waits(stack: Stack) -> Iterator[Stack]:
    n8n = stack.n8n
    for wf in (delivery_workflow(stack.services.url),
               customise(json.loads((REPO / "examples" / "carrier-webhook.json").read_text()), stack.services.url)):
        publish_workflow(n8n, wf)
    wait_webhooks(stack)
    yield stack


def wait_webhooks(stack: Stack) -> None:
    stack.n8n.wait_webhook("shipments", timeout=120)
    stack.n8n.wait_webhook("carrier", timeout=120)


def keys(prefix: str, n: int) -> list[str]:
    run = uuid.uuid4().hex[:6]
    return [f"{prefix}-{run}-{i:02d}" for i in range(n)]


def post_order(stack: Stack, key: str, timeout_s: int | None = None) -> int:
    body: dict[str, Any] = {"orderId": key, "amount": 42.0, "email": f"{key}@example.com"}
    if timeout_s is not None:
        body["timeoutSeconds"] = timeout_s
    status, reply = http("POST", f"{stack.n8n.url}/webhook/shipments", body, timeout=60)
    assert status == 200, (status, reply)
    return status


def carrier(stack: Stack, key: str, event_id: str) -> tuple[int, dict[str, Any]]:
    """The carrier's webhook: answered with the Signal node's item (Received), or a refusal's status and error
    (Not Accepted, from the Signal's error output)."""
    status, reply = http("POST", f"{stack.n8n.url}/webhook/carrier",
                         {"orderId": key, "eventId": event_id, "deliveredAt": f"noon-{event_id}"}, timeout=60)
    try:
        body = json.loads(reply or b"{}")
    except ValueError:
        body = {"raw": reply.decode(errors="replace")}
    return status, body if isinstance(body, dict) else {"body": body}


def instance(stack: Stack, key: str) -> common_pb2.Instance:
    inst = stack.sidecar.instance(DELIVERY_WF, key)
    assert inst is not None, f"{key} does not exist"
    return inst


def waiting(stack: Stack, key: str) -> bool:
    inst = stack.sidecar.instance(DELIVERY_WF, key)
    return inst is not None and inst.status == RUNNING and inst.run_state == WAITING


def status_is(stack: Stack, key: str, status: int) -> bool:
    inst = stack.sidecar.instance(DELIVERY_WF, key)
    return inst is not None and inst.status == status


def audit(stack: Stack, key: str) -> list[audit_pb2.InstanceEvent]:
    stub = audit_pb2_grpc.AuditServiceStub(stack.sidecar.channel)
    reply = stub.ListInstanceEvents(audit_pb2.ListInstanceEventsRequest(
        workflow_id=DELIVERY_WF, instance_key=key, page_size=1000), metadata=stack.sidecar.md, timeout=5)
    return list(reply.events)


def mailbox(stack: Stack, key: str) -> list[common_pb2.Event]:
    stub = events_pb2_grpc.EventServiceStub(stack.sidecar.channel)
    reply = stub.ListEvents(events_pb2.ListEventsRequest(workflow_id=DELIVERY_WF, instance_key=key, page_size=1000),
                            metadata=stack.sidecar.md, timeout=5)
    return list(reply.events)


def diagnose(stack: Stack, ks: list[str]) -> str:
    lines = []
    for k in ks:
        inst = stack.sidecar.instance(DELIVERY_WF, k)
        lines.append(f"{k}: {inst and (inst.status, inst.run_state, inst.awaited_event, inst.attempt, inst.last_error)} "
                     f"trail={stack.sidecar.trail(DELIVERY_WF, k) if inst else []} "
                     f"audit={[(e.kind, e.detail) for e in audit(stack, k)] if inst else []} "
                     f"shipping={stack.services.calls('shipping', k)}/{stack.services.effects('shipping', k)} "
                     f"notify={stack.services.calls('notify', k)}/{stack.services.effects('notify', k)}")
    lines.append("--- n8n log ---\n" + "\n".join(stack.n8n.processes[-1].log.read_text(errors="replace")
                                                  .splitlines()[-30:]))
    lines.append("--- sidecar log ---\n" + "\n".join(stack.sidecar.process.log.read_text(errors="replace")
                                                     .splitlines()[-20:]))
    return "\n".join(lines)


def until(stack: Stack, what: str, predicate: Any, ks: list[str], timeout: float = 120) -> None:
    try:
        wait_until(what, predicate, timeout, interval=0.25)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnose(stack, ks)}") from None


def delivered_once(stack: Stack, k: str, event_id: str) -> None:
    """Shipped once, the customer told once, with the carrier's event; the trail ends notified."""
    assert stack.services.effects("shipping", k) == 1, diagnose(stack, [k])
    assert stack.services.effects("notify", k) == 1, diagnose(stack, [k])
    bodies = [b for b in stack.services.bodies("notify", k)]
    assert all(b.get("deliveredAt") == f"noon-{event_id}" for b in bodies), bodies
    assert stack.sidecar.trail(DELIVERY_WF, k) == ["shipped", "notified"], stack.sidecar.trail(DELIVERY_WF, k)


def test_20_orders_wait_for_the_carrier_across_a_kill9_of_n8n(waits: Stack) -> None:
    """Orders park at Wait for Delivery (no lease), n8n is killed, the carrier's signals resume them."""
    stack = waits
    t0 = time.monotonic()
    ks = keys("wait", 4)
    for k in ks:
        post_order(stack, k)
    until(stack, "every order to wait for delivered", lambda: all(waiting(stack, k) for k in ks), ks)
    for k in ks:
        inst = instance(stack, k)
        assert inst.awaited_event == "delivered" and inst.lease_owner == "", inst
    stack.main.kill9()
    killed = time.monotonic()
    time.sleep(2)
    assert all(waiting(stack, k) for k in ks), "a wait did not survive the kill"
    stack.restart_n8n()
    wait_webhooks(stack)
    restarted = time.monotonic() - killed
    for k in ks:
        status, body = carrier(stack, k, f"evt-{k}")
        assert status == 200 and body.get("signal", {}).get("outcome") == "delivered", (status, body)
    until(stack, "every order to complete", lambda: all(status_is(stack, k, COMPLETED) for k in ks), ks, 180)
    done = time.monotonic() - killed
    for k in ks:
        delivered_once(stack, k, f"evt-{k}")
        kinds = [e.kind for e in audit(stack, k)]
        assert "awaiting_event" in kinds, kinds
    REPORT.add("20. wait for carrier event across kill -9 of n8n", len(ks), len(ks), 0, time.monotonic() - t0,
               note=f"orders waited with no lease; kill -9 → n8n ready {restarted:.1f} s → signalled → all "
                    f"completed {done:.1f} s", n8n_restart_s=restarted, kill_to_completed_s=done)


def test_21_a_signal_sent_before_the_order_waits_is_kept_and_consumed(waits: Stack) -> None:
    """The carrier is faster than the order: the event waits in the mailbox; the wait takes it at once."""
    stack = waits
    t0 = time.monotonic()
    (k,) = keys("early", 1)
    stack.services.stall("shipping")
    try:
        post_order(stack, k)
        until(stack, "the order to be inside the shipping call", lambda: stack.services.in_flight("shipping") >= 1,
              [k], 90)
        status, body = carrier(stack, k, f"evt-{k}")
        assert status == 200 and body.get("signal", {}).get("outcome") == "stored", (status, body)
    finally:
        stack.services.unstall()
    until(stack, "the order to complete", lambda: status_is(stack, k, COMPLETED), [k])
    delivered_once(stack, k, f"evt-{k}")
    inst = instance(stack, k)
    assert inst.resume_count == 0, f"it should have continued in its first execution (Received): {inst}"
    events = mailbox(stack, k)
    assert [(e.event_name, e.dedupe_id, e.HasField("consumed_at")) for e in events] == [
        ("delivered", f"evt-{k}", True)], events
    REPORT.add("21. signal before the wait (mailbox)", 1, 1, 0, time.monotonic() - t0,
               note="stored, consumed by the wait in the same execution (Received)")


def test_22_a_duplicate_signal_is_delivered_once_and_a_late_one_is_refused(waits: Stack) -> None:
    stack = waits
    t0 = time.monotonic()
    (k,) = keys("dupsig", 1)
    post_order(stack, k)
    until(stack, "the order to wait", lambda: waiting(stack, k), [k])
    first = carrier(stack, k, f"evt-{k}")
    again = carrier(stack, k, f"evt-{k}")  # the carrier re-delivers its webhook
    assert first[0] == 200 and first[1]["signal"]["outcome"] == "delivered", first
    assert again[0] == 200 and again[1]["signal"]["outcome"] == "duplicate", again
    until(stack, "the order to complete", lambda: status_is(stack, k, COMPLETED), [k])
    delivered_once(stack, k, f"evt-{k}")
    assert len(mailbox(stack, k)) == 1
    late_status, late = carrier(stack, k, f"evt-{k}-late")
    # A finished order takes no more events: 409 (a 4xx, so the carrier stops re-delivering), nothing stored.
    assert late_status == 409 and "takes no more events" in late["error"], (late_status, late)
    assert len(mailbox(stack, k)) == 1
    unknown_status, unknown = carrier(stack, f"{k}-nobody", f"evt-{k}-nobody")
    assert unknown_status == 503 and "does not exist" in unknown["error"], (unknown_status, unknown)  # may start later
    no_key, reply = http("POST", f"{stack.n8n.url}/webhook/carrier", {"orderId": {"id": k}, "eventId": "x"}, timeout=60)
    assert no_key == 400 and b"is an object" in reply, (no_key, reply)  # never retried, never a key "[object Object]"
    REPORT.add("22. duplicate signal, then a late one", 1, 1, 0, time.monotonic() - t0,
               note="second delivery: duplicate; after completion: 409 (no more events); unknown order: 503; object id: 400")


def test_23_a_wait_that_times_out_leaves_by_timed_out(waits: Stack) -> None:
    stack = waits
    t0 = time.monotonic()
    (k,) = keys("timeout", 1)
    post_order(stack, k, timeout_s=3)
    until(stack, "the order to time out and fail", lambda: status_is(stack, k, FAILED), [k])
    inst = instance(stack, k)
    assert inst.error_message == "no delivery confirmed within the wait", inst
    assert stack.services.effects("shipping", k) == 1 and stack.services.calls("notify", k) == 0
    kinds = [e.kind for e in audit(stack, k)]
    assert "wait_timed_out" in kinds, kinds
    status, body = carrier(stack, k, f"evt-{k}")
    assert status == 409, (status, body)
    REPORT.add("23. wait with a 3 s timeout", 1, 0, 0, time.monotonic() - t0,
               note="Timed Out output → Fail Instance; a later signal is refused")


def test_24_a_poison_order_is_suspended_then_retried_by_the_operator_with_side_effects_once(waits: Stack) -> None:
    """Shipping fails every time: retried under the policy with backoff, suspended, fixed, `instances retry`."""
    stack = waits
    t0 = time.monotonic()
    (k,) = keys("poison", 1)
    stack.services.fail("shipping", k)
    try:
        post_order(stack, k)
        until(stack, "the order to be suspended", lambda: status_is(stack, k, SUSPENDED), [k], 180)
        suspended_after = time.monotonic() - t0
        inst = instance(stack, k)
        calls_while_failing = stack.services.calls("shipping", k)
        assert calls_while_failing == 1 + MAX_RESUMES, diagnose(stack, [k])
        assert stack.services.effects("shipping", k) == 0
        assert "shipping failed" in inst.last_error, inst
        trail = audit(stack, k)
        scheduled = [e.detail for e in trail if e.kind == "retry_scheduled"]
        assert len(scheduled) == MAX_RESUMES and all("backoff" in d for d in scheduled), trail
        assert [e.kind for e in trail].count("suspended") == 1, trail
        # Suspended: the Resume Trigger leaves it alone, a re-delivery of the order runs nothing.
        time.sleep(3)
        assert stack.services.calls("shipping", k) == calls_while_failing
        post_order(stack, k)
        assert stack.services.calls("shipping", k) == calls_while_failing
    finally:
        stack.services.heal()
    stack.sidecar.cli("instances", "retry", "--namespace", NAMESPACE, DELIVERY_WF, k,
                      "--reason", "shipping API fixed", "--actor", "e2e-operator")
    until(stack, "the retried order to ship and wait", lambda: waiting(stack, k), [k])
    status, body = carrier(stack, k, f"evt-{k}")
    assert status == 200 and body["signal"]["outcome"] == "delivered", (status, body)
    until(stack, "the order to complete", lambda: status_is(stack, k, COMPLETED), [k])
    delivered_once(stack, k, f"evt-{k}")
    retried = [e for e in audit(stack, k) if e.kind == "retried"]
    assert len(retried) == 1 and retried[0].actor == "e2e-operator" and "shipping API fixed" in retried[0].detail, \
        retried
    REPORT.add("24. poison order: suspended, fixed, instances retry", 1, 1, 0, time.monotonic() - t0,
               note=f"{calls_while_failing} failing calls ({MAX_RESUMES} automatic resumes, backoff 1 s, 2 s), "
                    f"suspended after {suspended_after:.1f} s; after the retry: shipped once, notified once",
               backoffs=len(scheduled))


def test_34_the_carriers_event_before_the_order_starts_a_held_instance_the_order_runs_with_its_own_fields(
        waits: Stack) -> None:
    """Found by a user trial: with Start If Absent, the Resume Trigger ran the instance a signal started from the
    signal's item and called the provider without the order's fields. The instance is held for its delivery: the
    order's webhook starts it, with its own item; the wait takes the early event at once."""
    stack = waits
    t0 = time.monotonic()
    wf = customise(json.loads((REPO / "examples" / "carrier-webhook.json").read_text()), stack.services.url)
    wf["id"], wf["name"] = "durableCarrierFirst", "Carrier webhook (start if absent)"
    for node in wf["nodes"]:
        if node["type"].endswith(".webhook"):
            node["parameters"]["path"] = "carrier-first"
            node["webhookId"] = str(uuid.uuid4())
        elif node["type"].endswith(".durableInstance"):
            node["parameters"]["startIfAbsent"] = True
    publish_workflow(stack.n8n, wf)
    stack.n8n.wait_webhook("carrier-first", timeout=120)
    ks = keys("first", 3)
    for k in ks:
        status, reply = http("POST", f"{stack.n8n.url}/webhook/carrier-first",
                             {"orderId": k, "eventId": f"evt-{k}", "deliveredAt": f"noon-evt-{k}"}, timeout=60)
        body = json.loads(reply or b"{}")
        assert status == 200 and body.get("signal", {}).get("outcome") == "started", (status, body)
    time.sleep(7)  # longer than the Resume Trigger's poll (5 s): a held instance is not run from the signal's item
    assert all(stack.services.calls("shipping", k) == 0 for k in ks), diagnose(stack, ks)
    for k in ks:
        post_order(stack, k)
    until(stack, "the orders to complete", lambda: all(status_is(stack, k, COMPLETED) for k in ks), ks)
    for k in ks:
        delivered_once(stack, k, f"evt-{k}")
        shipped = stack.services.bodies("shipping", k)
        assert shipped and all(b.get("email") == f"{k}@example.com" and b.get("amount") == 42.0 for b in shipped), \
            shipped  # the order's own fields, not the carrier's
        kinds = [e.kind for e in audit(stack, k)]
        assert kinds[:3] == ["started", "signalled", "start_item_delivered"], kinds
        assert instance(stack, k).resume_count == 0  # the order's execution ran it through, as a new order
    REPORT.add("34. carrier's event before the order (Start If Absent)", len(ks), len(ks), 0, time.monotonic() - t0,
               note="held for its delivery; the order started it with its own fields; the wait took the event")


def test_35_a_bulk_retry_completes_200_orders_suspended_by_a_failing_provider(waits: Stack) -> None:
    """Issue 44: the shipping provider fails for 200 orders until each is suspended; once it recovers, one bulk
    retry by filter (`durable-sidecar operations`: preview, then start) redrives all of them, and each ships once
    and completes when its carrier event comes."""
    stack = waits
    t0 = time.monotonic()
    run = uuid.uuid4().hex[:6]
    ks = [f"bulk-{run}-{i:03d}" for i in range(200)]
    for k in ks:
        stack.services.fail("shipping", k)
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda k: post_order(stack, k), ks))
        until(stack, "the 200 orders to be suspended", lambda: all(status_is(stack, k, SUSPENDED) for k in ks),
              ks[:3], 600)
    finally:
        stack.services.heal()
    suspended_after = time.monotonic() - t0
    assert all(stack.services.effects("shipping", k) == 0 for k in ks)
    flt = ("--workflow", DELIVERY_WF, "--status", "suspended", "--key-prefix", f"bulk-{run}-",
           "--error", "shipping failed", "--namespace", NAMESPACE)
    preview = stack.sidecar.cli("operations", "preview", *flt)
    assert preview.startswith("200 instances match"), preview
    started = stack.sidecar.cli("operations", "start", "retry", *flt, "--reason", "shipping API recovered",
                                "--actor", "e2e-operator")
    op_id = started.split()[1].rstrip(":")
    t1 = time.monotonic()
    until(stack, "the 200 retried orders to ship and wait", lambda: all(waiting(stack, k) for k in ks), ks[:3], 600)
    shipped_after = time.monotonic() - t1
    shown = stack.sidecar.cli("operations", "show", op_id, "--namespace", NAMESPACE)
    assert "retry completed, 200 of 200 taken (200 acted on, 0 skipped)" in shown, shown
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda k: carrier(stack, k, f"evt-{k}"), ks))
    assert all(status == 200 for status, _ in replies), [r for r in replies if r[0] != 200][:3]
    until(stack, "the 200 orders to complete", lambda: all(status_is(stack, k, COMPLETED) for k in ks), ks[:3], 600)
    for k in ks:
        delivered_once(stack, k, f"evt-{k}")
        retried = [e for e in audit(stack, k) if e.kind == "retried"]
        assert len(retried) == 1 and retried[0].actor == "e2e-operator" and f"(bulk operation {op_id})" in \
            retried[0].detail, retried
    REPORT.add("35. bulk retry of 200 suspended orders", len(ks), len(ks), 0, time.monotonic() - t0,
               note=f"suspended after {suspended_after:.0f} s; one operation retried all 200, shipped and waiting "
                    f"{shipped_after:.0f} s later; each shipped once and completed")
