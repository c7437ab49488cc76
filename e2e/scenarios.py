"""What the end-to-end scenarios share: order keys and waits, the checks of side effects, and workflows built from
the node docs (DocsFlow) with a sender that retries as a real one does."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conftest import ORDER_WF, Stack
from durable.v1 import common_pb2
from harness import REPO, publish_workflow, wait_until

SIDE_EFFECTS = ("payment", "inventory", "shipping", "coupon")


FULL_TRAIL = ["paid", "reserved", "shipped", "couponed"]


COMPLETED = common_pb2.INSTANCE_STATUS_COMPLETED


def orders(prefix: str, n: int) -> list[str]:
    run = uuid.uuid4().hex[:6]
    return [f"{prefix}-{run}-{i:02d}" for i in range(n)]


def all_completed(stack: Stack, keys: list[str], workflow_id: str = ORDER_WF) -> bool:
    for k in keys:
        inst = stack.sidecar.instance(workflow_id, k)
        if inst is None or inst.status != COMPLETED:
            return False
    return True


def wait_completed(stack: Stack, keys: list[str], timeout: float, workflow_id: str = ORDER_WF) -> None:
    try:
        wait_until(f"{len(keys)} instances to complete", lambda: all_completed(stack, keys, workflow_id), timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stack.diagnose(keys, workflow_id)}") from None


def check_exactly_once(stack: Stack, keys: list[str], services: tuple[str, ...] = SIDE_EFFECTS) -> int:
    dups = stack.services.duplicate_effects(keys, services)
    assert dups == [], f"side effects not exactly once: {dups}\n{stack.diagnose(keys)}"
    return len(dups)


def post_all(stack: Stack, keys: list[str], base_url: str | None = None) -> None:
    for k in keys:
        assert stack.post_order(k, base_url=base_url) == 200


def served(stack: Stack, path: str, *workflows: dict[str, Any]) -> str:
    """Publishes the workflows (a sub-workflow before its caller), waits until n8n serves the webhook `path`,
    and returns its URL."""
    for workflow in workflows:
        publish_workflow(stack.n8n, workflow)
    stack.n8n.wait_webhook(path, timeout=120)
    return f"{stack.n8n.url}/webhook/{path}"


def wait_for(what: str, predicate: Any, since: float, timeout: float, diagnose: Any = None) -> float:
    """Waits until `predicate()`; returns the seconds from `since` (a time.monotonic())."""
    try:
        wait_until(what, predicate, timeout, interval=0.25)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnose() if diagnose else ''}") from None
    return time.monotonic() - since


def all_resumed(stack: Stack, keys: list[str], workflow_id: str = ORDER_WF) -> bool:
    return all((i := stack.sidecar.instance(workflow_id, k)) is not None and i.resume_count >= 1 for k in keys)


def all_past(stack: Stack, keys: list[str], step: str, workflow_id: str = ORDER_WF) -> bool:
    return all(step in stack.sidecar.trail(workflow_id, k) for k in keys)


RENEWAL_DOCS_WF = "durableRenewalDocs"


SHORT_DEADLINE_S = 5


class DocsFlow:
    """A workflow written from node-package/README.md: the examples' own little builder (Flow) plus the
    node shapes such workflows share: durable nodes at their newest versions on one credential, a JSON
    POST to a fake service that sends the Claim's derived key as Idempotency-Key, and the Webhook."""

    def __init__(self, workflow_id: str, name: str, services_url: str, credential_id: str) -> None:
        import sys

        sys.path.insert(0, str(REPO / "examples"))
        from generate import GUARD, RESUME_POINT, Flow, not_accepted

        self.flow, self.services_url = Flow(workflow_id, name), services_url
        self.versions = {"resumeTrigger": 1, "idempotencyGuard": GUARD, "resumePoint": RESUME_POINT, "durableLimit": 1}
        self.cred = {"durableSidecarApi": {"id": credential_id, "name": credential_id}}
        self.node, self.link = self.flow.node, self.flow.link
        # Not Accepted (the failed item's details.httpStatus) → Fail Execution, for an error output to link to.
        self.not_accepted: Callable[[tuple[int, int]], str] = lambda pos: not_accepted(self.flow, pos)

    def durable(self, name: str, type_: str, params: dict[str, Any], pos: tuple[int, int]) -> str:
        version = self.versions.get(type_, 2)
        return self.node(name, f"n8n-nodes-durable.{type_}", version, params, pos, credentials=self.cred)

    def call(self, name: str, path: str, body: str, pos: tuple[int, int]) -> str:
        return self.node(name, "n8n-nodes-base.httpRequest", 4.2, {
            "method": "POST", "url": f"{self.services_url}/{path}", "sendBody": True, "specifyBody": "json",
            "jsonBody": body, "sendHeaders": True, "headerParameters": {"parameters": [
                {"name": "Idempotency-Key", "value": "={{ $json.idempotency.derivedKey }}"}]}, "options": {},
        }, pos)

    def webhook(self, path: str, respond: str) -> str:
        return self.node("Webhook", "n8n-nodes-base.webhook", 2.1, {
            "httpMethod": "POST", "path": path, "responseMode": respond, "options": {},
        }, (0, 0), webhookId=self.flow.wf_id + "-hook")

    def workflow(self) -> dict[str, Any]:
        f = self.flow
        return {"id": f.wf_id, "name": f.name, "nodes": f.nodes, "connections": f.connections,
                "settings": {"executionOrder": "v1"}, "pinData": {}}


