"""Writes the example workflows (examples/*.json) from one readable description.

Run `python examples/generate.py` after changing it; the JSON files are
committed so users can import them as they are.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
API = "http://127.0.0.1:8099"  # the order services; change it to your own (the e2e harness rewrites it)
CRED = {"durableSidecarApi": {"id": "durableSidecarE2E", "name": "Durable Sidecar"}}
PKG = "n8n-nodes-durable"
# The Idempotency Guard's newest version: a Key set on a Claim counts within its instance.
GUARD = 2.1
# The Resume Point's newest version: another delivery under a key in use is refused (422).
RESUME_POINT = 2.1
# Recorded on new instances (Version Label): the console and the CLI show what each order is bound to.
VERSION_LABEL = "1.0.0"


def _id(name: str, wf: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"durable-examples/{wf}/{name}"))


class Flow:
    def __init__(self, wf_id: str, name: str) -> None:
        self.wf_id, self.name = wf_id, name
        self.nodes: list[dict[str, Any]] = []
        self.connections: dict[str, dict[str, list[list[dict[str, Any]]]]] = {}

    def node(self, name: str, type_: str, version: float, params: dict[str, Any], pos: tuple[int, int],
             creds: bool = False, **extra: Any) -> str:
        node = {"id": _id(name, self.wf_id), "name": name, "type": type_, "typeVersion": version,
                "position": list(pos), "parameters": params, **extra}
        if creds:
            node["credentials"] = CRED
        self.nodes.append(node)
        return name

    def link(self, src: str, dst: str, output: int = 0, input: int = 0) -> None:  # noqa: A002 - n8n's word
        outs = self.connections.setdefault(src, {"main": []})["main"]
        while len(outs) <= output:
            outs.append([])
        outs[output].append({"node": dst, "type": "main", "index": input})

    def write(self, filename: str, note: str) -> None:
        data = {"id": self.wf_id, "name": self.name, "active": False, "nodes": self.nodes,
                "connections": self.connections, "settings": {"executionOrder": "v1"},
                "pinData": {}, "meta": {"note": note}}
        (HERE / filename).write_text(json.dumps(data, indent=2) + "\n")


# The canvas is a grid: COL apart across, ROW apart down. Side effects form a staircase that
# descends to the right; the Resume Point sits below it on the left, so every edge it sends to a
# step rises from below into that step and passes behind no node.
COL, ROW = 220, 220


def http(flow: Flow, name: str, path: str, pos: tuple[int, int], body: str, key_expr: str | None) -> str:
    params: dict[str, Any] = {
        "method": "POST", "url": f"{API}/{path}", "sendBody": True, "specifyBody": "json", "jsonBody": body,
        "options": {},
    }
    if key_expr:
        params.update({"sendHeaders": True, "headerParameters": {"parameters": [
            {"name": "Idempotency-Key", "value": key_expr}]}})
    return flow.node(name, "n8n-nodes-base.httpRequest", 4.2, params, pos)


def intake(flow: Flow, path: str, pos: tuple[int, int], amount: bool = False,
           fields: tuple[str, ...] = ("orderId",)) -> tuple[str, str]:
    """The door (docs/intake.md): the Webhook answers through a Respond to Webhook after the Resume Point,
    and a body that can never make an order is answered 400 before it (each of `fields` must be text of 1 to
    255 characters). Returns (webhook, check): the Resume Point goes on the check's true output."""
    webhook = flow.node("Webhook", "n8n-nodes-base.webhook", 2.1, {
        "httpMethod": "POST", "path": path, "responseMode": "responseNode", "options": {},
    }, pos, webhookId=_id("webhook", flow.wf_id))
    rule = " && ".join(f"typeof $json.body?.{f} === 'string' && $json.body.{f}.trim() !== '' "
                       f"&& $json.body.{f}.length <= 255" for f in fields)
    why = f"{' and '.join(fields)} must be text of 1 to 255 characters"
    if amount:
        rule += " && typeof $json.body.amount === 'number' && $json.body.amount > 0"
        why += " and amount a positive number"
    check = flow.node("Check Order", "n8n-nodes-base.if", 2.2, {"conditions": {
        "options": {"caseSensitive": True, "leftValue": "", "typeValidation": "strict", "version": 2},
        "conditions": [{"id": _id("check", flow.wf_id), "leftValue": f"={{{{ {rule} }}}}", "rightValue": "",
                        "operator": {"type": "boolean", "operation": "true", "singleValue": True}}],
        "combinator": "and"}, "options": {}}, (pos[0] + COL, pos[1]))
    bad = flow.node("Bad Order", "n8n-nodes-base.respondToWebhook", 1.5, {
        "respondWith": "json",
        "responseBody": f"={{{{ JSON.stringify({{ error: 'refused', reason: '{why}' }}) }}}}",
        "options": {"responseCode": 400},
    }, (pos[0] + 2 * COL, pos[1] - ROW))
    flow.link(webhook, check)
    flow.link(check, bad, 1)
    return webhook, check


