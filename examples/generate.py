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


def http(flow: Flow, name: str, path: str, pos: tuple[int, int], body: str, key_expr: str | None) -> str:
    params: dict[str, Any] = {
        "method": "POST", "url": f"{API}/{path}", "sendBody": True, "specifyBody": "json", "jsonBody": body,
        "options": {},
    }
    if key_expr:
        params.update({"sendHeaders": True, "headerParameters": {"parameters": [
            {"name": "Idempotency-Key", "value": key_expr}]}})
    return flow.node(name, "n8n-nodes-base.httpRequest", 4.2, params, pos)


def guarded_step(flow: Flow, service: str, step: str, x: int, y: int) -> tuple[str, str]:
    """Claim → call (with the derived Idempotency-Key) → record → checkpoint; returns (entry, checkpoint)."""
    title = service.capitalize()
    claim = flow.node(f"Claim {title}", f"{PKG}.idempotencyGuard", 1, {
        "operation": "claim", "scope": service, "key": "={{ $json.orderId }}", "fingerprintFrom": "fields",
        "fingerprintFields": "orderId", "options": {"leaseSeconds": 60},
    }, (x, y), creds=True)
    call = http(flow, f"Call {title}", service, (x + 220, y - 100),
                "={{ JSON.stringify({ orderId: $json.orderId, amount: $json.amount }) }}",
                "={{ $json.idempotency.derivedKey }}")
    record = flow.node(f"Record {title}", f"{PKG}.idempotencyGuard", 1, {
        "operation": "recordResult", "scope": service,
        "key": f"={{{{ $('Claim {title}').item.json.idempotency.key }}}}",
        "attempt": f"={{{{ $('Claim {title}').item.json.idempotency.attempt }}}}",
        "resultWhat": "item",
    }, (x + 440, y - 100), creds=True)
    save = flow.node(f"Save {step.capitalize()}", f"{PKG}.durableCheckpoint", 1, {
        "operation": "save", "instanceKey": "={{ $json.orderId }}", "stepName": step, "saveWhat": "item",
    }, (x + 660, y), creds=True)
    busy = flow.node(f"{title} Busy", "n8n-nodes-base.noOp", 1, {}, (x + 220, y + 120))
    flow.link(claim, call, 0)       # First Run
    flow.link(call, record)
    flow.link(record, save)
    flow.link(claim, save, 1)       # Already Done: the stored result is replayed, nothing runs
    flow.link(claim, busy, 2)       # In Progress: another execution runs it; the Resume Trigger retries later
    return claim, save


def order_tracking() -> None:
    f = Flow("durableOrderTracking", "Order tracking (durable)")
    webhook = f.node("New Order", "n8n-nodes-base.webhook", 2, {
        "httpMethod": "POST", "path": "orders", "responseMode": "onReceived", "options": {},
    }, (0, 0), webhookId=_id("webhook", f.wf_id))
    trigger = f.node("Resume Trigger", f"{PKG}.resumeTrigger", 1, {
        "pollIntervalSeconds": 2, "options": {"claimLeaseSeconds": 120},
    }, (0, 300), creds=True)
    steps = ["received", "paid", "reserved", "shipped", "couponed"]
    handoff = f.node("Bound Version Hand-off", "n8n-nodes-base.executeWorkflowTrigger", 1.1, {
        "inputSource": "passthrough",
    }, (0, 600))
    rp = f.node("Resume Point", f"{PKG}.resumePoint", 1, {
        "instanceKey": "={{ $json.body.orderId }}", "stepOutputs": ", ".join(steps[:-1]) + ", couponed",
        "versionMismatchOutput": True,
        "options": {"leaseSeconds": 120, "stateMerge": "merge"},
    }, (250, 100), creds=True)
    f.link(webhook, rp)
    f.link(trigger, rp)
    # Version binding: an order started on an older version of this workflow leaves the Resume Point
    # by Version Mismatch carrying that version's JSON; Execute Workflow runs it, and its copy of
    # "Bound Version Hand-off" feeds its own Resume Point, which takes the order's lease over.
    f.link(handoff, rp)
    run_bound = f.node("Run Bound Version", "n8n-nodes-base.executeWorkflow", 1.2, {
        "source": "parameter",
        "workflowJson": "={{ JSON.stringify($json.durable.boundVersionSnapshot.workflow) }}",
        "mode": "once", "options": {"waitForSubWorkflow": True},
    }, (550, 450))
    order = f.node("Order", "n8n-nodes-base.set", 3.4, {
        "mode": "manual", "includeOtherFields": False, "options": {},
        "assignments": {"assignments": [
            {"id": _id("a-order", f.wf_id), "name": "orderId", "value": "={{ $json.body.orderId }}", "type": "string"},
            {"id": _id("a-amount", f.wf_id), "name": "amount", "value": "={{ $json.body.amount }}", "type": "number"},
            {"id": _id("a-email", f.wf_id), "name": "email", "value": "={{ $json.body.email }}", "type": "string"},
        ]},
    }, (550, -200))
    received = f.node("Save Received", f"{PKG}.durableCheckpoint", 1, {
        "operation": "save", "instanceKey": "={{ $json.orderId }}", "stepName": "received", "saveWhat": "item",
    }, (770, -200), creds=True)
    completed = http(f, "Note Completed", "route/completed", (550, 150),
                     "={{ JSON.stringify({ orderId: $json.durable.instanceKey }) }}", None)
    in_progress = http(f, "Note In Progress", "route/in-progress", (550, 300),
                       "={{ JSON.stringify({ orderId: $json.durable.instanceKey }) }}", None)
    pay_claim, pay_save = guarded_step(f, "payment", "paid", 1000, -200)
    inv_claim, inv_save = guarded_step(f, "inventory", "reserved", 1000, 250)
    ship_claim, ship_save = guarded_step(f, "shipping", "shipped", 1000, 700)
    coup_claim, coup_save = guarded_step(f, "coupon", "couponed", 1000, 1150)
    complete = f.node("Confirm Delivery", f"{PKG}.durableCheckpoint", 1, {
        "operation": "complete", "instanceKey": "={{ $json.orderId }}", "resultWhat": "none",
    }, (1900, 1150), creds=True)
    # Resume Point outputs: 0 Start, 1 Resume (no known step), 2 Completed, 3 In Progress, 4.. one per step.
    f.link(rp, order, 0)
    f.link(rp, pay_claim, 1)
    f.link(rp, completed, 2)
    f.link(rp, in_progress, 3)
    f.link(rp, pay_claim, 4)   # received → payment
    f.link(rp, inv_claim, 5)   # paid → inventory
    f.link(rp, ship_claim, 6)  # reserved → shipping
    f.link(rp, coup_claim, 7)  # shipped → coupon
    f.link(rp, complete, 8)    # couponed → delivery confirmation
    f.link(rp, run_bound, 9)   # Version Mismatch → the bound version runs the rest
    f.link(order, received)
    f.link(received, pay_claim)
    f.link(pay_save, inv_claim)
    f.link(inv_save, ship_claim)
    f.link(ship_save, coup_claim)
    f.link(coup_save, complete)
    f.write("order-tracking.json",
            "New order by webhook → Resume Point → payment → inventory → shipping → coupon → delivery "
            "confirmation; a Durable Checkpoint after each step, an Idempotency Guard before each side effect, "
            "and a Resume Trigger feeding the same Resume Point so crashed orders continue. Orders keep the "
            "version they started on: after you publish a changed version, an older order resumes through "
            "Version Mismatch → Run Bound Version, which runs its version's JSON as a sub-workflow.")