def renewal_from_the_docs(services_url: str, credential_id: str, *, complete_on_last_save: bool = False,
                          workflow_id: str = RENEWAL_DOCS_WF, path: str = "renewals",
                          fields_before_notify: bool = False, respond: str = "responseNode",
                          answer_redeliveries: bool = False, split_out: bool = False) -> dict[str, Any]:
    """A subscription renewal written from node-package/README.md, every option at its default.

    Webhook (answer with Respond to Webhook) → Resume Point → Start → Accepted → Claim charge →
    HTTP charge (derived key) → Save charged → Claim notify → HTTP notify → Save notified →
    Complete; Resume Trigger → the same Resume Point, which jumps to the step after the last save.
    `complete_on_last_save`: the README's shorter form, no Complete node; the last Save has the option
    Complete Instance (so no running instance ever has "notified" as its last step).
    `fields_before_notify`: an Edit Fields (Set) node between Claim Notify and the notify call builds
    its body and its Idempotency-Key (options at their defaults, so the Guard's fields are not kept):
    Save Notified then reaches the Guard's answer only through the paired items of two nodes.
    `respond="lastNode"`: the README's other answer, the Webhook's Respond: When Last Node Finishes, no
    Accepted node; `answer_redeliveries` then connects Finished and Busy to a No Operation node, as the
    README says to (n8n answers with the first output of the node that ran last).
    `split_out`: one delivery carries several subscriptions (`{"subscriptions": [...]}`); a Split Out
    node (each element under `body`, so every later node reads the same fields) makes one item of each.
    """
    f = DocsFlow(workflow_id, "Subscription renewal (from the node docs)", services_url, credential_id)
    durable, call = f.durable, f.call
    hook = f.webhook(path, respond)
    trigger = durable("Resume Trigger", "resumeTrigger", {}, (0, 200))
    rp = durable("Resume Point", "resumePoint", {
        "instanceKey": "={{ $json.body.subscriptionId }}",
        "stepOutputs": "charged" if complete_on_last_save else "charged, notified"}, (220, 100))
    ok = (f.node("Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {"respondWith": "noData", "options": {}},
                 (440, 0)) if respond == "responseNode" else None)
    claim_charge = durable("Claim Charge", "idempotencyGuard", {"operation": "claim", "scope": "charge"}, (660, 0))
    charge = call("Charge", "payment", "={{ JSON.stringify({ subscriptionId: $json.body.subscriptionId, "
                                       "amount: $json.body.amount }) }}", (880, 0))
    save_charged = durable("Save Charged", "durableCheckpoint", {"operation": "save", "stepName": "charged"},
                           (1100, 0))
    claim_notify = durable("Claim Notify", "idempotencyGuard", {"operation": "claim", "scope": "notify"},
                           (1320, 0))
    fields = None
    if fields_before_notify:
        def field(name: str, value: str, type_: str = "string") -> dict[str, Any]:
            return {"id": f"{workflow_id}-{name}", "name": name, "value": value, "type": type_}

        fields = f.node("Notify Fields", "n8n-nodes-base.set", 3.4, {"assignments": {"assignments": [
            field("subscriptionId", "={{ $json.body.subscriptionId }}"), field("email", "={{ $json.body.email }}"),
            field("amount", "={{ $json.body.amount }}", "number"), field("charge", "={{ $json.charged.id }}"),
            field("idempotencyKey", "={{ $json.idempotency.derivedKey }}")]}, "options": {}}, (1540, 0))
        notify = f.node("Notify", "n8n-nodes-base.httpRequest", 4.2, {
            "method": "POST", "url": f"{services_url}/notify", "sendBody": True, "specifyBody": "json",
            "jsonBody": "={{ JSON.stringify({ subscriptionId: $json.subscriptionId, email: $json.email, "
                        "amount: $json.amount, charge: $json.charge }) }}",
            "sendHeaders": True, "headerParameters": {"parameters": [
                {"name": "Idempotency-Key", "value": "={{ $json.idempotencyKey }}"}]}, "options": {},
        }, (1650, 0))
    else:
        notify = call("Notify", "notify", "={{ JSON.stringify({ subscriptionId: $json.body.subscriptionId, "
                                          "email: $json.body.email, amount: $json.body.amount, "
                                          "charge: $json.charged.id }) }}", (1540, 0))
    last_save: dict[str, Any] = {"operation": "save", "stepName": "notified"}
    if complete_on_last_save:
        last_save["options"] = {"completeInstance": True}
    save_notified = durable("Save Notified", "durableCheckpoint", last_save, (1760, 0))
    intake = hook
    if split_out:
        intake = f.node("Split Subscriptions", "n8n-nodes-base.splitOut", 1, {
            "fieldToSplitOut": "body.subscriptions", "options": {"destinationFieldName": "body"}}, (110, -100))
        f.link(hook, intake)
    for a, b in [(intake, rp), (trigger, rp), (charge, save_charged), (save_charged, claim_notify),
                 (notify, save_notified)]:
        f.link(a, b)
    if ok is not None:
        f.link(rp, ok, 0)           # Start
        f.link(ok, claim_charge)
    else:
        f.link(rp, claim_charge, 0)  # Start
    if answer_redeliveries:
        received = f.node("Already Received", "n8n-nodes-base.noOp", 1, {}, (440, 300))
        f.link(rp, received, 2)     # Finished
        f.link(rp, received, 3)     # Busy
    f.link(rp, claim_charge, 1)     # Resume: nothing saved yet
    f.link(rp, claim_notify, 4)     # charged
    if not complete_on_last_save:
        done = durable("Complete", "durableCheckpoint", {"operation": "complete"}, (1980, 0))
        f.link(save_notified, done)
        f.link(rp, done, 5)         # notified
    f.link(claim_charge, charge, 0)
    f.link(claim_charge, save_charged, 1)
    if fields is not None:
        f.link(claim_notify, fields, 0)
        f.link(fields, notify)
    else:
        f.link(claim_notify, notify, 0)
    f.link(claim_notify, save_notified, 1)
    return f.workflow()


