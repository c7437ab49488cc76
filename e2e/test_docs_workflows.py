"""End-to-end: workflows built from the node docs with every option at its default, through kills and outages of
n8n and the sidecar (scenarios 10, 11, 14, 15, 16)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from conftest import ORDER_WF, REPORT, Stack
from harness import publish_workflow, wait_until
from scenarios import (
    COMPLETED,
    FULL_TRAIL,
    LAST_NODE_WF,
    LAST_SAVE_WF,
    RENEWAL_DOCS_WF,
    SHORT_DEADLINE_S,
    SPLIT_WF,
    RetryingSender,
    all_completed,
    check_exactly_once,
    orders,
    post_all,
    renewal_from_the_docs,
    served,
    wait_completed,
    wait_for,
)


def test_10_docs_default_workflow_loses_nothing_when_the_sidecar_is_killed_or_stays_down(stack: Stack) -> None:
    """Issue 13's acceptance: a workflow from the node docs with default options, a sender that retries.

    Phase A: a burst while the sidecar is killed (-9) and back within a second (the nodes wait).
    Phase B: a burst while it stays down 3x longer than the credential's deadline (5 s): calls in
    flight fail, new deliveries get 500 and are sent again; after the restart the Resume Trigger
    resumes what died. Every delivery n8n acknowledged must complete, each side effect once.
    """
    import psycopg
    from harness import db_url, import_credential

    t0 = time.monotonic()
    n8n, sidecar, services = stack.n8n, stack.sidecar, stack.services
    cred = "durableShortDeadline"
    import_credential(n8n, sidecar, deadline_seconds=SHORT_DEADLINE_S, credential_id=cred)
    publish_workflow(n8n, renewal_from_the_docs(services.url, cred))
    n8n.wait_webhook("renewals", timeout=120)
    sender = RetryingSender(f"{n8n.url}/webhook/renewals")
    phase_a, phase_b1, phase_b2 = orders("subA", 8), orders("subB", 6), orders("subC", 6)
    everyone = phase_a + phase_b1 + phase_b2

    def diagnose() -> str:
        return stack.diagnose(everyone, RENEWAL_DOCS_WF)

    # Phase A: killed with charges in flight and deliveries arriving; back at once.
    services.stall("payment")
    try:
        sender.send(phase_a)
        wait_until("phase A charges in flight", lambda: services.in_flight("payment") >= len(phase_a), 90)
        sidecar.process.kill9()
    finally:
        services.unstall()
    time.sleep(1)
    sidecar.start()
    # Phase B: killed with charges in flight, then down for 3x the deadline while more deliveries arrive.
    services.stall("payment")
    try:
        sender.send(phase_b1)
        wait_until("phase B charges in flight", lambda: services.in_flight("payment") >= len(phase_b1), 90)
        sidecar.process.kill9()
        down_at = time.monotonic()
    finally:
        services.unstall()
    sender.send(phase_b2)
    time.sleep(3 * SHORT_DEADLINE_S)
    sidecar.start()
    down_s = time.monotonic() - down_at
    sender.join()
    acknowledged = sorted(sender.acknowledged)
    completed_s = wait_for("every acknowledged subscription to complete",
                           lambda: all_completed(stack, acknowledged, RENEWAL_DOCS_WF), down_at, 300, diagnose)

    lost = [k for k in acknowledged
            if (i := sidecar.instance(RENEWAL_DOCS_WF, k)) is None or i.status != COMPLETED]
    dups = services.duplicate_effects(acknowledged, ("payment", "notify"))
    resumed = [k for k in acknowledged if (i := sidecar.instance(RENEWAL_DOCS_WF, k)) and i.resume_count > 0]
    # The start body reaches every call, also in resumed executions: the notify call's email and amount
    # come from the delivery, its charge id from the saved charge step.
    wrong_body = [k for k in acknowledged for b in services.bodies("notify", k)
                  if b.get("email") != f"{k}@example.com" or b.get("amount") != 19.5 or not b.get("charge")]
    # A resumed claim of the same step is accepted: a key claimed again (attempt > 1) completed.
    with psycopg.connect(db_url(sidecar.database)) as conn:
        reclaimed = conn.execute(
            "SELECT count(*) FROM durable_idempotency_keys WHERE key = ANY(%s) AND attempt > 1 "
            "AND status = 'completed'", (acknowledged,)).fetchone()
        refused = conn.execute(
            "SELECT count(*) FROM durable_idempotency_keys WHERE key = ANY(%s) AND status <> 'completed'",
            (acknowledged,)).fetchone()
    states = [sidecar.latest_state(RENEWAL_DOCS_WF, k) for k in acknowledged]
    missing_start = [k for k, st in zip(acknowledged, states, strict=True)
                     if st.get("body", {}).get("email") != f"{k}@example.com"]
    assert acknowledged == sorted(everyone), f"sender gave up on {sorted(set(everyone) - set(acknowledged))}"
    assert lost == [], f"acknowledged but not completed: {lost}\n{diagnose()}"
    assert dups == [], f"duplicate side effects: {dups}\n{diagnose()}"
    assert wrong_body == [], f"calls without the start body: {wrong_body}\n{diagnose()}"
    assert missing_start == [], f"final state without the start body: {missing_start}"
    assert refused is not None and refused[0] == 0, f"{refused[0] if refused else '?'} keys not completed"
    # The outage must have killed executions for the checks above to cover resumed ones.
    assert resumed, f"no instance was resumed: the outage ({down_s:.0f} s) did not kill any execution"
    REPORT.add("10. docs-default workflow, sidecar kill -9 + down 15 s", len(everyone), len(acknowledged) - len(lost),
               len(dups), time.monotonic() - t0,
               note=f"deliveries {2 * len(everyone)}, acknowledged {sum(sender.acknowledged.values())}, "
                    f"non-2xx answers retried {sender.non_2xx}, lost {len(lost)}, resumed {len(resumed)}, "
                    f"resumed claims accepted {reclaimed[0] if reclaimed else 0}, wrong bodies {len(wrong_body)}; "
                    f"sidecar down {down_s:.0f} s (deadline {SHORT_DEADLINE_S} s) → all completed {completed_s:.0f} s",
               deliveries=2 * len(everyone), acknowledged=sum(sender.acknowledged.values()),
               non_2xx_retried=sender.non_2xx, lost=len(lost), resumed=len(resumed),
               resumed_claims_accepted=int(reclaimed[0]) if reclaimed else 0, sidecar_down_s=down_s,
               down_to_completed_s=completed_s)


def test_11_examples_complete_against_services_answering_in_another_shape(stack: Stack) -> None:
    """The rebuilt order example against services that answer only { id, status } (no order echoed)."""
    t0 = time.monotonic()
    keys = orders("bare", 6)
    stack.services.set_shape("bare")
    try:
        post_all(stack, keys)
        wait_completed(stack, keys, timeout=180)
    finally:
        stack.services.set_shape("echo")
    incomplete = []
    for k in keys:
        assert stack.sidecar.trail(ORDER_WF, k) == FULL_TRAIL, f"{k}: {stack.sidecar.trail(ORDER_WF, k)}"
        state = stack.sidecar.latest_state(ORDER_WF, k)
        body = state.get("body", {})
        if body.get("amount") != 42.0 or body.get("email") != f"{k}@example.com" or \
                not all(state.get(step, {}).get("id") for step in FULL_TRAIL):
            incomplete.append((k, state))
    assert incomplete == [], f"final state lost something: {incomplete}"
    dups = check_exactly_once(stack, keys)
    REPORT.add("11. order example, services answer { id, status } only", len(keys), len(keys), dups,
               time.monotonic() - t0, note="final state keeps amount, email and every step's response")


@pytest.mark.parametrize("fields_before_notify", [False, True], ids=["guard-call-save", "guard-set-call-save"])
def test_14_last_save_completes_the_instance_through_an_n8n_kill(stack: Stack, fields_before_notify: bool) -> None:
    """The README's shorter ending: the last Save with the option Complete Instance, no Complete node.

    n8n is killed (-9) with every order's notify call in flight (after its charge was saved); the Resume
    Trigger resumes them at the notify step, and the last Save completes each instance in its own call.
    Then every subscription is delivered again: the Resume Point leaves by Finished, nothing runs twice.
    With `fields_before_notify` an Edit Fields node sits between Claim Notify and the call, so Save
    Notified finds the Guard's answer through two nodes' paired items (the Save takes it in the process
    only when the call comes straight from the Guard); every key must still end completed.
    """
    import psycopg
    from harness import CREDENTIAL_ID, db_url, http

    t0 = time.monotonic()
    sidecar, services = stack.sidecar, stack.services
    wf = LAST_SAVE_WF + ("Fields" if fields_before_notify else "")
    hook = "renewals-last-save" + ("-fields" if fields_before_notify else "")
    url = served(stack, hook, renewal_from_the_docs(services.url, CREDENTIAL_ID, complete_on_last_save=True,
                                                    workflow_id=wf, path=hook,
                                                    fields_before_notify=fields_before_notify))
    subs = orders("lastsave-fields" if fields_before_notify else "lastsave", 6)

    def deliver_all() -> list[int]:
        return [http("POST", url, {"subscriptionId": k, "amount": 19.5, "email": f"{k}@example.com"},
                     timeout=60)[0] for k in subs]

    def diagnose() -> str:
        return stack.diagnose(subs, wf)

    first, killed = stack.kill_n8n_inside("notify", len(subs), deliver_all)
    stack.restart_n8n()
    done_s = wait_for("every subscription to complete", lambda: all_completed(stack, subs, wf), killed,
                      240, diagnose)
    instances = {k: sidecar.instance(wf, k) for k in subs}
    not_resumed = [k for k, i in instances.items() if i is None or i.resume_count < 1]
    trails = {k: sidecar.trail(wf, k) for k in subs}
    again = deliver_all()
    time.sleep(2)  # the re-deliveries' executions end at the Resume Point's Finished output
    after = {k: sidecar.instance(wf, k) for k in subs}
    dups = services.duplicate_effects(subs, ("payment", "notify"))
    assert first == [200] * len(subs) and again == [200] * len(subs), (first, again)
    assert not_resumed == [], f"not resumed by the Resume Trigger: {not_resumed}\n{diagnose()}"
    assert all(t == ["charged", "notified"] for t in trails.values()), trails
    assert all(a is not None and a.status == COMPLETED and a.checkpoint_count == 2 for a in after.values()), after
    assert dups == [], f"duplicate side effects: {dups}\n{diagnose()}"
    assert all(services.calls("notify", k) >= 1 and services.calls("payment", k) == 1 for k in subs)
    with psycopg.connect(db_url(sidecar.database)) as conn:
        keys = conn.execute("SELECT scope, key, status FROM durable_idempotency_keys WHERE key = ANY(%s)",
                            (subs,)).fetchall()
    assert sorted(keys) == sorted((scope, k, "completed") for k in subs for scope in ("charge", "notify")), keys
    REPORT.add("14. last Save completes the instance (no Complete node), kill -9 n8n"
               + (", Edit Fields before the call" if fields_before_notify else ""), len(subs), len(subs),
               len(dups), time.monotonic() - t0,
               note=f"kill -9 with every notify call in flight → all resumed and completed {done_s:.1f} s; "
                    "every subscription delivered again: Finished, nothing ran twice; every key completed",
               kill_to_completed_s=done_s)


def test_15_respond_when_last_node_finishes_answers_redeliveries_2xx_only_with_finished_and_busy_connected(
        stack: Stack) -> None:
    """The README's other answer: Webhook Respond: When Last Node Finishes, no Respond to Webhook node.

    n8n answers such a delivery with the first output of the node that ran last. A re-delivery ends at
    the Resume Point's Finished or Busy output, so with those unconnected n8n answers 500 ("No item to
    return was found") and the sender retries for nothing (a provider such as Stripe eventually disables
    the endpoint); connected to a No Operation node, as the README says, it answers 200. Each
    subscription is delivered twice at once and once more after it completed: every answer 2xx, every
    side effect once.
    """
    from harness import CREDENTIAL_ID, http

    t0 = time.monotonic()
    n8n, services = stack.n8n, stack.services
    hooks = {}
    for connected in (True, False):
        wf = LAST_NODE_WF + ("" if connected else "Bare")
        hook = "renewals-last-node" + ("" if connected else "-bare")
        publish_workflow(n8n, renewal_from_the_docs(services.url, CREDENTIAL_ID, complete_on_last_save=True,
                                                    workflow_id=wf, path=hook, respond="lastNode",
                                                    answer_redeliveries=connected))
        hooks[connected] = (wf, hook)
    for _, hook in hooks.values():
        n8n.wait_webhook(hook, timeout=120)
    wf, hook = hooks[True]
    url = f"{n8n.url}/webhook/{hook}"
    subs = orders("lastnode", 4)
    answers: dict[str, list[tuple[int, bytes]]] = {k: [] for k in subs}

    def deliver(k: str) -> None:
        answers[k].append(http("POST", url, {"subscriptionId": k, "amount": 19.5, "email": f"{k}@example.com"},
                               timeout=60))

    threads = [threading.Thread(target=deliver, args=(k,)) for k in subs for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_completed(stack, subs, 60, wf)
    for k in subs:
        deliver(k)  # the instance finished: the Resume Point's Finished output
    statuses = {k: sorted(status for status, _ in a) for k, a in answers.items()}
    bodies = [json.loads(body) for a in answers.values() for status, body in a if status == 200]
    completed_bodies = [b for b in bodies if "outcome" not in b["durable"]]  # the Save's, not the Resume Point's
    dups = services.duplicate_effects(subs, ("payment", "notify"))
    assert all(st == [200, 200, 200] for st in statuses.values()), statuses
    assert dups == [], f"duplicate side effects: {dups}\n{stack.diagnose(subs, wf)}"
    # The delivery that ran the order is answered with the last Save's output: the state, completed.
    assert len(completed_bodies) == len(subs), answers
    assert all(b["durable"]["status"] == "completed" for b in completed_bodies), completed_bodies
    assert sorted(b["durable"]["outcome"] for b in bodies if "outcome" in b["durable"]).count("finished") >= len(subs)
    # Without the connection: the same re-delivery of a finished subscription is answered 500.
    bare_wf, bare_hook = hooks[False]
    bare_url, sub = f"{n8n.url}/webhook/{bare_hook}", orders("lastnode-bare", 1)[0]
    body = {"subscriptionId": sub, "amount": 19.5, "email": f"{sub}@example.com"}
    first = http("POST", bare_url, body, timeout=60)
    wait_completed(stack, [sub], 60, bare_wf)
    again = http("POST", bare_url, body, timeout=60)
    assert first[0] == 200, first
    assert again[0] == 500 and b"No item to return was found" in again[1], again
    assert services.duplicate_effects([sub], ("payment", "notify")) == []
    REPORT.add("15. Respond: When Last Node Finishes, deliveries twice + after completion", len(subs), len(subs),
               len(dups), time.monotonic() - t0,
               note=f"{3 * len(subs)} deliveries, all 200 with Finished and Busy → No Operation; "
                    "unconnected, a re-delivery of a finished one is answered 500 by n8n")


def test_16_one_delivery_of_several_subscriptions_each_its_own_instance_through_an_n8n_kill(stack: Stack) -> None:
    """Several orders in one delivery: a Split Out node makes an item of each, and every durable node
    handles the items together (a StartOrResume per item, one SaveCheckpoints for all of them).

    n8n is killed (-9) with every subscription's charge in flight: each resumes and completes once. Then
    the same delivery comes again with two new subscriptions, one of them twice: the five finished ones
    leave by Finished, the repeated key leaves by Busy, the new ones run once. Last, a delivery of three in
    which one subscription's charge fails (the service answers 500): n8n fails the whole execution, the
    Resume Trigger resumes each instance in an execution of its own, so the other two complete (their
    charge replayed by its Idempotency-Key, not made twice) while the failing one waits for its retry,
    and completes once the service is back.
    """
    import psycopg
    from harness import CREDENTIAL_ID, db_url, http

    t0 = time.monotonic()
    n8n, sidecar, services = stack.n8n, stack.sidecar, stack.services
    url = served(stack, "renewals-batch", renewal_from_the_docs(
        services.url, CREDENTIAL_ID, complete_on_last_save=True, workflow_id=SPLIT_WF, path="renewals-batch",
        split_out=True))
    subs, new, poisoned = orders("batch", 5), orders("batch-new", 2), orders("batch-poisoned", 3)

    def batch(keys: list[str]) -> dict[str, Any]:
        return {"subscriptions": [{"subscriptionId": k, "amount": 19.5, "email": f"{k}@example.com"} for k in keys]}

    def diagnose() -> str:
        return stack.diagnose(subs + new + poisoned, SPLIT_WF)

    first, killed = stack.kill_n8n_inside("payment", len(subs), lambda: http("POST", url, batch(subs), timeout=60))
    stack.restart_n8n()
    done_s = wait_for("every subscription to complete", lambda: all_completed(stack, subs, SPLIT_WF), killed,
                      240, diagnose)
    not_resumed = [k for k in subs if (i := sidecar.instance(SPLIT_WF, k)) is None or i.resume_count < 1]
    again = http("POST", url, batch([*subs, new[0], new[1], new[0]]), timeout=60)
    wait_completed(stack, new, 60, SPLIT_WF)
    # One bad subscription in a delivery: its neighbours do not wait for it.
    bad, good = poisoned[1], [poisoned[0], poisoned[2]]
    services.fail("payment", bad)
    try:
        third = http("POST", url, batch(poisoned), timeout=60)
        wait_completed(stack, good, 120, SPLIT_WF)
        bad_before_heal = sidecar.instance(SPLIT_WF, bad)
    finally:
        services.heal()
    wait_completed(stack, [bad], 240, SPLIT_WF)
    assert third[0] == 200, third
    assert bad_before_heal is not None and bad_before_heal.status != COMPLETED, bad_before_heal
    assert all(services.calls("payment", k) >= 2 for k in good), "the good ones' charges were not called again"
    everyone = subs + new + poisoned
    instances = {k: sidecar.instance(SPLIT_WF, k) for k in everyone}
    trails = {k: sidecar.trail(SPLIT_WF, k) for k in everyone}
    dups = services.duplicate_effects(everyone, ("payment", "notify"))
    wrong_body = [k for k in everyone for b in services.bodies("notify", k)
                  if b.get("email") != f"{k}@example.com" or b.get("amount") != 19.5 or not b.get("charge")]
    assert first[0] == 200 and again[0] == 200, (first, again)
    assert not_resumed == [], f"not resumed by the Resume Trigger: {not_resumed}\n{diagnose()}"
    assert all(t == ["charged", "notified"] for t in trails.values()), trails
    assert all(i is not None and i.status == COMPLETED and i.checkpoint_count == 2 for i in instances.values()), \
        instances
    assert dups == [], f"duplicate side effects: {dups}\n{diagnose()}"
    assert wrong_body == [], f"notify calls without the subscription's own fields: {wrong_body}"
    with psycopg.connect(db_url(sidecar.database)) as conn:
        keys = conn.execute("SELECT scope, key, status FROM durable_idempotency_keys WHERE key = ANY(%s)",
                            (everyone,)).fetchall()
    assert sorted(keys) == sorted((scope, k, "completed") for k in everyone for scope in ("charge", "notify")), keys
    with psycopg.connect(db_url(n8n.database)) as conn:  # the killed execution is "crashed"
        failed = conn.execute("""SELECT count(*) FROM execution_entity WHERE "workflowId" = %s AND status = 'error'""",
                              (SPLIT_WF,)).fetchone()
    # The only failed executions are those whose charge of the bad subscription failed: the delivery of the
    # three, then each resume of the bad one before the service was back (its last call succeeded).
    failed_charges = services.calls("payment", bad) - 1
    assert failed is not None and failed[0] == failed_charges >= 1, (failed, failed_charges, diagnose())
    REPORT.add("16. several subscriptions in one delivery (Split Out), kill -9 n8n", len(everyone), len(everyone),
               len(dups), time.monotonic() - t0,
               note=f"5 items in one execution, kill -9 with every charge in flight → all resumed and completed "
                    f"{done_s:.1f} s; the same delivery again with 2 new (one twice): new ones once, nothing twice; "
                    "one failing charge in a delivery of 3: the other 2 resume and complete on their own",
               kill_to_completed_s=done_s)
