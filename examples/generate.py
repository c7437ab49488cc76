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

    def link(self, src: str, dst: str, output: int = 0) -> None:
        outs = self.connections.setdefault(src, {"main": []})["main"]
        while len(outs) <= output:
            outs.append([])
        outs[output].append({"node": dst, "type": "main", "index": 0})

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


def intake(flow: Flow, path: str, pos: tuple[int, int]) -> str:
    """The Webhook answers through a Respond to Webhook after the Resume Point (docs/intake.md)."""
    return flow.node("Webhook", "n8n-nodes-base.webhook", 2.1, {
        "httpMethod": "POST", "path": path, "responseMode": "responseNode", "options": {},
    }, pos, webhookId=_id("webhook", flow.wf_id))


def accepted(flow: Flow, pos: tuple[int, int]) -> str:
    """Answers the sender once the instance exists; in Resume Trigger executions it only passes the item on."""
    return flow.node("Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {
        "respondWith": "json",
        "responseBody": '={{ JSON.stringify({ accepted: $json.durable.instanceKey }) }}',
        "options": {},
    }, pos)


def side_effect(flow: Flow, scope: str, call_name: str, step: str, x: int, y: int,
                body: str) -> tuple[str, str]:
    """Claim → Call (with the derived Idempotency-Key) → Save; returns (claim, save).

    The Save adds the call's response to the instance state under the step's name and completes
    the key the Claim took, in one transaction. Done Before goes straight to the Save (the stored
    result is saved, nothing runs); Busy stays unconnected: the Resume Trigger picks the instance
    up once the other execution's lease lapses.
    """
    claim = flow.node(f"Claim {scope.capitalize()}", f"{PKG}.idempotencyGuard", 2, {
        "operation": "claim", "scope": scope, "options": {},
    }, (x, y), creds=True)
    call = http(flow, call_name, scope, (x + COL, y - 120), body, "={{ $json.idempotency.derivedKey }}")
    save = flow.node(f"Save {step.capitalize()}", f"{PKG}.durableCheckpoint", 2, {
        "operation": "save", "stepName": step, "options": {},
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
    webhook = intake(f, "orders", (0, rp_y - ROW))
    trigger = f.node("Resume Trigger", f"{PKG}.resumeTrigger", 1, {
        "pollIntervalSeconds": 2, "options": {"claimLeaseSeconds": 120},
    }, (0, rp_y), creds=True)
    handoff = f.node("Hand-off", "n8n-nodes-base.executeWorkflowTrigger", 1.1, {
        "inputSource": "passthrough",
    }, (0, rp_y + ROW))
    rp = f.node("Resume Point", f"{PKG}.resumePoint", 2, {
        "instanceKey": "={{ $json.body.orderId }}",
        "stepOutputs": ", ".join(step for _, _, step in steps),
        "versionMismatchOutput": True,
        "options": {"leaseSeconds": 120},
    }, (2 * COL, rp_y), creds=True)
    f.link(webhook, rp)
    f.link(trigger, rp)
    # Version binding: an order started on an older version of this workflow leaves by Old Version
    # carrying that version's JSON; Execute Workflow runs it, and its copy of "Hand-off" feeds its
    # own Resume Point, which takes the order's lease over.
    f.link(handoff, rp)
    run_bound = f.node("Run Old Version", "n8n-nodes-base.executeWorkflow", 1.2, {
        "source": "parameter",
        "workflowJson": "={{ JSON.stringify($json.durable.boundVersionSnapshot.workflow) }}",
        "mode": "once", "options": {"waitForSubWorkflow": True},
    }, (4 * COL, rp_y + 2 * ROW),
        # The note replaces n8n's subtitle, which would read "Workflow: undefined" for a JSON source.
        notes="the order's own version", notesInFlow=True)
    ok = accepted(f, (4 * COL, 0))
    claims, saves = [], []
    x, y = 5 * COL, ROW
    for scope, call_name, step in steps:
        claim, save = side_effect(f, scope, call_name, step, x, y, order_body())
        claims.append(claim)
        saves.append(save)
        x, y = x + 3 * COL, y + ROW
    done = f.node("Complete", f"{PKG}.durableCheckpoint", 2, {
        "operation": "complete", "resultWhat": "none",
    }, (x, y), creds=True)
    # Resume Point outputs: 0 Start, 1 Resume (no step saved yet), 2 Finished, 3 Busy, 4.. one per
    # step, then Old Version. Finished and Busy stay unconnected: a re-delivery of a finished or
    # running order does nothing, and its sender is answered when the execution ends.
    f.link(rp, ok, 0)
    f.link(ok, claims[0])
    f.link(rp, claims[0], 1)
    for i, claim in enumerate(claims[1:], start=4):
        f.link(rp, claim, i)            # paid → inventory, reserved → shipping, shipped → coupon
    f.link(rp, done, 4 + len(claims) - 1)  # couponed → complete
    f.link(rp, run_bound, 4 + len(claims))
    for save, nxt in zip(saves, [*claims[1:], done], strict=True):
        f.link(save, nxt)
    f.write("order-tracking.json",
            "New order by webhook → Resume Point → payment → inventory → shipping → coupon → complete. "
            "The sender is answered (Accepted) once the order exists in the sidecar. Each side effect is "
            "Claim → Call → Save: the call carries the derived Idempotency-Key, the Save adds its response "
            "to the order's state under the step name and completes the claimed key. A Resume Trigger feeds "
            "the same Resume Point, so a crashed order continues at its last step with the original body. "
            "Orders keep the version they started on: after you publish a changed version, an older order "
            "resumes through Old Version → Run Old Version, which runs its version's JSON as a sub-workflow.")


def renewal_reminder() -> None:
    f = Flow("durableRenewalReminder", "Renewal reminder with a durable wait")
    webhook = intake(f, "subscriptions", (0, 2 * ROW))
    trigger = f.node("Resume Trigger", f"{PKG}.resumeTrigger", 1, {
        "pollIntervalSeconds": 2, "options": {"claimLeaseSeconds": 120},
    }, (0, 3 * ROW), creds=True)
    rp = f.node("Resume Point", f"{PKG}.resumePoint", 2, {
        "instanceKey": "={{ $json.body.orderId }}", "stepOutputs": "waiting",
        "options": {"leaseSeconds": 120},
    }, (2 * COL, 3 * ROW), creds=True)
    f.link(webhook, rp)
    f.link(trigger, rp)
    ok = accepted(f, (4 * COL, 0))
    wait = f.node("Wait 6 Hours", f"{PKG}.durableCheckpoint", 2, {
        "operation": "scheduleResume", "resumeWhen": "after", "amount": 6, "unit": "hours",
    }, (5 * COL, ROW), creds=True)
    waiting = f.node("Save Waiting", f"{PKG}.durableCheckpoint", 2, {
        "operation": "save", "stepName": "waiting", "options": {},
    }, (6 * COL, ROW), creds=True)
    claim, save = side_effect(f, "notify", "Send Reminder", "reminded", 7 * COL, 2 * ROW,
                              "={{ JSON.stringify({ orderId: $json.body.orderId, email: $json.body.email }) }}")
    done = f.node("Complete", f"{PKG}.durableCheckpoint", 2, {
        "operation": "complete", "resultWhat": "none",
    }, (10 * COL, 3 * ROW), creds=True)
    f.link(rp, ok, 0)
    f.link(ok, wait)
    f.link(rp, wait, 1)     # crashed before the wait was saved: schedule it again
    f.link(rp, claim, 4)    # waiting, woken up: send the reminder
    f.link(wait, waiting)
    f.link(save, done)
    f.write("renewal-reminder.json",
            "A subscription waits six hours durably (Schedule Resume instead of a Wait node), survives any "
            "restart in between, then sends one reminder: Claim → Call → Save. The sender is answered once "
            "the subscription exists in the sidecar.")


if __name__ == "__main__":
    order_tracking()
    renewal_reminder()