def not_accepted(flow: Flow, pos: tuple[int, int]) -> str:
    """What an error output of ours is wired to (docs/intake.md): Not Accepted answers the sender with the status
    the failed item names (`details.httpStatus`), then Fail Execution (a column right) marks the execution failed,
    so n8n's execution list and error workflow see it. Answers Not Accepted, to link the error output to."""
    answer = flow.node("Not Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {
        "respondWith": "json",
        "responseBody": "={{ JSON.stringify({ error: $json.error, status: $json.details.httpStatus }) }}",
        "options": {"responseCode": "={{ $json.details.httpStatus }}"},
    }, pos)
    fail = flow.node("Fail Execution", "n8n-nodes-base.stopAndError", 1, {
        "errorMessage": "={{ $json.error }}",
    }, (pos[0] + COL, pos[1]))
    flow.link(answer, fail)
    return answer


def resume_point(flow: Flow, params: dict[str, Any], pos: tuple[int, int]) -> str:
    """The Resume Point, its error output answered (not_accepted): a refused delivery gets the status its error
    item names (400 a bad key, 422 another delivery under a key in use, 503 the sidecar away)."""
    rp = flow.node("Resume Point", f"{PKG}.resumePoint", RESUME_POINT, {"versionLabel": VERSION_LABEL, **params},
                   pos, creds=True, onError="continueErrorOutput")
    not_accepted(flow, (pos[0] + COL, pos[1] + 3 * ROW))
    return rp


def answer_refusals(flow: Flow, rp: str, outputs: int) -> None:
    """Links the Resume Point's error output (after its `outputs` regular ones) to Not Accepted."""
    flow.link(rp, "Not Accepted", outputs)


def accepted(flow: Flow, pos: tuple[int, int]) -> str:
    """Answers the sender once the instance exists; in Resume Trigger executions it only passes the item on."""
    return flow.node("Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {
        "respondWith": "json",
        "responseBody": '={{ JSON.stringify({ accepted: $json.durable.instanceKey }) }}',
        "options": {},
    }, pos)


def side_effect(flow: Flow, scope: str, call_name: str, step: str, x: int, y: int,
                body: str, last: bool = False) -> tuple[str, str]:
    """Claim → Call (with the derived Idempotency-Key) → Save; returns (claim, save).

    The Save adds the call's response to the instance state under the step's name and completes
    the key the Claim took, in one transaction. Done Before goes straight to the Save (the stored
    result is saved, nothing runs); Busy stays unconnected: the Resume Trigger picks the instance
    up once the other execution's lease lapses. `last`: the instance's last Save, with the option
    Complete Instance, so the same call and transaction also completes the instance (no Complete
    node).
    """
    claim = flow.node(f"Claim {scope.capitalize()}", f"{PKG}.idempotencyGuard", GUARD, {
        "operation": "claim", "scope": scope, "options": {},
    }, (x, y), creds=True)
    call = http(flow, call_name, scope, (x + COL, y - 120), body, "={{ $json.idempotency.derivedKey }}")
    save = flow.node(f"Save {step.capitalize()}", f"{PKG}.durableCheckpoint", 2, {
        "operation": "save", "stepName": step, "options": {"completeInstance": True} if last else {},
    }, (x + 2 * COL, y), creds=True)
    flow.link(claim, call, 0)   # First Run
    flow.link(call, save)
    flow.link(claim, save, 1)   # Done Before
    return claim, save


