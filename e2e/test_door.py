"""The door, in a real n8n: what a sender gets for a delivery that can never succeed (4xx with a JSON reason,
nothing stored, no provider called), for one that may succeed later (503), and for another delivery under a
key in use, in each of the Resume Point's Different Delivery modes."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import psycopg
import pytest
from conftest import ORDER_WF, Stack
from harness import CREDENTIAL_ID, db_url, http, wait_until
from scenarios import DocsFlow, served, wait_completed

# Bodies real senders post; the example's Check Order answers each 400 before the Resume Point.
NEVER_AN_ORDER: list[tuple[str, Any]] = [
    ("no orderId", {"amount": 5}),
    ("an empty orderId", {"orderId": "", "amount": 5}),
    ("a list", []),
    ("no body", None),
    ("a 3,000-character id", {"orderId": "x" * 3000, "amount": 5}),
    ("an object id", {"orderId": {"nested": True}}),
    ("another object id", {"orderId": {"customer": "bob"}, "amount": 999}),
    ("a number id, an amount in words", {"orderId": 12345, "amount": "lots"}),
    ("a zero amount", {"orderId": "door-zero", "amount": 0}),
    ("a negative amount", {"orderId": "door-negative", "amount": -3}),
]


def stored(stack: Stack, workflow_id: str) -> int:
    with psycopg.connect(db_url(stack.sidecar.database)) as conn:
        row = conn.execute("SELECT count(*) FROM durable_instances WHERE workflow_id = %s", (workflow_id,)).fetchone()
    return int(row[0]) if row else 0


def provider_calls(stack: Stack) -> int:
    with stack.services.ledger.lock:
        return len(stack.services.ledger.calls)


def answer(status_body: tuple[int, bytes]) -> tuple[int, dict[str, Any]]:
    status, body = status_body
    try:
        parsed = json.loads(body) if body else {}
    except ValueError:
        parsed = {"raw": body.decode(errors="replace")}
    return status, parsed if isinstance(parsed, dict) else {"raw": parsed}


def test_28_the_order_example_answers_400_with_a_reason_to_a_body_that_can_never_be_an_order(stack: Stack) -> None:
    url = f"{stack.n8n.url}/webhook/orders"
    before = (stored(stack, ORDER_WF), provider_calls(stack))
    for name, body in NEVER_AN_ORDER:
        status, reply = answer(http("POST", url, body, timeout=60))
        assert status == 400, f"{name}: {status} {reply}"
        assert reply.get("error") == "refused" and "orderId" in reply.get("reason", ""), f"{name}: {reply}"
    # Not JSON at all (cut short, or text): n8n's own body parser answers 422 before any node runs.
    for raw in (b'{"orderId": ', b"not json"):
        request = urllib.request.Request(url, data=raw, method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        assert status == 422, f"{raw!r}: {status}"
    assert (stored(stack, ORDER_WF), provider_calls(stack)) == before, "a refused delivery stored or called something"


def door_flow(services_url: str, *, workflow_id: str, path: str, different: str = "") -> dict[str, Any]:
    """A workflow from node-package/README.md with the intake wiring of docs/intake.md ("The door") and no body
    check of its own, so the Resume Point's refusals reach the sender: Webhook → Resume Point (error output →
    Not Accepted, answering $json.details.httpStatus → Fail Execution) → Start → Accepted → Claim → charge → Save
    (Complete Instance). `different`: the Different Delivery mode ("" leaves the default, Refuse); with
    "output" its Different output is answered 409 by a Respond to Webhook."""
    f = DocsFlow(workflow_id, f"The door ({path})", services_url, CREDENTIAL_ID)
    hook = f.webhook(path, "responseNode")
    rp = f.durable("Resume Point", "resumePoint", {
        "instanceKey": "={{ $json.body.orderId }}", "options": {},
        **({"differentDelivery": different} if different else {})}, (220, 0))
    f.flow.nodes[-1]["onError"] = "continueErrorOutput"
    ok = f.node("Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {"respondWith": "noData", "options": {}},
                (440, 0))
    claim = f.durable("Claim Charge", "idempotencyGuard", {"operation": "claim", "scope": "payment"}, (660, 0))
    charge = f.call("Charge", "payment", "={{ JSON.stringify({ orderId: $json.body.orderId, "
                                         "amount: $json.body.amount }) }}", (880, -100))
    save = f.durable("Save Charged", "durableCheckpoint", {
        "operation": "save", "stepName": "charged", "options": {"completeInstance": True}}, (1100, 0))
    refused = f.not_accepted((440, 300))
    for a, b in [(hook, rp), (ok, claim), (charge, save)]:
        f.link(a, b)
    f.link(rp, ok, 0)
    f.link(claim, charge, 0)
    f.link(claim, save, 1)
    regular = 4
    if different == "output":
        conflict = f.node("Conflict", "n8n-nodes-base.respondToWebhook", 1.5, {
            "respondWith": "json", "responseBody": "={{ JSON.stringify({ error: 'another order uses this id', "
                                                   "first: $json.durable.startItem.body }) }}",
            "options": {"responseCode": 409}}, (440, 150))
        f.link(rp, conflict, regular)
        regular += 1
    f.link(rp, refused, regular)  # n8n's error output comes after the regular ones
    return f.workflow()


def test_29_the_resume_point_refuses_keys_that_can_never_name_one_order_400_through_its_error_output(
        stack: Stack) -> None:
    wf, path = "durableDoorKeys", "door-keys"
    url = served(stack, path, door_flow(stack.services.url, workflow_id=wf, path=path))
    calls = provider_calls(stack)
    for name, body in [("an object id", {"orderId": {"nested": True}, "amount": 1}),
                       ("another object id", {"orderId": {"customer": "bob"}, "amount": 999}),
                       ("a list id", {"orderId": ["a"], "amount": 1}),
                       ("an id that was an object", {"orderId": "[object Object]", "amount": 1}),
                       ("a 300-character id", {"orderId": "k" * 300, "amount": 1}),
                       ("an id with a control character", {"orderId": "order\u0007", "amount": 1}),
                       ("no id", {"amount": 1})]:
        status, reply = answer(http("POST", url, body, timeout=60))
        assert status == 400, f"{name}: {status} {reply}"
        assert reply.get("status") == 400 and "Instance Key" in str(reply.get("error")), f"{name}: {reply}"
    assert stored(stack, wf) == 0 and provider_calls(stack) == calls
    # A good order still goes through, and completes.
    key = f"door-{uuid.uuid4().hex[:6]}"
    assert http("POST", url, {"orderId": key, "amount": 3}, timeout=60)[0] == 200
    wait_completed(stack, [key], timeout=60, workflow_id=wf)


@pytest.mark.parametrize("mode", ["refuse", "ignore", "output"])
def test_30_another_delivery_under_a_key_in_use_follows_different_delivery(stack: Stack, mode: str) -> None:
    wf, path = f"durableDoor{mode.capitalize()}", f"door-{mode}"
    url = served(stack, path, door_flow(stack.services.url, workflow_id=wf, path=path,
                                        different="" if mode == "refuse" else mode))
    key = f"dd-{mode}-{uuid.uuid4().hex[:6]}"
    assert http("POST", url, {"orderId": key, "amount": 10}, timeout=60)[0] == 200
    wait_completed(stack, [key], timeout=60, workflow_id=wf)
    # The same body again (a re-delivery, other headers): harmless in every mode, answered 200.
    assert http("POST", url, {"amount": 10, "orderId": key}, headers={"X-Retry": "1"}, timeout=60)[0] == 200
    inst = stack.sidecar.instance(wf, key)
    assert inst is not None
    before = (inst.updated_at.ToJsonString(), inst.resume_count, stack.services.calls("payment", key))
    status, reply = answer(http("POST", url, {"orderId": key, "amount": 9999}, timeout=60))
    expected = {"refuse": 422, "ignore": 200, "output": 409}[mode]
    assert status == expected, f"{mode}: {status} {reply}"
    if mode == "refuse":
        assert "in use by another delivery" in str(reply.get("error")) and reply.get("status") == 422
    if mode == "output":
        assert reply.get("first") == {"orderId": key, "amount": 10}
    time.sleep(1)
    after = stack.sidecar.instance(wf, key)
    assert after is not None
    assert (after.updated_at.ToJsonString(), after.resume_count, stack.services.calls("payment", key)) == before
    assert stack.services.bodies("payment", key)[0]["amount"] == 10


def test_31_a_delivery_while_the_sidecar_is_down_gets_503_not_a_4xx_and_is_taken_when_sent_again(
        stack: Stack) -> None:
    url = f"{stack.n8n.url}/webhook/orders"
    key = f"door-down-{uuid.uuid4().hex[:6]}"
    stack.sidecar.process.stop()
    try:
        status, reply = answer(http("POST", url, {"orderId": key, "amount": 5, "email": "d@example.com"},
                                    timeout=90))
    finally:
        stack.sidecar.start()
    assert status == 503, f"{status} {reply}: a sender must retry what may succeed later"
    assert reply.get("status") == 503
    wait_until("the sender's retry to be accepted",
               lambda: http("POST", url, {"orderId": key, "amount": 5, "email": "d@example.com"},
                            timeout=60)[0] == 200, timeout=60, interval=1)
    wait_completed(stack, [key], timeout=120)


def test_36_a_save_that_fails_under_its_error_output_hands_on_the_order_the_error_and_what_to_do(
        stack: Stack) -> None:
    """Under On Error: Continue (using error output), what the node after a failed Save reads in n8n: the
    order's own fields, `error`, and `details` (httpStatus, description). Before, the Save attached n8n's error
    object to the item and n8n replaced its JSON by `{error: message}`, so a Respond to Webhook there had no
    status to answer and no order to name. Here the Save's Step Name comes from the body: an empty one fails
    that item (a setup error; under Continue On Fail its instance goes on), a good one saves."""
    wf, path = "durableFailedSave", "failed-save"
    f = DocsFlow(wf, "A Save's error output", stack.services.url, CREDENTIAL_ID)
    hook = f.webhook(path, "responseNode")
    rp = f.durable("Resume Point", "resumePoint", {"instanceKey": "={{ $json.body.orderId }}", "options": {}},
                   (220, 0))
    save = f.durable("Save", "durableCheckpoint", {"operation": "save", "stepName": "={{ $json.body.step }}",
                                                   "options": {"completeInstance": True}}, (440, 0))
    f.flow.nodes[-1]["onError"] = "continueErrorOutput"
    saved = f.node("Saved", "n8n-nodes-base.respondToWebhook", 1.5, {"respondWith": "noData", "options": {}},
                   (660, 0))
    failed = f.node("Save Failed", "n8n-nodes-base.respondToWebhook", 1.5, {
        "respondWith": "json",
        "responseBody": "={{ JSON.stringify({ error: $json.error, order: $json.body.orderId, "
                        "description: $json.details.description }) }}",
        "options": {"responseCode": "={{ $json.details.httpStatus }}"}}, (660, 200))
    f.link(hook, rp)
    f.link(rp, save, 0)
    f.link(save, saved, 0)
    f.link(save, failed, 1)  # the Save's one output, then n8n's error output
    url = served(stack, path, f.workflow())

    key = f"failed-save-{uuid.uuid4().hex[:6]}"
    status, reply = answer(http("POST", url, {"orderId": key, "step": ""}, timeout=60))
    assert status == 500, f"{status} {reply}: the failed item's details.httpStatus (a workflow to fix)"
    assert reply.get("error") == "Step Name is empty" and reply.get("order") == key, reply
    assert reply.get("description"), reply
    inst = stack.sidecar.instance(wf, key)
    assert inst is not None and inst.last_sequence == 0, "a failed Save saved something"
    good = f"saved-{uuid.uuid4().hex[:6]}"
    assert http("POST", url, {"orderId": good, "step": "paid"}, timeout=60)[0] == 200
    wait_completed(stack, [good], timeout=60, workflow_id=wf)
