"""End-to-end: orders of several line items, each line charged once, in one workflow or a sub-workflow, through
an n8n kill (scenarios 17 and 26)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from conftest import REPORT, Stack
from scenarios import DocsFlow, orders, orders_calling_a_sub_workflow, orders_through_a_kill, served, side_effect_sub_workflow

LINES_WF = "durableOrderLines"


LINE_SKUS = ("sku-a", "sku-b", "sku-c")


def order_lines_from_the_docs(services_url: str, credential_id: str, *, loop: bool = False,
                              aggregate: bool = False, workflow_id: str = LINES_WF,
                              path: str = "order-lines") -> dict[str, Any]:
    """An order of several line items, each charged once, written from node-package/README.md.

    Every node option at its default, the nodes at their newest versions. Webhook (answer with Respond
    to Webhook) → Resume Point → Start → Accepted → Split Out (`body.lines`, each line under `line`, no
    other fields: n8n's default) → Claim Line (Key: the line's SKU, the README's "one per line item") →
    HTTP charge → Save "line charged"; Done Before → the same Save. Then Claim Notify (the instance key;
    one item per line arrives, the first claims, the others leave by Busy) → HTTP notify → Save
    "notified" with Complete Instance. Resume and the Step Output "line charged" lead back to the Split
    Out: a resumed order walks its lines again, and the charged ones leave by Done Before.
    `loop`: the lines go one at a time through a Loop Over Items node (batch size 1) after the Split Out:
    Claim Line, the charge and Save Line run once per line, and the loop's Done output leads to Claim
    Notify.
    `aggregate`: an Aggregate node (All Item Data, its defaults) makes the saved lines one item before
    Claim Notify, so that Claim finds its instance through an item paired to every line; the notify call
    reads the order from the Resume Point (`$('Resume Point').item`), as the editor's input panel offers.
    """
    f = DocsFlow(workflow_id, "Order with line items (from the node docs)", services_url, credential_id)
    durable, call = f.durable, f.call
    hook = f.webhook(path, "responseNode")
    trigger = durable("Resume Trigger", "resumeTrigger", {}, (0, 200))
    rp = durable("Resume Point", "resumePoint", {"instanceKey": "={{ $json.body.orderId }}",
                                                 "stepOutputs": "line charged"}, (220, 100))
    ok = f.node("Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {"respondWith": "noData", "options": {}},
                (440, 0))
    split = f.node("Split Lines", "n8n-nodes-base.splitOut", 1, {
        "fieldToSplitOut": "body.lines", "options": {"destinationFieldName": "line"}}, (660, 100))
    claim_line = durable("Claim Line", "idempotencyGuard", {"operation": "claim", "scope": "charge-line",
                                                            "key": "={{ $json.line.sku }}"}, (880, 100))
    # The fake services count effects per "orderId": here one per line of an order.
    charge = call("Charge Line", "payment",
                  "={{ JSON.stringify({ orderId: $('Resume Point').item.json.body.orderId + ':' + $json.line.sku, "
                  "amount: $json.line.price }) }}", (1100, 0))
    save_line = durable("Save Line", "durableCheckpoint", {"operation": "save", "stepName": "line charged"},
                        (1320, 100))
    claim_notify = durable("Claim Notify", "idempotencyGuard", {"operation": "claim", "scope": "notify"},
                           (1540, 100))
    order = "$('Resume Point').item.json.body" if aggregate else "$json.body"
    notify = call("Notify", "notify", f"={{{{ JSON.stringify({{ orderId: {order}.orderId, "
                                      f"email: {order}.email }}) }}}}", (1760, 0))
    save_notified = durable("Save Notified", "durableCheckpoint", {
        "operation": "save", "stepName": "notified", "options": {"completeInstance": True}}, (1980, 100))
    for a, b in [(hook, rp), (trigger, rp), (ok, split), (charge, save_line), (notify, save_notified)]:
        f.link(a, b)
    if aggregate:
        lines = f.node("All Lines", "n8n-nodes-base.aggregate", 1, {"aggregate": "aggregateAllItemData",
                                                                     "options": {}}, (1430, 200))
        f.link(split, claim_line)
        f.link(save_line, lines)
        f.link(lines, claim_notify)
    elif loop:
        each = f.node("Each Line", "n8n-nodes-base.splitInBatches", 3, {"batchSize": 1, "options": {}},
                      (770, 200))
        f.link(split, each)
        f.link(each, claim_notify, 0)  # done: every line saved
        f.link(each, claim_line, 1)    # loop: one line
        f.link(save_line, each)
    else:
        f.link(split, claim_line)
        f.link(save_line, claim_notify)
    f.link(rp, ok, 0)                # Start
    f.link(rp, split, 1)             # Resume: nothing saved yet
    f.link(rp, split, 4)             # line charged: walk the lines again, the charged ones leave by Done Before
    f.link(claim_line, charge, 0)
    f.link(claim_line, save_line, 1)
    f.link(claim_notify, notify, 0)
    f.link(claim_notify, save_notified, 1)
    return f.workflow()


@pytest.mark.parametrize("shape", ["split-out", "loop-over-items", "aggregate"])
def test_17_orders_of_line_items_each_line_charged_once_per_order_through_an_n8n_kill(stack: Stack,
                                                                                      shape: str) -> None:
    """Orders of several line items, every order with the same SKUs: a Claim keyed by the line's SKU.

    The Idempotency Guard 2.1 makes a Key you set count within its instance, so order B's line sku-a is
    not order A's (before, the second order's claim failed with a fingerprint mismatch; with Fingerprint
    From Nothing it would have answered Done Before and the line would never have been charged, and the
    shared derived key would have made the payment provider replay order A's charge). n8n is killed (-9)
    with the lines' charges in flight: every line of every order is charged once and every order
    notified once. A re-delivery of a completed order leaves by Finished and charges nothing. Run twice:
    the lines of an order all at once (Split Out), one at a time (Loop Over Items, batch size 1), and all at
    once made one item again by an Aggregate node before the order's notification.
    """
    import psycopg
    from harness import CREDENTIAL_ID, db_url

    t0 = time.monotonic()
    sidecar, services = stack.sidecar, stack.services
    loop, aggregate = shape == "loop-over-items", shape == "aggregate"
    wf, hook = {"split-out": (LINES_WF, "order-lines"), "loop-over-items": (f"{LINES_WF}Loop", "order-lines-loop"),
                "aggregate": (f"{LINES_WF}Agg", "order-lines-aggregate")}[shape]
    url = served(stack, hook, order_lines_from_the_docs(services.url, CREDENTIAL_ID, loop=loop, aggregate=aggregate,
                                                        workflow_id=wf, path=hook))
    quiet, keys = orders(f"{hook}-quiet", 1), orders(hook, 3)

    def body(k: str) -> dict[str, Any]:
        return {"orderId": k, "email": f"{k}@example.com",
                "lines": [{"sku": s, "price": 10 + n} for n, s in enumerate(LINE_SKUS)]}

    def diagnose() -> str:
        return stack.diagnose(quiet + keys, wf)

    run = orders_through_a_kill(stack, url, body, quiet, keys, wf, diagnose)
    answers, in_flight_at_kill, done_s, again = run.answers, run.in_flight_at_kill, run.done_s, run.again
    everyone = quiet + keys
    lines = [f"{k}:{s}" for k in everyone for s in LINE_SKUS]
    dups = services.duplicate_effects(lines, ("payment",)) + services.duplicate_effects(everyone, ("notify",))
    assert [a[0] for a in answers] == [200] * len(keys) and again[0] == 200, (answers, again)
    assert dups == [], f"duplicate or missing side effects: {dups}\n{diagnose()}"
    not_resumed = [k for k in keys if (i := sidecar.instance(wf, k)) is None or i.resume_count < 1]
    assert not_resumed == [], f"not resumed by the Resume Trigger: {not_resumed}\n{diagnose()}"
    for k in everyone:
        trail = sidecar.trail(wf, k)
        assert trail[-1] == "notified" and trail.count("line charged") >= len(LINE_SKUS), (k, trail)
    # Each line's key is the JSON array [order, SKU] the Claim 2.1 stores; no other key of these orders.
    line_keys = [json.dumps([k, s], separators=(",", ":")) for k in everyone for s in LINE_SKUS]
    with psycopg.connect(db_url(sidecar.database)) as conn:
        stored = conn.execute("SELECT key, status FROM durable_idempotency_keys WHERE scope = 'charge-line' "
                              "AND (key = ANY(%s) OR key = ANY(%s))", (line_keys, list(LINE_SKUS))).fetchall()
    assert sorted(stored) == sorted((k, "completed") for k in line_keys), stored
    how = {"split-out": "Split Out", "loop-over-items": "Loop Over Items", "aggregate": "Split Out, Aggregate"}[shape]
    REPORT.add(f"17. orders of line items ({how}, a Claim keyed per line), "
               "kill -9 n8n", len(everyone), len(everyone),
               len(dups), time.monotonic() - t0,
               note=f"{len(everyone)} orders × {len(LINE_SKUS)} lines, the same SKUs in every order; kill -9 with "
                    f"{in_flight_at_kill} charges in flight → all completed {done_s:.1f} s; every line charged once "
                    "per order; a re-delivery charges nothing",
               kill_to_completed_s=done_s)


LINES_SUB_WF = "durableLineChargeSub"


LINES_CALLER_WF = "durableOrderLinesSub"


def line_charge_sub_workflow(services_url: str, credential_id: str) -> dict[str, Any]:
    """A line's charge as a sub-workflow: Claim Line (Key: the line's SKU) → charge → Save "line charged"."""
    f = DocsFlow(LINES_SUB_WF, "Charge order lines (sub-workflow, from the node docs)", services_url, credential_id)
    # The fake services count effects per "orderId": here one per line of an order.
    return side_effect_sub_workflow(f, ("Claim Line", {"scope": "charge-line", "key": "={{ $json.line.sku }}"}), (
        "Charge Line", "={{ JSON.stringify({ orderId: $json.body.orderId + ':' + $json.line.sku, "
                       "amount: $json.line.price }) }}"), ("Save Line", "line charged"))


def orders_charging_lines_in_a_sub_workflow(services_url: str, credential_id: str) -> dict[str, Any]:
    """The lines split out with the order's `body` (Include: Selected Other Fields, so the sub-workflow knows
    the order): the items lose the `durable` field, as with the default No Other Fields."""
    f = DocsFlow(LINES_CALLER_WF, "Order lines charged in a sub-workflow (from the node docs)", services_url,
                 credential_id)
    return orders_calling_a_sub_workflow(f, "order-lines-sub", LINES_SUB_WF, "line charged", lines="body")


def test_26_line_items_charged_in_a_sub_workflow_without_the_durable_field_through_an_n8n_kill(
        stack: Stack) -> None:
    """Order lines split out in the caller and charged in a sub-workflow. The Split Out makes new items, so the
    lines reach the sub-workflow without the `durable` field (its default, No Other Fields, drops it too):
    the sub-workflow's Claim and Save act on the one instance the calling execution's Resume Point took,
    as that execution. Before, every order failed in the sub-workflow (*No Resume Point before this node*)
    and never completed. n8n is killed (-9) with the lines' charges in flight: every line of every order
    is charged once, every order notified once and completed; each line key is stored as
    `["<order>","<sku>"]`, completed and held by the order's calling execution; no instance of the
    sub-workflow's ID exists; a re-delivery charges nothing.
    """
    import psycopg
    from harness import CREDENTIAL_ID, db_url

    t0 = time.monotonic()
    sidecar, services = stack.sidecar, stack.services
    url = served(stack, "order-lines-sub", line_charge_sub_workflow(services.url, CREDENTIAL_ID),
                 orders_charging_lines_in_a_sub_workflow(services.url, CREDENTIAL_ID))
    quiet, keys = orders("lines-sub-quiet", 1), orders("lines-sub", 3)
    everyone = quiet + keys

    def body(k: str) -> dict[str, Any]:
        return {"orderId": k, "email": f"{k}@example.com",
                "lines": [{"sku": s, "price": 10 + n} for n, s in enumerate(LINE_SKUS)]}

    def diagnose() -> str:
        return stack.diagnose(everyone, LINES_CALLER_WF)

    run = orders_through_a_kill(stack, url, body, quiet, keys, LINES_CALLER_WF, diagnose)
    lines = [f"{k}:{s}" for k in everyone for s in LINE_SKUS]
    dups = services.duplicate_effects(lines, ("payment",)) + services.duplicate_effects(everyone, ("notify",))
    assert [a[0] for a in run.answers] == [200] * len(keys) and run.again[0] == 200, (run.answers, run.again)
    assert dups == [], f"duplicate or missing side effects: {dups}\n{diagnose()}"
    for k in everyone:
        trail = sidecar.trail(LINES_CALLER_WF, k)
        assert trail[-1] == "notified" and trail.count("line charged") >= len(LINE_SKUS), (k, trail)
    line_keys = {json.dumps([k, s], separators=(",", ":")): k for k in everyone for s in LINE_SKUS}
    with psycopg.connect(db_url(sidecar.database)) as conn:
        stored = conn.execute("SELECT key, status, holder FROM durable_idempotency_keys WHERE scope = 'charge-line' "
                              "AND key = ANY(%s)", (list(line_keys),)).fetchall()
        savers = dict(conn.execute(
            "SELECT instance_key, array_agg(DISTINCT execution_id) FROM durable_checkpoints "
            "WHERE workflow_id = %s AND instance_key = ANY(%s) GROUP BY instance_key", (LINES_CALLER_WF, everyone)))
        sub_instances = conn.execute("SELECT count(*) FROM durable_instances WHERE workflow_id = %s",
                                     (LINES_SUB_WF,)).fetchone()
    assert sorted((key, status) for key, status, _ in stored) == sorted((key, "completed") for key in line_keys), stored
    # The sub-workflow acted as the calling execution: the one execution that saved the order holds its lines.
    assert all(len(savers[k]) == 1 for k in everyone), savers
    assert all(holder == savers[line_keys[key]][0] for key, _, holder in stored), (stored, savers)
    assert sub_instances == (0,), sub_instances
    REPORT.add("26. order lines charged in a sub-workflow, the lines without the durable field, kill -9 n8n",
               len(everyone), len(everyone), len(dups), time.monotonic() - t0,
               note=f"{len(everyone)} orders × {len(LINE_SKUS)} lines; kill -9 with {run.in_flight_at_kill} charges in "
                    f"flight inside the sub-workflow → all completed {run.done_s:.1f} s; every line charged once per "
                    "order; a re-delivery charges nothing",
               kill_to_completed_s=run.done_s)
