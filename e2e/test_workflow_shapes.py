"""End-to-end: the shapes users build around the durable nodes (a sub-workflow, an If and a Merge, a webhook
that answers at once, n8n's Wait node), through an n8n kill (scenarios 18, 25, 27, 19)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import REPORT, Stack
from harness import wait_until
from scenarios import (
    DocsFlow,
    all_completed,
    orders,
    orders_calling_a_sub_workflow,
    orders_through_a_kill,
    served,
    side_effect_sub_workflow,
    wait_for,
)

SUB_ORDERS_WF = "durableSubOrders"


CHARGE_SUB_WF = "durableChargeSub"


def charge_sub_workflow(services_url: str, credential_id: str) -> dict[str, Any]:
    """The order's charge as a sub-workflow: Claim Charge → charge → Save "charged"."""
    f = DocsFlow(CHARGE_SUB_WF, "Charge the order (sub-workflow, from the node docs)", services_url, credential_id)
    return side_effect_sub_workflow(f, ("Claim Charge", {"scope": "charge"}), (
        "Charge", "={{ JSON.stringify({ orderId: $json.body.orderId, amount: $json.body.amount }) }}"),
        ("Save Charged", "charged"))


def orders_calling_the_charge_sub_workflow(services_url: str, credential_id: str) -> dict[str, Any]:
    f = DocsFlow(SUB_ORDERS_WF, "Orders with a charge sub-workflow (from the node docs)", services_url,
                 credential_id)
    return orders_calling_a_sub_workflow(f, "sub-orders", CHARGE_SUB_WF, "charged")


def test_18_a_charge_in_a_sub_workflow_acts_for_the_callers_instance_through_an_n8n_kill(stack: Stack) -> None:
    """The side effect moved into a sub-workflow (Execute Workflow), as users factor out a charge.

    The sub-workflow's Claim and Save find their instance on the items the caller hands on, and act as
    the calling execution, which holds the instance's lease: before, they acted on an instance of the
    sub-workflow's own ID, so the charge ran and its Save failed with NOT_FOUND on every resume. n8n is
    killed (-9) with charges in flight inside the sub-workflow: every order is charged once and notified
    once, the resumed caller's sub-workflow takes the dead claim over, and each order's "charged" step is
    saved by the same execution as its "notified" step (the caller's). No instance of the sub-workflow's ID
    exists. A re-delivery of a completed order charges nothing.
    """
    import psycopg
    from harness import CREDENTIAL_ID, db_url

    t0 = time.monotonic()
    sidecar, services = stack.sidecar, stack.services
    url = served(stack, "sub-orders", charge_sub_workflow(services.url, CREDENTIAL_ID),
                 orders_calling_the_charge_sub_workflow(services.url, CREDENTIAL_ID))
    quiet, keys = orders("sub-quiet", 1), orders("sub", 3)
    everyone = quiet + keys

    def body(k: str) -> dict[str, Any]:
        return {"orderId": k, "amount": 42, "email": f"{k}@example.com"}

    def diagnose() -> str:
        return stack.diagnose(everyone, SUB_ORDERS_WF)

    run = orders_through_a_kill(stack, url, body, quiet, keys, SUB_ORDERS_WF, diagnose)
    answers, in_flight_at_kill, done_s, again = run.answers, run.in_flight_at_kill, run.done_s, run.again
    dups = services.duplicate_effects(everyone, ("payment", "notify"))
    assert [a[0] for a in answers] == [200] * len(keys) and again[0] == 200, (answers, again)
    assert dups == [], f"duplicate or missing side effects: {dups}\n{diagnose()}"
    for k in everyone:
        assert sidecar.trail(SUB_ORDERS_WF, k)[-2:] == ["charged", "notified"], (k, sidecar.trail(SUB_ORDERS_WF, k))
    with psycopg.connect(db_url(sidecar.database)) as conn:
        savers = dict(conn.execute(
            "SELECT instance_key, array_agg(DISTINCT execution_id) FROM durable_checkpoints "
            "WHERE workflow_id = %s AND instance_key = ANY(%s) GROUP BY instance_key", (SUB_ORDERS_WF, everyone)))
        charges = conn.execute("SELECT key, status, attempt, holder FROM durable_idempotency_keys "
                               "WHERE scope = 'charge' AND key = ANY(%s)", (everyone,)).fetchall()
        sub_instances = conn.execute("SELECT count(*) FROM durable_instances WHERE workflow_id = %s",
                                     (CHARGE_SUB_WF,)).fetchone()
    # The order's instance is saved by the caller's execution only: the sub-workflow acted as it.
    assert all(len(savers[k]) == 1 for k in everyone), savers
    assert sorted(k for k, status, _, _ in charges if status == "completed") == sorted(everyone), charges
    assert all(holder == savers[k][0] for k, _, _, holder in charges), (charges, savers)
    # The killed orders' charge ran once more as attempt 2, with the same derived key (the service replayed it).
    assert all(attempt == 2 for k, _, attempt, _ in charges if k in keys), charges
    assert sub_instances == (0,), sub_instances
    REPORT.add("18. the charge in a sub-workflow (Execute Workflow), kill -9 n8n", len(everyone), len(everyone),
               len(dups), time.monotonic() - t0,
               note=f"kill -9 with {in_flight_at_kill} charges in flight inside the sub-workflow → all completed "
                    f"{done_s:.1f} s; each charged once (the killed ones' key at attempt 2); "
                    "a re-delivery charges nothing",
               kill_to_completed_s=done_s)


