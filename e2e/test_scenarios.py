"""End-to-end scenarios: real n8n, our nodes, the real sidecar, PostgreSQL, Redis, and crashes in the middle."""

from __future__ import annotations

import copy
import json
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import ORDER_WF, RENEWAL_WF, REPORT, Stack
from durable.v1 import common_pb2, version_pb2
from harness import NAMESPACE, REPO, publish_workflow, wait_until

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


def test_0_package_loads_in_n8n_with_every_node_icon_and_parameters(stack: Stack) -> None:
    """Our package, installed from its packed tarball, shows every node and the credential in a real n8n."""
    opener = stack.n8n.rest_session()
    with opener.open(f"{stack.n8n.url}/types/nodes.json", timeout=60) as resp:
        types = json.loads(resp.read())
    # usableAsTool nodes also appear as "<name>Tool" variants for AI agents.
    ours = {t["name"]: t for t in types
            if t["name"].startswith("n8n-nodes-durable.") and not t["name"].endswith("Tool")}
    expected = {"resumePoint", "durableCheckpoint", "idempotencyGuard", "resumeTrigger", "durableInstance"}
    assert {n.split(".", 1)[1] for n in ours} == expected, sorted(ours)
    for name, t in ours.items():
        assert t.get("icon") or t.get("iconUrl"), f"{name} has no icon"
        assert len(t["properties"]) >= 2, f"{name} has no parameters"
        assert t["credentials"][0]["name"] == "durableSidecarApi"
    with opener.open(f"{stack.n8n.url}/types/credentials.json", timeout=60) as resp:
        creds = {c["name"]: c for c in json.loads(resp.read())}
    assert "durableSidecarApi" in creds
    props = {p["name"] for p in creds["durableSidecarApi"]["properties"]}
    assert {"host", "port", "tls", "token", "deadlineSeconds"} <= props
    REPORT.add("0. package loads: 5 nodes + credential", 0, 0, 0, 0,
               note=", ".join(sorted(n.split(".", 1)[1] for n in ours)))


def test_1_twenty_orders_complete_with_full_checkpoint_trails(stack: Stack) -> None:
    t0 = time.monotonic()
    keys = orders("plain", 20)
    post_all(stack, keys)
    wait_completed(stack, keys, timeout=180)
    for k in keys:
        trail = stack.sidecar.trail(ORDER_WF, k)
        assert trail == FULL_TRAIL, f"{k}: {trail}"
    dups = check_exactly_once(stack, keys)
    # Claimed ahead (node-package/README.md): each Save claims the key of the Claim it feeds, in real
    # n8n's graph; that Claim routes by the answer and makes no call. One order's execution, as n8n stored it.
    inst = stack.sidecar.instance(ORDER_WF, keys[0])
    assert inst is not None and inst.created_by_execution_id
    run = stack.n8n.execution(stack.n8n.create_api_key("e2e claim ahead"),
                              inst.created_by_execution_id)["data"]["resultData"]["runData"]

    def claimed(node: str) -> dict[str, Any]:
        return dict(run[node][0]["data"]["main"][0][0]["json"]["idempotency"])

    for guard in ("Claim Inventory", "Claim Shipping", "Claim Coupon"):
        answer = claimed(guard)
        assert answer.get("claimedAhead") is True and answer["outcome"] == "acquired" and answer["attempt"] == 1, \
            f"{guard}: {answer}"
    # The Resume Point feeds more than the first Claim here, so that Claim claims for itself.
    assert "claimedAhead" not in claimed("Claim Payment"), claimed("Claim Payment")
    # Nothing of it rides on the items.
    assert all("claimAhead" not in json.dumps(r) for r in run.values())
    # The Webhook answers through Respond to Webhook after the Resume Point: no early-answer warning.
    assert not run["Resume Point"][0].get("hints"), run["Resume Point"][0].get("hints")
    REPORT.add("1. 20 orders, full checkpoint trail", len(keys), len(keys), dups, time.monotonic() - t0)


