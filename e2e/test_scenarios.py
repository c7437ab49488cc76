"""End-to-end scenarios: real n8n, our nodes, the real sidecar, PostgreSQL, Redis, and crashes in the middle:
the example order workflow, kills of n8n and the sidecar, re-deliveries, version binding, scheduled resumes."""

from __future__ import annotations

import copy
import json
import threading
import time
from typing import Any

from conftest import ORDER_WF, RENEWAL_WF, REPORT, Stack
from durable.v1 import version_pb2
from harness import NAMESPACE, wait_until
from scenarios import FULL_TRAIL, SIDE_EFFECTS, all_past, all_resumed, check_exactly_once, orders, post_all, wait_completed, wait_for


def test_0_package_loads_in_n8n_with_every_node_icon_and_parameters(stack: Stack) -> None:
    """Our package, installed from its packed tarball, shows every node and the credential in a real n8n."""
    opener = stack.n8n.rest_session()
    with opener.open(f"{stack.n8n.url}/types/nodes.json", timeout=60) as resp:
        types = json.loads(resp.read())
    # usableAsTool nodes also appear as "<name>Tool" variants for AI agents.
    ours = {t["name"]: t for t in types
            if t["name"].startswith("n8n-nodes-durable.") and not t["name"].endswith("Tool")}
    expected = {"resumePoint", "durableCheckpoint", "idempotencyGuard", "resumeTrigger", "durableInstance",
                "durableLimit"}
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
    REPORT.add("0. package loads: 6 nodes + credential", 0, 0, 0, 0,
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

    # The first Claim's key is claimed by the Resume Point through Accepted, beside the door's refusal (error output
    # → Not Accepted → Fail Execution) and the Old Version's hand-off (Run Old Version), which run nothing of it.
    for guard in ("Claim Payment", "Claim Inventory", "Claim Shipping", "Claim Coupon"):
        answer = claimed(guard)
        assert answer.get("claimedAhead") is True and answer["outcome"] == "acquired" and answer["attempt"] == 1, \
            f"{guard}: {answer}"
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


def order_tracking_v2(v1: dict[str, Any], logic: str = "v2") -> dict[str, Any]:
    """A later version of the order workflow: the coupon call carries `logic` (the services record it)."""
    wf = copy.deepcopy(v1)
    (coupon,) = [n for n in wf["nodes"] if n["name"] == "Send Coupon"]
    coupon["parameters"]["jsonBody"] = (
        f"={{{{ JSON.stringify({{ orderId: $json.body.orderId, amount: $json.body.amount, logic: '{logic}' }}) }}}}")
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

        # v3 is published and an order comes at once, with no sync: the Resume Point's fingerprint of the
        # workflow it runs is new to the sidecar, which reads n8n then, not at its next interval (60 s).
        saved = n8n.update_workflow(api_key, order_tracking_v2(stack.workflows[ORDER_WF], "v3"))
        n8n.wait_published(ORDER_WF, saved["versionId"])
        late = orders("ver-v3", 1)
        post_all(stack, late)
        wait_completed(stack, late, timeout=120)
        inst = sidecar.instance(ORDER_WF, late[0])
        assert inst is not None and inst.bound_version == v2 + 1, f"{late[0]} is bound to {inst}"
        assert stack.services.logic("coupon", late[0]) == ["v3"], stack.services.logic("coupon", late[0])
        (registered,) = [e for e in sidecar.change_log(ORDER_WF)
                         if e.kind == version_pb2.CHANGE_KIND_VERSION_REGISTERED and e.to_version == v2 + 1]
        assert "an execution ran a workflow this sidecar had not seen" in registered.reason, registered
        everyone += late
        dups = check_exactly_once(stack, everyone)
    finally:
        sidecar.reconfigure({})
    REPORT.add("5. version binding: v1 in flight, v2 published", len(everyone), len(everyone), dups,
               time.monotonic() - t0,
               note=f"{len(in_flight) - 1} finished on v{v1} via Execute Workflow, 1 moved + {len(new)} new on v{v2}; "
                    "1 move in the change log; v3 bound at its first order, no sync")


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


def test_33_an_order_replayed_from_checkpoint_2_runs_steps_3_and_4_again_with_new_keys(stack: Stack) -> None:
    """Issue 44: a completed order replayed from its second checkpoint (`durable-sidecar instances replay`) is a
    fork <key>~r1 that the Resume Trigger runs from "reserved": shipping and the coupon run again, and the
    provider sees new Idempotency-Keys for them; payment and inventory do not run again."""
    t0 = time.monotonic()
    (k,) = orders("replay", 1)
    post_all(stack, [k])
    wait_completed(stack, [k], timeout=180)
    check_exactly_once(stack, [k])
    first_keys = {s: {c["key"] for c in stack.services.call_records() if c["service"] == s and c["order"] == k}
                  for s in SIDE_EFFECTS}
    out = stack.sidecar.cli("instances", "replay", ORDER_WF, k, "--from", "2", "--namespace", NAMESPACE,
                            "--reason", "the shipping step had a bug", "--actor", "e2e-operator")
    fork = f"{k}~r1"
    assert f"{ORDER_WF}/{fork}: the replay of {k} from checkpoint 2 (2 checkpoints copied)" in out, out
    wait_completed(stack, [fork], timeout=180)
    assert stack.sidecar.trail(ORDER_WF, fork) == FULL_TRAIL, stack.sidecar.trail(ORDER_WF, fork)
    effects = {s: stack.services.effects(s, k) for s in SIDE_EFFECTS}
    assert effects == {"payment": 1, "inventory": 1, "shipping": 2, "coupon": 2}, (effects, stack.diagnose([k]))
    for s in ("shipping", "coupon"):
        keys = {c["key"] for c in stack.services.call_records() if c["service"] == s and c["order"] == k}
        assert len(keys - first_keys[s]) == 1, (s, keys, first_keys[s])  # one new Idempotency-Key
    original = stack.sidecar.instance(ORDER_WF, k)
    assert original is not None and original.last_sequence == 4
    REPORT.add("33. replay from checkpoint 2", 1, 1, 0, time.monotonic() - t0,
               note="fork <key>~r1 ran shipping and coupon again with new keys; payment, inventory once")