BRANCH_WF = "durableBranchOrders"


def orders_by_payment_method(services_url: str, credential_id: str, *, one_claim: bool = False) -> dict[str, Any]:
    """An order paid by card or on account: an IF node sends it down one of two branches, each with its own
    Claim and charge, and a Merge node joins them before the Save. Written from node-package/README.md,
    every option at its default (the IF node's String "is equal to"; the Merge node's Append).

    Webhook (answer with Respond to Webhook) → Resume Point → Start → Accepted → IF "Pays by Card?" →
    true: Claim Card → HTTP charge the card → Merge input 1; false: Claim Account → HTTP charge the
    account → Merge input 2; each Claim's Done Before → its own Merge input. Merge → Save "charged" →
    Claim Notify → HTTP notify → Save "notified" with Complete Instance. Resume (nothing saved yet) → the
    IF; the Step Output "charged" → Claim Notify. Both charges go to the payment service, which records
    the branch in the body's `logic`.
    `one_claim`: one Claim Charge before the IF instead (scope `charge`, so an order is charged once whatever
    branch a re-delivery would take); its Done Before goes straight to the Save, which then has two inputs.
    """
    wf = BRANCH_WF + ("One" if one_claim else "")
    f = DocsFlow(wf, "Order paid by card or on account (from the node docs)", services_url, credential_id)
    durable, call = f.durable, f.call
    hook = f.webhook("branch-orders-one" if one_claim else "branch-orders", "responseNode")
    trigger = durable("Resume Trigger", "resumeTrigger", {}, (0, 200))
    rp = durable("Resume Point", "resumePoint", {"instanceKey": "={{ $json.body.orderId }}",
                                                 "stepOutputs": "charged"}, (220, 100))
    ok = f.node("Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {"respondWith": "noData", "options": {}},
                (440, 0))
    by_card = f.node("Pays by Card?", "n8n-nodes-base.if", 2.3, {"conditions": {
        "options": {"caseSensitive": True, "leftValue": "", "typeValidation": "strict", "version": 3},
        "conditions": [{"id": f"{wf}-method", "leftValue": "={{ $json.body.method }}", "rightValue": "card",
                        "operator": {"type": "string", "operation": "equals"}}],
        "combinator": "and"}, "options": {}}, (660, 100))
    card = call("Charge Card", "payment", "={{ JSON.stringify({ orderId: $json.body.orderId, "
                                          "amount: $json.body.amount, logic: 'card' }) }}", (1100, 0))
    account = call("Charge Account", "payment", "={{ JSON.stringify({ orderId: $json.body.orderId, "
                                                "amount: $json.body.amount, logic: 'account' }) }}", (1100, 200))
    merge = f.node("Merge", "n8n-nodes-base.merge", 3.2, {}, (1320, 100))
    save_charged = durable("Save Charged", "durableCheckpoint", {"operation": "save", "stepName": "charged"},
                           (1540, 100))
    claim_notify = durable("Claim Notify", "idempotencyGuard", {"operation": "claim", "scope": "notify"},
                           (1760, 100))
    notify = call("Notify", "notify", "={{ JSON.stringify({ orderId: $json.body.orderId, "
                                      "email: $json.body.email }) }}", (1980, 0))
    save_notified = durable("Save Notified", "durableCheckpoint", {
        "operation": "save", "stepName": "notified", "options": {"completeInstance": True}}, (2200, 100))
    for a, b in [(hook, rp), (trigger, rp), (merge, save_charged), (save_charged, claim_notify),
                 (notify, save_notified)]:
        f.link(a, b)
    f.link(rp, ok, 0)                        # Start
    f.link(rp, claim_notify, 4)              # charged
    f.link(card, merge, 0, input=0)
    f.link(account, merge, 0, input=1)
    f.link(claim_notify, notify, 0)
    f.link(claim_notify, save_notified, 1)
    if one_claim:
        claim = durable("Claim Charge", "idempotencyGuard", {"operation": "claim", "scope": "charge"}, (550, 100))
        f.link(ok, claim)
        f.link(rp, claim, 1)                 # Resume: nothing saved yet
        f.link(claim, by_card, 0)            # First Run
        f.link(claim, save_charged, 1)       # Done Before
        f.link(by_card, card, 0)             # true
        f.link(by_card, account, 1)          # false
        return f.workflow()
    claim_card = durable("Claim Card", "idempotencyGuard", {"operation": "claim", "scope": "card"}, (880, 0))
    claim_account = durable("Claim Account", "idempotencyGuard", {"operation": "claim", "scope": "account"},
                            (880, 200))
    f.link(ok, by_card)
    f.link(rp, by_card, 1)                   # Resume: nothing saved yet
    f.link(by_card, claim_card, 0)           # true
    f.link(by_card, claim_account, 1)        # false
    f.link(claim_card, card, 0)
    f.link(claim_card, merge, 1, input=0)    # Done Before
    f.link(claim_account, account, 0)
    f.link(claim_account, merge, 1, input=1)
    return f.workflow()