def test_2_kill9_n8n_mid_flight_resumes_without_duplicates(stack: Stack) -> None:
    t0 = time.monotonic()
    keys = orders("n8nkill", 8)
    _, killed = stack.kill_n8n_inside("inventory", len(keys), lambda: post_all(stack, keys))
    stack.restart_n8n()
    restarted = time.monotonic() - killed
    resumed = wait_for("every order to be resumed", lambda: all_resumed(stack, keys), killed, 240,
                       lambda: stack.diagnose(keys))
    wait_completed(stack, keys, timeout=240)
    done = time.monotonic() - killed
    for k in keys:
        assert stack.sidecar.trail(ORDER_WF, k) == FULL_TRAIL
        inst = stack.sidecar.instance(ORDER_WF, k)
        assert inst is not None and inst.resume_count >= 1, f"{k} was not resumed"
    dups = check_exactly_once(stack, keys)
    REPORT.add("2. kill -9 n8n mid-flight (inventory in flight)", len(keys), len(keys), dups,
               time.monotonic() - t0,
               note=f"kill -9 → n8n ready {restarted:.1f} s → all resumed {resumed:.1f} s ({resumed - restarted:.1f} s "
                    f"after n8n was ready) → all completed {done:.1f} s (every option at its default)",
               n8n_restart_s=restarted, kill_to_resumed_s=resumed, ready_to_resumed_s=resumed - restarted,
               kill_to_completed_s=done)


def test_3_kill9_sidecar_mid_flight_resumes_without_duplicates(stack: Stack) -> None:
    t0 = time.monotonic()
    keys = orders("sckill", 6)
    stack.services.stall("shipping")
    try:
        post_all(stack, keys)
        wait_until("every order to be inside the shipping call",
                   lambda: stack.services.in_flight("shipping") >= len(keys), timeout=90)
        stack.sidecar.process.kill9()
        killed = time.monotonic()
    finally:
        stack.services.unstall()
    time.sleep(2)  # the executions reach the sidecar while it is down and wait for it
    stack.sidecar.start()
    restarted = time.monotonic() - killed
    resumed = wait_for("every order to save its shipping", lambda: all_past(stack, keys, "shipped"), killed, 240,
                       lambda: stack.diagnose(keys))
    wait_completed(stack, keys, timeout=240)
    done = time.monotonic() - killed
    for k in keys:
        assert stack.sidecar.trail(ORDER_WF, k) == FULL_TRAIL
    dups = check_exactly_once(stack, keys)
    ridden = sum(1 for k in keys if (i := stack.sidecar.instance(ORDER_WF, k)) and i.resume_count == 0)
    REPORT.add("3. kill -9 sidecar mid-flight (shipping in flight)", len(keys), len(keys), dups,
               time.monotonic() - t0,
               note=f"kill -9 → sidecar serving {restarted:.1f} s → all saved 'shipped' {resumed:.1f} s → all "
                    f"completed {done:.1f} s; {ridden} rode it out in their execution",
               sidecar_restart_s=restarted, kill_to_resumed_s=resumed, kill_to_completed_s=done)