class RetryingSender:
    """A webhook sender that delivers until n8n answers 2xx (every 1 s, up to `give_up_s`)."""

    def __init__(self, url: str, give_up_s: float = 240) -> None:
        self.url, self.give_up_s = url, give_up_s
        self.lock = threading.Lock()
        self.acknowledged: dict[str, int] = {}
        self.non_2xx = 0
        self.threads: list[threading.Thread] = []

    def deliver(self, sub: str, amount: float) -> None:
        from harness import http

        deadline = time.monotonic() + self.give_up_s
        body = {"subscriptionId": sub, "amount": amount, "email": f"{sub}@example.com"}
        while time.monotonic() < deadline:
            status, _ = http("POST", self.url, body, timeout=60)
            if 200 <= status < 300:
                with self.lock:
                    self.acknowledged[sub] = self.acknowledged.get(sub, 0) + 1
                return
            with self.lock:
                self.non_2xx += 1
            time.sleep(1)

    def send(self, subs: list[str], copies: int = 2) -> None:
        """Each subscription `copies` times at once (webhook providers deliver at least once)."""
        for sub in subs:
            for _ in range(copies):
                t = threading.Thread(target=self.deliver, args=(sub, 19.5), daemon=True)
                t.start()
                self.threads.append(t)

    def join(self) -> None:
        for t in self.threads:
            t.join()


LAST_SAVE_WF = "durableRenewalLastSave"


LAST_NODE_WF = "durableRenewalLastNode"


SPLIT_WF = "durableRenewalBatch"


def http_ok(base: str, path: str) -> bool:
    from harness import http

    return http("POST", f"{base}{path}")[0] == 200


@dataclass
class KilledRun:
    """What `orders_through_a_kill` saw: the answers to the deliveries n8n died under, how many charges were
    in flight at the kill, seconds from the kill until every order completed, and a re-delivery's answer."""

    answers: list[tuple[int, bytes]]
    in_flight_at_kill: int
    done_s: float
    again: tuple[int, bytes]


def orders_through_a_kill(stack: Stack, url: str, body: Any, quiet: list[str], keys: list[str], wf: str,
                          diagnose: Any) -> KilledRun:
    """One order without a crash first (its keys are taken when the others come), then `keys` delivered and
    n8n killed (-9) once each of their charges is in flight; restarted; every order waited for; the first
    of `keys` delivered again."""
    from harness import http

    assert http("POST", url, body(quiet[0]), timeout=60)[0] == 200
    wait_completed(stack, quiet, 60, wf)
    answers, killed = stack.kill_n8n_inside("payment", len(keys),
                                            lambda: [http("POST", url, body(k), timeout=60) for k in keys])
    in_flight_at_kill = stack.services.in_flight("payment")
    stack.restart_n8n()
    done_s = wait_for("every order to complete", lambda: all_completed(stack, keys, wf), killed, 240, diagnose)
    return KilledRun(answers, in_flight_at_kill, done_s, http("POST", url, body(keys[0]), timeout=60))