@pytest.mark.parametrize("shape", ["claim-per-branch", "claim-before-the-if"])
def test_25_an_if_node_and_a_merge_before_the_save_through_an_n8n_kill(stack: Stack, shape: str) -> None:
    """Orders paid by card or on account: an IF node picks the branch, each branch charges, and a Merge node
    joins them before the Save (the Save finds its instance and the claim through the Merge's paired items).
    Run twice: a Claim in each branch (scopes `card` and `account`), and one Claim before the IF (scope
    `charge`, its Done Before straight into the Save). n8n is killed (-9) with charges of both branches in
    flight: every order is charged once, on its own branch only, and notified once; the killed orders'
    claims are taken over (attempt 2) and completed by the Save after the Merge; a re-delivery of a
    completed order charges nothing.
    """
    import psycopg
    from harness import CREDENTIAL_ID, db_url

    t0 = time.monotonic()
    sidecar, services = stack.sidecar, stack.services
    one_claim = shape == "claim-before-the-if"
    workflow = orders_by_payment_method(services.url, CREDENTIAL_ID, one_claim=one_claim)
    wf, hook = workflow["id"], next(n["parameters"]["path"] for n in workflow["nodes"] if n["name"] == "Webhook")
    url = served(stack, hook, workflow)
    quiet, keys = orders(f"{hook}-quiet", 1), orders(hook, 4)
    everyone = quiet + keys
    method = {k: ("card", "account")[n % 2] for n, k in enumerate(everyone)}

    def body(k: str) -> dict[str, Any]:
        return {"orderId": k, "amount": 42, "email": f"{k}@example.com", "method": method[k]}

    def diagnose() -> str:
        return stack.diagnose(everyone, wf)

    run = orders_through_a_kill(stack, url, body, quiet, keys, wf, diagnose)
    dups = services.duplicate_effects(everyone, ("payment", "notify"))
    assert [a[0] for a in run.answers] == [200] * len(keys) and run.again[0] == 200, (run.answers, run.again)
    assert dups == [], f"duplicate or missing side effects: {dups}\n{diagnose()}"
    branches = {k: services.logic("payment", k) for k in everyone}
    assert branches == {k: [method[k]] for k in everyone}, branches
    for k in everyone:
        assert sidecar.trail(wf, k)[-2:] == ["charged", "notified"], (k, sidecar.trail(wf, k))
    with psycopg.connect(db_url(sidecar.database)) as conn:
        claims = conn.execute("SELECT scope, key, status, attempt FROM durable_idempotency_keys "
                              "WHERE scope IN ('card', 'account', 'charge') AND key = ANY(%s)", (everyone,)).fetchall()
    # One claim per order (of its branch's scope, or the one Claim's), completed by the Save after the
    # Merge; the killed orders' claims were taken over by the resumed execution.
    scope = {k: "charge" if one_claim else method[k] for k in everyone}
    assert sorted((s, k, st) for s, k, st, _ in claims) == sorted((scope[k], k, "completed") for k in everyone), claims
    assert all(attempt == 2 for _, k, _, attempt in claims if k in keys), claims
    how = "one Claim before the IF" if one_claim else "a Claim per branch"
    REPORT.add(f"25. an IF node, {how}, a Merge before the Save, kill -9 n8n", len(everyone),
               len(everyone), len(dups), time.monotonic() - t0,
               note=f"card and account orders; kill -9 with {run.in_flight_at_kill} charges of both branches in "
                    f"flight → all completed {run.done_s:.1f} s; each charged once on its own branch; a "
                    "re-delivery charges nothing",
               kill_to_completed_s=run.done_s)