def order_body(extra: str = "") -> str:
    return ("={{ JSON.stringify({ orderId: $json.body.orderId, amount: $json.body.amount, "
            f"email: $json.body.email{extra} }}) }}}}")


def order_tracking() -> None:
    f = Flow("durableOrderTracking", "Order tracking (durable)")
    steps = [("payment", "Charge Card", "paid"), ("inventory", "Reserve Stock", "reserved"),
             ("shipping", "Ship Order", "shipped"), ("coupon", "Send Coupon", "couponed")]
    rp_y = (len(steps) + 2) * ROW
    _, check = intake(f, "orders", (0, rp_y - ROW), amount=True)
    trigger = f.node("Resume Trigger", f"{PKG}.resumeTrigger", 1, {}, (0, rp_y), creds=True)
    handoff = f.node("Hand-off", "n8n-nodes-base.executeWorkflowTrigger", 1.1, {
        "inputSource": "passthrough",
    }, (0, rp_y + ROW))
    # One step output per step after which the order can stand: the last Save completes the order in
    # its own transaction, so no running order ever has the last step as its last checkpoint.
    rp = resume_point(f, {
        "instanceKey": "={{ $json.body.orderId }}",
        "stepOutputs": ", ".join(step for _, _, step in steps[:-1]),
        "versionMismatchOutput": True,
    }, (2 * COL, rp_y))
    f.link(check, rp)
    f.link(trigger, rp)
    # Version binding: an order started on an older version of this workflow leaves by Old Version
    # carrying that version's JSON; Execute Workflow runs it, and its copy of "Hand-off" feeds its
    # own Resume Point, which takes the order's lease over. Once for each item: orders bound to different
    # versions each run their own (with all items at once, n8n runs the first item's JSON for all).
    f.link(handoff, rp)
    run_bound = f.node("Run Old Version", "n8n-nodes-base.executeWorkflow", 1.2, {
        "source": "parameter",
        "workflowJson": "={{ JSON.stringify($json.durable.boundVersionSnapshot.workflow) }}",
        "mode": "each", "options": {"waitForSubWorkflow": True},
    }, (4 * COL, rp_y + 2 * ROW),
        # The note replaces n8n's subtitle, which would read "Workflow: undefined" for a JSON source.
        notes="the order's own version", notesInFlow=True)
    ok = accepted(f, (4 * COL, 0))
    claims, saves = [], []
    x, y = 5 * COL, ROW
    for n, (scope, call_name, step) in enumerate(steps, start=1):
        claim, save = side_effect(f, scope, call_name, step, x, y, order_body(), last=n == len(steps))
        claims.append(claim)
        saves.append(save)
        x, y = x + 3 * COL, y + ROW
    # Resume Point outputs: 0 Start, 1 Resume (no step saved yet), 2 Finished, 3 Busy, 4.. one per
    # step output (every step but the last), then Old Version. Finished and Busy stay unconnected:
    # a re-delivery of a finished or running order does nothing, and its sender is answered when the
    # execution ends.
    f.link(rp, ok, 0)
    f.link(ok, claims[0])
    f.link(rp, claims[0], 1)
    for i, claim in enumerate(claims[1:], start=4):
        f.link(rp, claim, i)            # paid → inventory, reserved → shipping, shipped → coupon
    f.link(rp, run_bound, 4 + len(claims) - 1)
    answer_refusals(f, rp, 4 + len(claims))
    for save, nxt in zip(saves[:-1], claims[1:], strict=True):
        f.link(save, nxt)               # the last Save (couponed) completes the order: nothing follows
    f.write("order-tracking.json",
            "New order by webhook → Resume Point → payment → inventory → shipping → coupon; the last Save "
            "(couponed, option Complete Instance) completes the order in the same call, no Complete node. "
            "The sender is answered (Accepted) once the order exists in the sidecar. Each side effect is "
            "Claim → Call → Save: the call carries the derived Idempotency-Key, the Save adds its response "
            "to the order's state under the step name and completes the claimed key. A Resume Trigger feeds "
            "the same Resume Point, so a crashed order continues at its last step with the original body. "
            "Orders keep the version they started on: after you publish a changed version, an older order "
            "resumes through Old Version → Run Old Version, which runs its version's JSON as a sub-workflow.")