def side_effect_sub_workflow(f: DocsFlow, claim: tuple[str, dict[str, Any]], call: tuple[str, str],
                             save: tuple[str, str], provider: str = "payment") -> dict[str, Any]:
    """A side effect as a sub-workflow of its own, written from node-package/README.md with defaults: When
    Executed by Another Workflow (Input Data Mode: Accept All Data) → Claim (`claim`: its name and
    parameters) → HTTP charge (`call`: its name and JSON body; derived key) → Save (`save`: its name and
    step); Done Before → the same Save. No Resume Point: the items bring their instance (`durable`) from the
    calling workflow's Resume Point, or the calling execution took it. The call goes to the fake service
    `provider`."""
    start = f.node("When Executed by Another Workflow", "n8n-nodes-base.executeWorkflowTrigger", 1.1,
                   {"inputSource": "passthrough"}, (0, 0))
    c = f.durable(claim[0], "idempotencyGuard", {"operation": "claim", **claim[1]}, (220, 0))
    charge = f.call(call[0], provider, call[1], (440, 0))
    saved = f.durable(save[0], "durableCheckpoint", {"operation": "save", "stepName": save[1]}, (660, 0))
    f.link(start, c)
    f.link(c, charge, 0)
    f.link(c, saved, 1)
    f.link(charge, saved)
    return f.workflow()


def orders_calling_a_sub_workflow(f: DocsFlow, path: str, sub_workflow_id: str, step: str,
                                  lines: str | None = None) -> dict[str, Any]:
    """An order workflow that runs a side effect in a sub-workflow (Execute Workflow, options at defaults).

    Webhook (answer with Respond to Webhook) → Resume Point → Start → Accepted → Execute Workflow (the
    sub-workflow, by ID) → Claim Notify → HTTP notify → Save "notified" with Complete Instance. Resume
    (nothing saved yet) → the Execute Workflow; the Step Output `step` (the sub-workflow's last) → Claim
    Notify. `lines`: a Split Out of `body.lines` (each line under `line`, Include: Selected Other Fields
    `lines`) before the Execute Workflow, which Resume and the Step Output lead to instead: a resumed order
    walks its lines again, and the charged ones leave the sub-workflow's Claim by Done Before.
    """
    durable = f.durable
    hook = f.webhook(path, "responseNode")
    trigger = durable("Resume Trigger", "resumeTrigger", {}, (0, 200))
    rp = durable("Resume Point", "resumePoint", {"instanceKey": "={{ $json.body.orderId }}",
                                                 "stepOutputs": step}, (220, 100))
    ok = f.node("Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {"respondWith": "noData", "options": {}},
                (440, 0))
    run_sub = f.node("Run the Sub-workflow", "n8n-nodes-base.executeWorkflow", 1.2, {
        "workflowId": {"__rl": True, "value": sub_workflow_id, "mode": "id"},
        "workflowInputs": {"mappingMode": "defineBelow", "value": {}, "matchingColumns": [], "schema": [],
                           "attemptToConvertTypes": False, "convertFieldsToString": True},
        "options": {}}, (880, 100))
    claim_notify = durable("Claim Notify", "idempotencyGuard", {"operation": "claim", "scope": "notify"},
                           (1100, 100))
    notify = f.call("Notify", "notify", "={{ JSON.stringify({ orderId: $json.body.orderId, "
                                        "email: $json.body.email }) }}", (1320, 0))
    save_notified = durable("Save Notified", "durableCheckpoint", {
        "operation": "save", "stepName": "notified", "options": {"completeInstance": True}}, (1540, 100))
    entry = run_sub
    if lines is not None:
        entry = f.node("Split Lines", "n8n-nodes-base.splitOut", 1, {
            "fieldToSplitOut": "body.lines", "include": "selectedOtherFields", "fieldsToInclude": lines,
            "options": {"destinationFieldName": "line"}}, (660, 100))
        f.link(entry, run_sub)
    for a, b in [(hook, rp), (trigger, rp), (ok, entry), (run_sub, claim_notify), (notify, save_notified)]:
        f.link(a, b)
    f.link(rp, ok, 0)                                         # Start
    f.link(rp, entry, 1)                                      # Resume: nothing saved yet
    f.link(rp, claim_notify if lines is None else entry, 4)   # the sub-workflow's step
    f.link(claim_notify, notify, 0)
    f.link(claim_notify, save_notified, 1)
    return f.workflow()