EARLY_ANSWER_WF = "durableEarlyAnswer"


def test_27_a_webhook_left_at_respond_immediately_gets_a_warning_on_the_resume_point(stack: Stack) -> None:
    """A Webhook left at its default Respond (Immediately) before the Resume Point: the sender is told 200 before
    the delivery is stored, so a delivery meeting a sidecar outage would be lost. The run goes on (the order is
    started), and the Resume Point's output carries n8n's warning hint naming the Webhook and the fix, as the
    editor shows it after a run and the stored execution keeps it.
    """
    from harness import CREDENTIAL_ID, http

    f = DocsFlow(EARLY_ANSWER_WF, "Webhook left at Respond: Immediately", stack.services.url, CREDENTIAL_ID)
    hook = f.node("Webhook", "n8n-nodes-base.webhook", 2.1, {"httpMethod": "POST", "path": "early-answer",
                                                             "options": {}}, (0, 0),
                  webhookId=EARLY_ANSWER_WF + "-hook")
    rp = f.durable("Resume Point", "resumePoint", {"instanceKey": "={{ $json.body.orderId }}"}, (220, 0))
    done = f.node("Started", "n8n-nodes-base.noOp", 1, {}, (440, 0))
    f.link(hook, rp)
    f.link(rp, done, 0)
    url = served(stack, "early-answer", f.workflow())
    assert http("POST", url, {"orderId": "early-1"}, timeout=60)[0] == 200
    wait_until("the instance to exist", lambda: stack.sidecar.instance(EARLY_ANSWER_WF, "early-1") is not None,
               timeout=60)
    inst = stack.sidecar.instance(EARLY_ANSWER_WF, "early-1")
    assert inst is not None
    api_key = stack.n8n.create_api_key("e2e early answer")
    wait_until("the execution to finish",
               lambda: stack.n8n.execution(api_key, inst.created_by_execution_id).get("finished") is True, timeout=30)
    run = stack.n8n.execution(api_key, inst.created_by_execution_id)["data"]["resultData"]["runData"]
    hints = run["Resume Point"][0].get("hints") or []
    assert len(hints) == 1 and hints[0]["type"] == "warning", hints
    assert "The Webhook 'Webhook' answers Immediately" in hints[0]["message"], hints
    assert run["Started"][0]["data"]["main"][0], run["Started"]


WAIT_NODE_WF = "durableWaitNode"


WAIT_NODE_S = 30


def orders_with_a_wait_node(services_url: str, credential_id: str) -> dict[str, Any]:
    """An order that waits with n8n's own Wait node between two side effects, options at their defaults.

    Webhook (answer with Respond to Webhook) → Resume Point → Start → Accepted → Claim Charge → charge →
    Save "charged" → Wait (After Time Interval, 30 s) → Claim Notify → notify → Save "notified" with
    Complete Instance. Resume → Claim Charge; the Step Output "charged" → the Wait.
    """
    f = DocsFlow(WAIT_NODE_WF, "Order with a Wait node (from the node docs)", services_url, credential_id)
    durable, call = f.durable, f.call
    hook = f.webhook("wait-orders", "responseNode")
    trigger = durable("Resume Trigger", "resumeTrigger", {}, (0, 200))
    rp = durable("Resume Point", "resumePoint", {"instanceKey": "={{ $json.body.orderId }}",
                                                 "stepOutputs": "charged"}, (220, 100))
    ok = f.node("Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {"respondWith": "noData", "options": {}},
                (440, 0))
    claim_charge = durable("Claim Charge", "idempotencyGuard", {"operation": "claim", "scope": "charge"}, (660, 0))
    charge = call("Charge", "payment", "={{ JSON.stringify({ orderId: $json.body.orderId, "
                                       "amount: $json.body.amount }) }}", (880, 0))
    save_charged = durable("Save Charged", "durableCheckpoint", {"operation": "save", "stepName": "charged"},
                           (1100, 0))
    wait = f.node("Wait", "n8n-nodes-base.wait", 1.1, {"amount": WAIT_NODE_S, "unit": "seconds"}, (1320, 100),
                  webhookId=WAIT_NODE_WF + "-wait")
    claim_notify = durable("Claim Notify", "idempotencyGuard", {"operation": "claim", "scope": "notify"},
                           (1540, 100))
    notify = call("Notify", "notify", "={{ JSON.stringify({ orderId: $json.body.orderId, "
                                      "email: $json.body.email }) }}", (1760, 0))
    save_notified = durable("Save Notified", "durableCheckpoint", {
        "operation": "save", "stepName": "notified", "options": {"completeInstance": True}}, (1980, 100))
    for a, b in [(hook, rp), (trigger, rp), (ok, claim_charge), (charge, save_charged), (save_charged, wait),
                 (wait, claim_notify), (notify, save_notified)]:
        f.link(a, b)
    f.link(rp, ok, 0)                  # Start
    f.link(rp, claim_charge, 1)        # Resume: nothing saved yet
    f.link(rp, wait, 4)                # charged: the wait again, then the notification
    f.link(claim_charge, charge, 0)
    f.link(claim_charge, save_charged, 1)
    f.link(claim_notify, notify, 0)
    f.link(claim_notify, save_notified, 1)
    return f.workflow()