def renewal_reminder() -> None:
    f = Flow("durableRenewalReminder", "Renewal reminder with a durable wait")
    _, check = intake(f, "subscriptions", (0, 2 * ROW))
    trigger = f.node("Resume Trigger", f"{PKG}.resumeTrigger", 1, {}, (0, 3 * ROW), creds=True)
    rp = resume_point(f, {
        "instanceKey": "={{ $json.body.orderId }}", "stepOutputs": "waiting",
    }, (2 * COL, 3 * ROW))
    f.link(check, rp)
    f.link(trigger, rp)
    answer_refusals(f, rp, 5)
    ok = accepted(f, (4 * COL, 0))
    wait = f.node("Wait 6 Hours", f"{PKG}.durableCheckpoint", 2, {
        "operation": "scheduleResume", "resumeWhen": "after", "amount": 6, "unit": "hours",
    }, (5 * COL, ROW), creds=True)
    waiting = f.node("Save Waiting", f"{PKG}.durableCheckpoint", 2, {
        "operation": "save", "stepName": "waiting", "options": {},
    }, (6 * COL, ROW), creds=True)
    # The last Save (reminded) completes the subscription in the same call: no Complete node.
    claim, _ = side_effect(f, "notify", "Send Reminder", "reminded", 7 * COL, 2 * ROW,
                           "={{ JSON.stringify({ orderId: $json.body.orderId, email: $json.body.email }) }}",
                           last=True)
    f.link(rp, ok, 0)
    f.link(ok, wait)
    f.link(rp, wait, 1)     # crashed before the wait was saved: schedule it again
    f.link(rp, claim, 4)    # waiting, woken up: send the reminder
    f.link(wait, waiting)
    f.write("renewal-reminder.json",
            "A subscription waits six hours durably (Schedule Resume instead of a Wait node), survives any "
            "restart in between, then sends one reminder: Claim → Call → Save; that last Save (option Complete "
            "Instance) completes the subscription in the same call. The sender is answered once the subscription "
            "exists in the sidecar.")