def renewal_reminder() -> None:
    f = Flow("durableRenewalReminder", "Renewal reminder with a durable wait")
    webhook = f.node("New Subscription", "n8n-nodes-base.webhook", 2, {
        "httpMethod": "POST", "path": "subscriptions", "responseMode": "onReceived", "options": {},
    }, (0, 0), webhookId=_id("webhook", f.wf_id))
    trigger = f.node("Resume Trigger", f"{PKG}.resumeTrigger", 1, {
        "pollIntervalSeconds": 2, "options": {"claimLeaseSeconds": 120},
    }, (0, 300), creds=True)
    rp = f.node("Resume Point", f"{PKG}.resumePoint", 1, {
        "instanceKey": "={{ $json.body.orderId }}", "stepOutputs": "signed-up, waiting",
        "options": {"leaseSeconds": 120, "stateMerge": "merge"},
    }, (250, 100), creds=True)
    f.link(webhook, rp)
    f.link(trigger, rp)
    sub = f.node("Subscription", "n8n-nodes-base.set", 3.4, {
        "mode": "manual", "includeOtherFields": False, "options": {},
        "assignments": {"assignments": [
            {"id": _id("a-order", f.wf_id), "name": "orderId", "value": "={{ $json.body.orderId }}", "type": "string"},
            {"id": _id("a-email", f.wf_id), "name": "email", "value": "={{ $json.body.email }}", "type": "string"},
        ]},
    }, (550, -150))
    signed = f.node("Save Signed Up", f"{PKG}.durableCheckpoint", 1, {
        "operation": "save", "instanceKey": "={{ $json.orderId }}", "stepName": "signed-up", "saveWhat": "item",
    }, (770, -150), creds=True)
    wait = f.node("Wait Until Renewal", f"{PKG}.durableCheckpoint", 1, {
        "operation": "scheduleResume", "instanceKey": "={{ $json.orderId }}", "resumeWhen": "after",
        "amount": 6, "unit": "hours",
    }, (990, -150), creds=True)
    waiting = f.node("Save Waiting", f"{PKG}.durableCheckpoint", 1, {
        "operation": "save", "instanceKey": "={{ $json.orderId }}", "stepName": "waiting", "saveWhat": "item",
    }, (1210, -150), creds=True)
    claim, save = guarded_step(f, "notify", "reminded", 1000, 300)
    done = f.node("Done", f"{PKG}.durableCheckpoint", 1, {
        "operation": "complete", "instanceKey": "={{ $json.orderId }}", "resultWhat": "none",
    }, (1900, 300), creds=True)
    f.link(rp, sub, 0)
    f.link(rp, wait, 4)     # signed-up (crashed before the wait was recorded): schedule it again
    f.link(rp, claim, 5)    # waiting, woken up: send the reminder
    f.link(sub, signed)
    f.link(signed, wait)
    f.link(wait, waiting)
    f.link(save, done)
    f.write("renewal-reminder.json",
            "A subscription waits six hours durably (Schedule Resume instead of a Wait node), survives any "
            "restart in between, then sends one reminder through an Idempotency Guard.")


if __name__ == "__main__":
    order_tracking()
    renewal_reminder()