def test_4_redelivered_order_runs_once_and_later_deliveries_take_completed(stack: Stack) -> None:
    t0 = time.monotonic()
    (key,) = orders("dup", 1)
    threads = [threading.Thread(target=stack.post_order, args=(key,)) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_completed(stack, [key], timeout=120)
    calls = sum(stack.services.calls(s, key) for s in SIDE_EFFECTS)
    for _ in range(3):
        # Finished: no Accepted on that route; n8n answers 200 with an empty body when the execution ends.
        status, body = stack.deliver(key)
        assert status == 200 and b"accepted" not in body, (status, body)
    assert stack.sidecar.count_instances(ORDER_WF, key) == 1
    assert sum(stack.services.calls(s, key) for s in SIDE_EFFECTS) == calls, "a finished order called a service"
    for service in SIDE_EFFECTS:
        assert stack.services.calls(service, key) >= 1
    dups = check_exactly_once(stack, [key])
    REPORT.add("4. same order 5x concurrently + 3x after completion", 1, 1, dups, time.monotonic() - t0,
               note="later deliveries: Finished, no call")


def order_tracking_v2(v1: dict[str, Any]) -> dict[str, Any]:
    """Version 2 of the order workflow: the coupon call carries `logic: "v2"` (the services record it)."""
    wf = copy.deepcopy(v1)
    (coupon,) = [n for n in wf["nodes"] if n["name"] == "Send Coupon"]
    coupon["parameters"]["jsonBody"] = (
        "={{ JSON.stringify({ orderId: $json.body.orderId, amount: $json.body.amount, logic: 'v2' }) }}")
    return wf


def test_5_version_binding_in_flight_orders_keep_v1_moved_one_and_new_orders_run_v2(stack: Stack) -> None:
    """Orders start on v1; v2 is published; one in-flight order is moved on purpose.

    The sidecar reads versions from n8n's public API with an API key made for it.
    n8n is restarted (kill -9, as a crash during the deploy would) while the
    v1 orders stand inside the shipping call; they resume through the v2
    workflow, whose Resume Point sends the v1-bound ones by Version Mismatch to
    Execute Workflow with their v1 JSON. The coupon call tells which logic ran.
    """
    t0 = time.monotonic()
    n8n, sidecar = stack.n8n, stack.sidecar
    api_key = n8n.create_api_key("durable sidecar (e2e)")
    sidecar.reconfigure({"DURABLE_N8N_BASE_URL": n8n.url, "DURABLE_N8N_API_KEY": api_key})
    ns = ("--namespace", NAMESPACE)
    try:
        sidecar.cli("versions", "sync", *ns, ORDER_WF)
        v1 = sidecar.current_version(ORDER_WF)
        assert v1 >= 1
        in_flight, new = orders("ver-old", 3), orders("ver-new", 2)
        moved = in_flight[0]
        stack.services.stall("shipping")
        try:
            post_all(stack, in_flight)
            wait_until("every v1 order to be inside the shipping call",
                       lambda: stack.services.in_flight("shipping") >= len(in_flight), timeout=90)
            for k in in_flight:
                inst = sidecar.instance(ORDER_WF, k)
                assert inst is not None and inst.bound_version == v1, f"{k} is bound to {inst}"
            # The author saves v2 in n8n (its public API, as the editor's Publish does) and it goes
            # live; the operator syncs it into the sidecar and moves one in-flight order to it,
            # with a dry run first.
            saved = n8n.update_workflow(api_key, order_tracking_v2(stack.workflows[ORDER_WF]))
            n8n.wait_published(ORDER_WF, saved["versionId"])
            sidecar.cli("versions", "sync", *ns, ORDER_WF)
            v2 = sidecar.current_version(ORDER_WF)
            assert v2 == v1 + 1, f"v2 not registered: current {v2}"
            diff = sidecar.cli("versions", "diff", *ns, ORDER_WF, str(v1), str(v2))
            assert "~ Send Coupon" in diff and diff.count("\n~ ") + diff.count("\n+ ") + diff.count("\n- ") == 1, diff
            dry = sidecar.cli("instances", "move", *ns, ORDER_WF, "--to", str(v2), "--key", moved, "--dry-run")
            assert moved in dry and sidecar.instance(ORDER_WF, moved).bound_version == v1  # type: ignore[union-attr]
            sidecar.cli("instances", "move", *ns, ORDER_WF, "--to", str(v2), "--key", moved,
                        "--reason", "customer asked for the v2 coupon", "--actor", "e2e-operator")
            stack.main.kill9()  # the deploy restarts n8n while the v1 executions are mid-flight
        finally:
            stack.services.unstall()
        stack.restart_n8n()
        post_all(stack, new)
        everyone = in_flight + new
        wait_completed(stack, everyone, timeout=240)

        expect = {k: (v1, "") for k in in_flight[1:]} | {k: (v2, "v2") for k in [moved, *new]}
        for k, (version, logic) in expect.items():
            inst = sidecar.instance(ORDER_WF, k)
            assert inst is not None and inst.bound_version == version, f"{k}: bound {inst and inst.bound_version}"
            assert stack.services.logic("coupon", k) == [logic], (
                f"{k} (bound to v{version}) ran coupon logic {stack.services.logic('coupon', k)}, expected "
                f"[{logic!r}]\n{stack.diagnose([k])}")
            assert sidecar.trail(ORDER_WF, k) == FULL_TRAIL, f"{k}: {sidecar.trail(ORDER_WF, k)}"
        for k in in_flight:
            inst = sidecar.instance(ORDER_WF, k)
            assert inst is not None and inst.resume_count >= 1, f"{k} was not resumed"
            if k != moved:
                # Resumed by the v2 execution, then taken over by the v1 sub-workflow (the hand-off).
                assert inst.resume_count >= 2, f"{k} was not handed to its v1 sub-workflow: {inst}"
        moves = [e for e in sidecar.change_log(ORDER_WF) if e.kind == version_pb2.CHANGE_KIND_INSTANCE_MOVED]
        assert [(e.instance_key, e.from_version, e.to_version, e.actor, e.reason) for e in moves] == [
            (moved, v1, v2, "e2e-operator", "customer asked for the v2 coupon")], moves
        dups = check_exactly_once(stack, everyone)
    finally:
        sidecar.reconfigure({})
    REPORT.add("5. version binding: v1 in flight, v2 published", len(everyone), len(everyone), dups,
               time.monotonic() - t0,
               note=f"{len(in_flight) - 1} finished on v{v1} via Execute Workflow, 1 moved + {len(new)} new on v{v2}; "
                    "1 move in the change log")


def test_6_scheduled_resume_survives_an_n8n_restart(stack: Stack) -> None:
    t0 = time.monotonic()
    keys = orders("renew", 3)
    for k in keys:
        assert stack.post_order(k, path="subscriptions") == 200
    wait_until("every subscription to wait", lambda: all(
        (i := stack.sidecar.instance(RENEWAL_WF, k)) is not None and i.HasField("wake_at") for k in keys), 60)
    stack.main.kill9()
    time.sleep(3)
    stack.restart_n8n()
    wait_completed(stack, keys, timeout=180, workflow_id=RENEWAL_WF)
    for k in keys:
        assert stack.sidecar.trail(RENEWAL_WF, k) == ["waiting", "reminded"]
    dups = check_exactly_once(stack, keys, ("notify",))
    REPORT.add("6. scheduled resume across an n8n restart", len(keys), len(keys), dups, time.monotonic() - t0,
               note="Schedule Resume 20 s; n8n killed during the wait")


def test_12_kill9_n8n_again_while_it_applies_its_startup_publication(stack: Stack) -> None:
    """n8n killed mid-flight, then killed again while its restart applies the order workflow's publication.

    n8n 2.41 activates triggers through a publication outbox; the second kill leaves the workflow's
    row in_progress and the next n8n skips that workflow (no Resume Trigger) until the row's lease
    ends: 120 s by n8n's default, 20 s with the N8N_WORKFLOW_PUBLICATION_OUTBOX_LEASE_SECONDS that
    e2e/n8n-env.sh sets (docs/recovery.md). The orders must resume well inside n8n's default.

    The row is in_progress for milliseconds, so the second kill may miss it. Then the test writes
    the row such a kill leaves (in_progress, updated now, as n8n's claim sets it) and says so.
    """
    import psycopg
    from harness import db_url

    t0 = time.monotonic()
    n8n = stack.n8n
    keys = orders("pubkill", 4)
    stack.kill_n8n_inside("inventory", len(keys), lambda: post_all(stack, keys))
    with psycopg.connect(db_url(n8n.database), autocommit=True) as conn:
        def rows_after(before: int) -> list[str]:
            return [str(r[0]) for r in conn.execute(
                'SELECT status FROM workflow_publication_outbox WHERE "workflowId" = %s AND id > %s',
                (ORDER_WF, before))]

        row = conn.execute('SELECT max(id) FROM workflow_publication_outbox').fetchone()
        before = int(row[0]) if row and row[0] is not None else 0
        main = n8n.process("main")
        main.start()
        caught = False
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and main.alive:
            seen = rows_after(before)
            if "in_progress" in seen:
                main.kill9()  # the second crash, while the start-up publication is being applied
                caught = True
                break
            if any(st not in ("pending", "in_progress") for st in seen):
                break  # applied before we looked
            time.sleep(0.005)
        if not caught:
            main.kill9()
            conn.execute(
                'INSERT INTO workflow_publication_outbox ("workflowId", "publishedVersionId", status, reason) '
                'SELECT id, "activeVersionId", %s, %s FROM workflow_entity WHERE id = %s',
                ("in_progress", "startup", ORDER_WF))
    killed = time.monotonic()
    stack.main = n8n.process("main")
    stack.main.start()
    n8n.wait_ready(stack.main)
    n8n.wait_webhook("orders")
    restarted = time.monotonic() - killed
    resumed = wait_for("every order to be resumed", lambda: all_resumed(stack, keys), killed, 240,
                       lambda: stack.diagnose(keys))
    wait_completed(stack, keys, timeout=240)
    done = time.monotonic() - killed
    dups = check_exactly_once(stack, keys)
    how = "killed during it" if caught else "missed it by ms: wrote the row a kill leaves"
    # n8n's default lease alone is 120 s after the second kill; ours is 20 s.
    assert resumed < 100, f"resumed {resumed:.0f} s after the second kill ({how}): the publication lease held it"
    REPORT.add("12. kill -9 n8n, then again during its start-up publication", len(keys), len(keys), dups,
               time.monotonic() - t0,
               note=f"{how}; second kill → n8n ready {restarted:.1f} s → all resumed {resumed:.1f} s → all "
                    f"completed {done:.1f} s (outbox lease 20 s, n8n default 120 s)",
               n8n_restart_s=restarted, kill_to_resumed_s=resumed, kill_to_completed_s=done)


RENEWAL_DOCS_WF = "durableRenewalDocs"
SHORT_DEADLINE_S = 5


class DocsFlow:
    """A workflow written from node-package/README.md: the examples' own little builder (Flow) plus the
    node shapes such workflows share: durable nodes at their newest versions on one credential, a JSON
    POST to a fake service that sends the Claim's derived key as Idempotency-Key, and the Webhook."""

    def __init__(self, workflow_id: str, name: str, services_url: str, credential_id: str) -> None:
        import sys

        sys.path.insert(0, str(REPO / "examples"))
        from generate import GUARD, RESUME_POINT, Flow

        self.flow, self.services_url = Flow(workflow_id, name), services_url
        self.versions = {"resumeTrigger": 1, "idempotencyGuard": GUARD, "resumePoint": RESUME_POINT}
        self.cred = {"durableSidecarApi": {"id": credential_id, "name": credential_id}}
        self.node, self.link = self.flow.node, self.flow.link

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


LAST_SAVE_WF = "durableRenewalLastSave"


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


LAST_NODE_WF = "durableRenewalLastNode"


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


SPLIT_WF = "durableRenewalBatch"


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


@pytest.mark.timeout(900)
def test_7_queue_mode_a_frozen_worker_is_fenced_and_a_killed_worker_s_orders_resume_in_seconds(stack: Stack) -> None:
    """n8n in queue mode (main plus two workers on Redis), every option at its default (issue 39).

    Frozen: a worker runs 3 orders, each inside its payment call, and is stopped (SIGSTOP) for longer
    than the session grace. Its session ends, the other worker resumes the orders (the provider sees each
    key at most twice, performs it once), and when the frozen worker wakes (SIGCONT) its Saves are
    refused: its executions fail with "session ended" and change nothing.
    Killed: one worker runs 20 orders, each inside its inventory call, and is killed (-9). Every order
    completes once; the time from the kill to all resumed is printed (the goal: 10 s).

    It stops the regular n8n of the shared stack while it runs (two cores: one n8n at a time) and
    starts it again afterwards, so scenarios in later files find the stack as they expect.
    """
    import psycopg
    from conftest import customise
    from harness import REPO, N8n, create_db, db_url, drop_db, import_credential, import_workflow

    t0 = time.monotonic()
    stack.n8n.stop_all()  # two cores: one n8n at a time
    database = create_db("n8n_e2e_queue")
    queue_env = {"EXECUTIONS_MODE": "queue", "QUEUE_BULL_REDIS_HOST": "127.0.0.1", "QUEUE_BULL_REDIS_PORT": "6379",
                 "QUEUE_BULL_PREFIX": f"durable-e2e-{uuid.uuid4().hex[:8]}", "QUEUE_HEALTH_CHECK_ACTIVE": "false"}
    work = stack.work / "queue"
    work.mkdir()
    n8n = N8n(work, database, REPO / "node-package", extra_env=queue_env)
    services = stack.services

    def worker(concurrency: int = 25) -> Any:
        w = n8n.process("worker", env={"N8N_LOG_LEVEL": "info"})  # it says when it is ready
        w.argv += [f"--concurrency={concurrency}"]
        w.start()
        wait_until(f"{w.name} to be ready", lambda: "worker is now ready" in w.log.read_text(errors="replace"),
                   timeout=180)
        return w

    def signal_group(w: Any, sig: signal.Signals) -> None:
        assert w.proc is not None
        os.killpg(w.proc.pid, sig)

    try:
        import_credential(n8n, stack.sidecar)
        source = json.loads((REPO / "examples" / "order-tracking.json").read_text())
        path = work / "order-tracking.json"
        path.write_text(json.dumps(customise(source, services.url)))
        import_workflow(n8n, path, {})
        n8n.start_main()
        # Exactly as many slots as held orders: a worker with every slot busy takes no job from the queue,
        # so the resumed orders go to the other worker (a frozen one would hold a job it took meanwhile).
        held = orders("frozen", 3)
        frozen = worker(concurrency=len(held))
        n8n.wait_webhook("orders")

        # Frozen for longer than the grace, then woken: fenced.
        services.stall("payment")
        try:
            post_all(stack, held, base_url=n8n.url)
            wait_until("every held order to be inside the payment call",
                       lambda: services.in_flight("payment") >= len(held), timeout=120)
            other = worker()  # ready to take the resumed orders
            signal_group(frozen, signal.SIGSTOP)
            stopped = time.monotonic()
        finally:
            services.unstall()
        try:
            resumed_s = wait_for("the frozen worker's orders to be resumed elsewhere",
                                 lambda: all_resumed(stack, held), stopped, 120, lambda: stack.diagnose(held))
            wait_completed(stack, held, timeout=120)
        finally:
            signal_group(frozen, signal.SIGCONT)
        woke = time.monotonic()

        def fenced() -> int:
            with psycopg.connect(db_url(database)) as conn:
                row = conn.execute(
                    """SELECT count(*) FROM execution_entity e JOIN execution_data d ON d."executionId" = e.id
                       WHERE e.status = 'error' AND d.data LIKE '%session ended%'""").fetchone()
            return int(row[0]) if row else 0

        wait_until("the woken worker's executions to be refused", lambda: fenced() >= len(held), timeout=120)
        for k in held:
            assert stack.sidecar.trail(ORDER_WF, k) == FULL_TRAIL, stack.diagnose([k])
            assert services.calls("payment", k) <= 2, f"{k}: {services.calls('payment', k)} payment calls"
        check_exactly_once(stack, held)
        REPORT.add("7a. queue mode: SIGSTOP of a worker inside 3 payment calls, then SIGCONT", len(held), len(held),
                   0, time.monotonic() - t0,
                   note=f"stopped → all resumed by the other worker {resumed_s:.1f} s; woken: its {len(held)} "
                        f"executions refused (session ended) within {time.monotonic() - woke:.1f} s; each payment "
                        "key at most twice at the provider, performed once",
                   stop_to_resumed_s=resumed_s)

        # Killed with 20 orders inside a call: the others resume them in seconds.
        frozen.stop()
        other.stop()  # one worker takes all 20 (the sessions of these two end when they exit)
        t1 = time.monotonic()
        busy = worker()
        keys = orders("queue", 20)
        services.stall("inventory")
        try:
            post_all(stack, keys, base_url=n8n.url)
            wait_until("all 20 orders to be inside the inventory call",
                       lambda: services.in_flight("inventory") >= len(keys), timeout=180)
            spare = worker()
            busy.kill9()
            killed = time.monotonic()
        finally:
            services.unstall()
        resumed = wait_for("every order to be resumed", lambda: all_resumed(stack, keys), killed, 240,
                           lambda: stack.diagnose(keys))
        wait_completed(stack, keys, timeout=240)
        done = time.monotonic() - killed
        for k in keys:
            assert stack.sidecar.trail(ORDER_WF, k) == FULL_TRAIL
        dups = check_exactly_once(stack, keys)
        assert spare.alive
        REPORT.add("7b. queue mode: kill -9 of the worker running 20 orders inside a call", len(keys), len(keys),
                   dups, time.monotonic() - t1,
                   note=f"main + 2 workers on Redis (bull), every option at its default: kill → all resumed "
                        f"{resumed:.1f} s (goal 10 s) → all completed {done:.1f} s",
                   kill_to_resumed_s=resumed, kill_to_completed_s=done)
    finally:
        n8n.stop_all()
        drop_db(database)
        stack.restart_n8n()


def test_7c_a_call_longer_than_any_lease_in_a_live_n8n_is_never_resumed(stack: Stack) -> None:
    """A 60 s payment call in a live n8n, every option at its default: 12 times the session grace, five
    times the lease this suite set before sessions. Its session lives and its execution is running, so
    the order is never resumed: it completes once with one payment call."""
    t0 = time.monotonic()
    key = orders("longcall", 1)
    call_s = 60
    assert http_ok(stack.services.url, f"/slow?payment={call_s}")
    try:
        post_all(stack, key)
        wait_completed(stack, key, timeout=call_s + 120)
    finally:
        assert http_ok(stack.services.url, "/slow?payment=0")
    inst = stack.sidecar.instance(ORDER_WF, key[0])
    assert inst is not None and inst.resume_count == 0, f"resumed during a live call: {inst}"
    assert stack.services.calls("payment", key[0]) == 1
    dups = check_exactly_once(stack, key)
    REPORT.add("7c. a 60 s payment call in a live n8n", 1, 1, dups, time.monotonic() - t0,
               note="every option at its default: never resumed, one payment call")


def http_ok(base: str, path: str) -> bool:
    from harness import http

    return http("POST", f"{base}{path}")[0] == 200


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


SUB_ORDERS_WF = "durableSubOrders"
CHARGE_SUB_WF = "durableChargeSub"


def side_effect_sub_workflow(f: DocsFlow, claim: tuple[str, dict[str, Any]], call: tuple[str, str],
                             save: tuple[str, str]) -> dict[str, Any]:
    """A side effect as a sub-workflow of its own, written from node-package/README.md with defaults: When
    Executed by Another Workflow (Input Data Mode: Accept All Data) → Claim (`claim`: its name and
    parameters) → HTTP charge (`call`: its name and JSON body; derived key) → Save (`save`: its name and
    step); Done Before → the same Save. No Resume Point: the items bring their instance (`durable`) from the
    calling workflow's Resume Point, or the calling execution took it."""
    start = f.node("When Executed by Another Workflow", "n8n-nodes-base.executeWorkflowTrigger", 1.1,
                   {"inputSource": "passthrough"}, (0, 0))
    c = f.durable(claim[0], "idempotencyGuard", {"operation": "claim", **claim[1]}, (220, 0))
    charge = f.call(call[0], "payment", call[1], (440, 0))
    saved = f.durable(save[0], "durableCheckpoint", {"operation": "save", "stepName": save[1]}, (660, 0))
    f.link(start, c)
    f.link(c, charge, 0)
    f.link(c, saved, 1)
    f.link(charge, saved)
    return f.workflow()


def charge_sub_workflow(services_url: str, credential_id: str) -> dict[str, Any]:
    """The order's charge as a sub-workflow: Claim Charge → charge → Save "charged"."""
    f = DocsFlow(CHARGE_SUB_WF, "Charge the order (sub-workflow, from the node docs)", services_url, credential_id)
    return side_effect_sub_workflow(f, ("Claim Charge", {"scope": "charge"}), (
        "Charge", "={{ JSON.stringify({ orderId: $json.body.orderId, amount: $json.body.amount }) }}"),
        ("Save Charged", "charged"))


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