def order_delivery() -> None:
    """An order waits (durably, days if need be) for the carrier's "delivered" event, sent by another workflow."""
    f = Flow("durableOrderDelivery", "Order delivery: wait for the carrier's event")
    rp_y = 3 * ROW
    _, check = intake(f, "shipments", (0, rp_y - ROW))
    trigger = f.node("Resume Trigger", f"{PKG}.resumeTrigger", 1, {}, (0, rp_y), creds=True)
    rp = resume_point(f, {
        "instanceKey": "={{ $json.body.orderId }}",
        "stepOutputs": "shipped",
        "waitOutputs": True,
        # A shipping call that keeps failing: three automatic resumes, 10 s, 20 s, 40 s apart, then suspended.
        "options": {"maxAutomaticResumes": 3, "initialBackoffSeconds": 10,
                    "maxBackoffSeconds": 600, "backoffMultiplier": 2, "jitter": 0.2},
    }, (2 * COL, rp_y))
    f.link(check, rp)
    f.link(trigger, rp)
    answer_refusals(f, rp, 7)
    ok = accepted(f, (4 * COL, 0))
    claim_ship = f.node("Claim Shipping", f"{PKG}.idempotencyGuard", GUARD, {
        "operation": "claim", "scope": "shipping", "options": {},
    }, (5 * COL, ROW), creds=True)
    ship = http(f, "Ship Order", "shipping", (6 * COL, 0), order_body(), "={{ $json.idempotency.derivedKey }}")
    # A failed call goes to its error output: the failure is retried under the Resume Point's policy.
    f.nodes[-1]["onError"] = "continueErrorOutput"
    retry_later = f.node("Retry Later", f"{PKG}.durableCheckpoint", 2, {
        "operation": "fail", "instanceFrom": "resumePoint",
        "errorMessage": "={{ 'shipping failed: ' + String($json.error?.message ?? $json.error ?? 'unknown error') }}",
        "options": {"retry": True},
    }, (7 * COL, -ROW), creds=True)
    save_ship = f.node("Save Shipped", f"{PKG}.durableCheckpoint", 2, {
        "operation": "save", "stepName": "shipped", "options": {},
    }, (7 * COL, ROW), creds=True)
    wait = f.node("Wait for Delivery", f"{PKG}.durableCheckpoint", 2, {
        "operation": "awaitEvent", "instanceFrom": "resumePoint", "eventName": "delivered",
        "resumeWhen": "after", "amount": 7, "unit": "days",
    }, (8 * COL, ROW), creds=True)
    claim_notify = f.node("Claim Notify", f"{PKG}.idempotencyGuard", GUARD, {
        "operation": "claim", "scope": "notify", "options": {},
    }, (9 * COL, 2 * ROW), creds=True)
    notify = http(f, "Tell Customer", "notify", (10 * COL, ROW),
                  "={{ JSON.stringify({ orderId: $json.body.orderId, email: $json.body.email, "
                  "deliveredAt: $json.event.payload.deliveredAt }) }}", "={{ $json.idempotency.derivedKey }}")
    # The last Save completes the order in the same call and transaction: no Complete node, and no
    # running order ever has "notified" as its last step (so it needs no step output).
    save_notify = f.node("Save Notified", f"{PKG}.durableCheckpoint", 2, {
        "operation": "save", "stepName": "notified", "options": {"completeInstance": True},
    }, (11 * COL, 2 * ROW), creds=True)
    no_delivery = f.node("No Delivery", f"{PKG}.durableCheckpoint", 2, {
        "operation": "fail", "instanceFrom": "resumePoint",
        "errorMessage": "no delivery confirmed within the wait",
    }, (9 * COL, 4 * ROW), creds=True)
    # Resume Point outputs: 0 Start, 1 Resume, 2 Finished, 3 Busy, 4 shipped, 5 Event, 6 Timed Out.
    f.link(rp, ok, 0)
    f.link(ok, claim_ship)
    f.link(rp, claim_ship, 1)       # crashed before shipping was saved
    f.link(rp, wait, 4)             # shipped, but crashed before the wait: wait (again)
    f.link(rp, claim_notify, 5)     # Event: the carrier's "delivered" arrived
    f.link(rp, no_delivery, 6)      # Timed Out
    f.link(claim_ship, ship, 0)
    f.link(claim_ship, save_ship, 1)
    f.link(ship, save_ship, 0)
    f.link(ship, retry_later, 1)    # error output
    f.link(save_ship, wait)
    f.link(wait, claim_notify)      # Received: the event came before the wait
    f.link(claim_notify, notify, 0)
    f.link(claim_notify, save_notify, 1)
    f.link(notify, save_notify)
    f.write("order-delivery.json",
            "New order by webhook → ship (Claim → Call → Save) → Wait for Event \"delivered\" (7 days at most) → "
            "tell the customer; that last Save (option Complete Instance) completes the order in the same call. "
            "The carrier's webhook (workflow \"Carrier webhook\") signals the event; "
            "the Resume Trigger then resumes the order and the Resume Point sends it to Event. An event signalled "
            "before the order reached its wait is consumed at once (Received). No event within 7 days: Timed Out "
            "fails the order. A failing shipping call is retried under the Resume Point's retry policy (three "
            "automatic resumes with backoff), then the order is suspended for an operator "
            "(durable-sidecar instances retry).")