def test_19_a_wait_node_longer_than_the_lease_is_waited_out_not_taken_for_a_crash(stack: Stack) -> None:
    """n8n's own Wait node (30 s) after a Save, every option at its default.

    While n8n waits, no durable node calls the sidecar. With a 12 s lease (before sessions), the instance looked crashed 12 s after
    its Save: the Resume Trigger resumed it in a second execution while the first still waited, and two
    executions ran the rest of the order. The Save before a Wait now takes the lease for the wait as
    well: no order is resumed, each is notified at least 30 s after its charge, each side effect once.
    Then n8n is killed (-9) while two more orders wait: each is resumed once, after the lease the Save
    took, and the Resume Point sends it into the Wait again with a lease that covers it (before, the
    resumed execution was itself taken for crashed during its wait and resumed again).
    """
    from harness import CREDENTIAL_ID, http

    t0 = time.monotonic()
    sidecar, services = stack.sidecar, stack.services
    url = served(stack, "wait-orders", orders_with_a_wait_node(services.url, CREDENTIAL_ID))
    calm, killed = orders("wait", 2), orders("wait-kill", 2)
    everyone = calm + killed

    def deliver(keys: list[str]) -> None:
        answers = [http("POST", url, {"orderId": k, "amount": 42, "email": f"{k}@example.com"}, timeout=60)
                   for k in keys]
        assert [a[0] for a in answers] == [200] * len(keys), answers

    def diagnose() -> str:
        return stack.diagnose(everyone, WAIT_NODE_WF)

    def resumes(keys: list[str]) -> dict[str, int]:
        return {k: (i.resume_count if (i := sidecar.instance(WAIT_NODE_WF, k)) else -1) for k in keys}

    deliver(calm)
    calm_s = wait_for("the calm orders to complete", lambda: all_completed(stack, calm, WAIT_NODE_WF), t0,
                      WAIT_NODE_S + 90, diagnose)
    assert resumes(calm) == {k: 0 for k in calm}, f"taken for crashed during the Wait: {resumes(calm)}"

    deliver(killed)
    wait_until("the orders to wait in the Wait node",
               lambda: all(sidecar.trail(WAIT_NODE_WF, k) == ["charged"] for k in killed), timeout=60)
    stack.main.kill9()
    kill_at = time.monotonic()
    stack.restart_n8n()
    done_s = wait_for("the killed orders to complete", lambda: all_completed(stack, killed, WAIT_NODE_WF), kill_at,
                      3 * WAIT_NODE_S + 150, diagnose)
    assert resumes(killed) == {k: 1 for k in killed}, f"resumed more than once: {resumes(killed)}\n{diagnose()}"
    dups = services.duplicate_effects(everyone, ("payment", "notify"))
    assert dups == [], f"duplicate or missing side effects: {dups}\n{diagnose()}"
    waited = {k: services.call_times("notify", k)[0] - services.call_times("payment", k)[0] for k in everyone}
    assert all(s >= WAIT_NODE_S for s in waited.values()), waited
    REPORT.add(f"19. n8n's Wait node ({WAIT_NODE_S} s) after a Save, every option at its default, kill -9 n8n during the "
               "wait", len(everyone), len(everyone), len(dups), time.monotonic() - t0,
               note=f"calm orders: none resumed, completed {calm_s:.1f} s; killed during the wait: each resumed "
                    f"once and waited again, completed {done_s:.1f} s after the kill; notified "
                    f"{min(waited.values()):.1f}–{max(waited.values()):.1f} s after the charge",
               kill_to_completed_s=done_s)