def carrier_webhook() -> None:
    """The carrier's "delivered" webhook signals the waiting order, once per carrier event id; a refused event is
    answered from the Signal's error output with the status its error item names, as the Resume Point's are."""
    f = Flow("durableCarrierWebhook", "Carrier webhook: signal delivered")
    hook = f.node("Carrier Webhook", "n8n-nodes-base.webhook", 2.1, {
        "httpMethod": "POST", "path": "carrier", "responseMode": "responseNode", "options": {},
    }, (0, 0), webhookId=_id("webhook", f.wf_id))
    signal = f.node("Signal Delivered", f"{PKG}.durableInstance", 1, {
        "operation": "signal", "workflowId": "durableOrderDelivery",
        "instanceKey": "={{ $json.body.orderId }}", "eventName": "delivered",
        "payloadFrom": "json", "payloadJson": "={{ JSON.stringify($json.body) }}",
        "dedupeId": "={{ $json.body.eventId }}", "options": {"sender": "carrier"},
    }, (COL, 0), creds=True, onError="continueErrorOutput")
    received = f.node("Received", "n8n-nodes-base.respondToWebhook", 1.5, {
        "respondWith": "firstIncomingItem", "options": {},
    }, (2 * COL, 0))
    f.link(hook, signal)
    f.link(signal, received)
    f.link(signal, not_accepted(f, (2 * COL, ROW)), 1)
    f.write("carrier-webhook.json",
            "The carrier posts { orderId, eventId, deliveredAt } when a parcel is delivered; Durable Instance "
            "(Signal) delivers the event \"delivered\" to that order's instance of \"Order delivery\", "
            "deduplicated by the carrier's eventId. Received answers 200 with the signal (outcome delivered, "
            "stored or duplicate) once the event is stored. A refused event leaves by the error output: Not "
            "Accepted answers 409 when the order has finished (a late event changes nothing: the carrier stops "
            "sending it), 400 when the body names no order, 503 when no such order exists yet or the sidecar is "
            "away (the carrier delivers again); then Fail Execution marks the execution failed.")


LIMIT = f"{PKG}.durableLimit"


def crm_sync() -> None:
    """Orders pushed to a CRM that allows each customer 2 requests at once and 5 a second (HTTP 429 above)."""
    f = Flow("durableCrmSync", "CRM sync: two at once and five a second per customer")
    rp_y = 3 * ROW
    _, check = intake(f, "crm-sync", (0, rp_y - ROW), fields=("orderId", "customerId"))
    trigger = f.node("Resume Trigger", f"{PKG}.resumeTrigger", 1, {}, (0, rp_y), creds=True)
    rp = resume_point(f, {"instanceKey": "={{ $json.body.orderId }}"}, (2 * COL, rp_y))
    f.link(check, rp)
    f.link(trigger, rp)
    answer_refusals(f, rp, 4)
    ok = accepted(f, (3 * COL, ROW))
    customer = "={{ $json.body.customerId }}"
    # The CRM's own limit is 5 a second; a period 10 % longer absorbs the network's jitter between this
    # node and the CRM (two calls a few ms apart here can arrive closer together there). One node and one
    # sidecar call for both limits: Rate Limit Too takes the rate's slot once the place is the order's.
    enter = f.node("Two at Once, Five a Second", LIMIT, 1, {
        "operation": "enterSection", "limitName": "crm-api", "limitKey": customer, "maxHolders": 2,
        "rateToo": True, "maxItems": 5, "periodAmount": 1.1, "periodUnit": "seconds",
    }, (4 * COL, 2 * ROW), creds=True)
    claim = f.node("Claim Sync", f"{PKG}.idempotencyGuard", GUARD, {
        "operation": "claim", "scope": "crm", "options": {},
    }, (5 * COL, 2 * ROW), creds=True)
    push = http(f, "Push to CRM", "crm", (6 * COL, ROW),
                "={{ JSON.stringify({ orderId: $json.body.orderId, customerId: $json.body.customerId }) }}",
                "={{ $json.idempotency.derivedKey }}")
    save = f.node("Save Synced", f"{PKG}.durableCheckpoint", 2, {
        "operation": "save", "stepName": "synced", "options": {"completeInstance": True},
    }, (7 * COL, 2 * ROW), creds=True)
    # Resume Point outputs: 0 Start, 1 Resume (a waiting order whose turn came, or one that crashed), 2
    # Finished, 3 Busy.
    f.link(rp, ok, 0)
    f.link(ok, enter)
    f.link(rp, enter, 1)
    f.link(enter, claim)
    f.link(claim, push, 0)
    f.link(claim, save, 1)  # Done Before: the CRM has it; save
    f.link(push, save)
    # No Leave Section: the Save completes the instance, which gives its place back and hands it to the next
    # waiting order right after it commits (a Leave Section would be one more node and call per order).
    f.write("crm-sync.json",
            "Each order (webhook: orderId, customerId) is pushed to a CRM that answers 429 when a customer has more "
            "than 2 requests in flight or more than 5 in a second. Durable Limit keeps every n8n process and worker "
            "within that, per customer: Enter Section (2 at once, with Rate Limit Too: 5 per 1.1 s) → Claim → Push to "
            "CRM → Save (Complete Instance), whose completion gives the order's place back. An order over a limit waits in "
            "the sidecar, holding no execution; when its turn comes the Resume Trigger brings it back through Resume.")


def chat_debounce() -> None:
    """A chat bot answers once per burst of messages: after 2 s without a new message in that chat."""
    f = Flow("durableChatDebounce", "Chat: one answer per burst of messages")
    rp_y = 3 * ROW
    _, check = intake(f, "chat", (0, rp_y - ROW), fields=("messageId", "chatId"))
    trigger = f.node("Resume Trigger", f"{PKG}.resumeTrigger", 1, {}, (0, rp_y), creds=True)
    rp = resume_point(f, {"instanceKey": "={{ $json.body.messageId }}"}, (2 * COL, rp_y))
    f.link(check, rp)
    f.link(trigger, rp)
    answer_refusals(f, rp, 4)
    ok = accepted(f, (3 * COL, ROW))
    debounce = f.node("Quiet for 2 s per Chat", LIMIT, 1, {
        "operation": "debounce", "limitName": "chat-reply", "limitKey": "={{ $json.body.chatId }}",
        "quietAmount": 2, "quietUnit": "seconds", "keep": "last", "options": {"maxWaitAmount": 30},
    }, (4 * COL, 2 * ROW), creds=True)
    claim = f.node("Claim Reply", f"{PKG}.idempotencyGuard", GUARD, {
        "operation": "claim", "scope": "reply", "options": {},
    }, (5 * COL, ROW), creds=True)
    reply = http(f, "Send Reply", "notify", (6 * COL, 0),
                 "={{ JSON.stringify({ orderId: $json.body.chatId, messageId: $json.body.messageId }) }}",
                 "={{ $json.idempotency.derivedKey }}")
    save = f.node("Save Replied", f"{PKG}.durableCheckpoint", 2, {
        "operation": "save", "stepName": "replied", "options": {"completeInstance": True},
    }, (7 * COL, ROW), creds=True)
    done = f.node("Done, Debounced", f"{PKG}.durableCheckpoint", 2, {
        "operation": "complete", "instanceFrom": "resumePoint",
    }, (5 * COL, 3 * ROW), creds=True)
    f.link(rp, ok, 0)
    f.link(ok, debounce)
    f.link(rp, debounce, 1)
    f.link(debounce, claim, 0)
    f.link(debounce, done, 1)
    f.link(claim, reply, 0)
    f.link(claim, save, 1)
    f.link(reply, save)
    f.write("chat-debounce.json",
            "Each chat message (webhook: messageId, chatId, text) is an instance. Durable Limit (Debounce, per "
            "chat) holds each message until the chat was quiet for 2 s (30 s at most): the burst's last message "
            "leaves by Run and is answered once (Claim → Send Reply → Save, Complete Instance); every earlier one "
            "leaves by Debounced and is completed without an answer. A waiting message holds no execution; the "
            "Resume Trigger brings it back through Resume when its burst is decided.")


# Every example, as `python examples/generate.py` writes them (tests/test_examples.py runs the same list).
WRITERS = (order_tracking, renewal_reminder, order_delivery, carrier_webhook, crm_sync, chat_debounce)

if __name__ == "__main__":
    for write in WRITERS:
        write()
