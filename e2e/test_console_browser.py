"""The web console in a real browser (Playwright driving Debian's chromium) against the e2e stack's sidecar.

A wrong token is refused; the right one logs in. An order that really ran through the
order-tracking example (community nodes, real n8n) is found by workflow and key prefix, its
timeline shows the start, the four checkpoints and the completion with links to the n8n
executions, and two checkpoints are diffed in the browser. An instance a plain HTTP Request
workflow left RUNNING is cancelled through the confirmation dialog (backing out first changes
nothing), and the audit event with actor and reason appears in the timeline and over gRPC.

Screenshots of the instance list and the timeline go to e2e/results/ (DURABLE_E2E_CONSOLE_PNG_DIR
chooses the folder, e.g. docs/images to refresh the ones in the docs).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ORDER_WF, REPORT, Stack
from durable.v1 import (
    audit_pb2,
    audit_pb2_grpc,
    checkpoint_pb2,
    checkpoint_pb2_grpc,
    common_pb2,
    instance_pb2,
    instance_pb2_grpc,
    version_pb2,
    version_pb2_grpc,
)
from harness import READ_TOKEN, REPO, TOKEN, wait_until
from playwright.sync_api import expect
from test_http_request_node import HTTP_WF, http_face_workflow, install_http_face_workflow, post_http_face_order

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 800}

playwright_api = pytest.importorskip("playwright.sync_api", reason="run `make browser-setup` (make e2e does)")


@pytest.fixture(scope="module")
def page(stack: Stack) -> Iterator[Any]:
    """A chromium page (one tab: the console keeps its token in this tab's sessionStorage)."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run `make browser-setup` (make e2e does)"
    with playwright_api.sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where chromium refuses its sandbox.
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            tab = browser.new_context(viewport=VIEWPORT).new_page()
            tab.set_default_timeout(60_000)
            errors: list[str] = []
            tab.on("pageerror", lambda exc: errors.append(str(exc)))
            yield tab
            assert not errors, f"the console threw: {errors}"
        finally:
            browser.close()


def _shot(page: Any, name: str) -> Path:
    folder = Path(os.environ.get("DURABLE_E2E_CONSOLE_PNG_DIR", str(REPO / "e2e" / "results")))
    if not folder.is_absolute():
        folder = REPO / folder
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    page.screenshot(path=str(path))
    return path


def _kinds(page: Any) -> list[str]:
    kinds: list[str] = page.locator("[data-testid=timeline] tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.kind)")
    return kinds


def test_console_login_timeline_diff_and_cancel_on_real_runs(stack: Stack, page: Any) -> None:
    t0 = time.monotonic()
    sidecar = stack.sidecar
    # A real run of the order example, and a RUNNING instance made by HTTP Request nodes.
    run = uuid.uuid4().hex[:6]
    order, waiting = f"console-{run}-order", f"console-{run}-open"
    assert stack.post_order(order, amount=42.0) == 200
    install_http_face_workflow(stack)
    post_http_face_order(stack, waiting, 20, complete=False)
    wait_until("the order to complete", lambda: (i := sidecar.instance(ORDER_WF, order)) is not None
               and i.status == common_pb2.INSTANCE_STATUS_COMPLETED, 180)
    assert sidecar.instance(HTTP_WF, waiting).status == common_pb2.INSTANCE_STATUS_RUNNING  # type: ignore[union-attr]

    # A wrong token is refused and not kept.
    page.goto(f"{sidecar.http_url}/console/")
    page.fill("#token", "not-the-token-123")
    page.click("#login")
    page.wait_for_selector("#login-error:not([hidden])")
    assert "refused" in page.text_content("#login-error").lower()
    assert page.evaluate("sessionStorage.getItem('durable.console.token')") is None
    assert page.locator("[data-testid=instances-table]").count() == 0

    # The right one logs in; the order is found by workflow and key prefix.
    page.fill("#token", TOKEN)
    page.click("#login")
    page.wait_for_selector("[data-testid=instances-table]")
    page.fill("#instance-filters input[name=wf]", ORDER_WF)
    page.fill("#instance-filters input[name=prefix]", f"console-{run}")
    page.click("#search")
    page.wait_for_selector(f"tr[data-key='{order}']")
    assert page.locator("#counts [data-status=COMPLETED] b").inner_text() == "1"
    assert page.locator("#counts [data-status=ALL] b").inner_text() == "1"
    # The list of everything for the screenshot: both workflows.
    page.fill("#instance-filters input[name=wf]", "")
    page.click("#search")
    page.wait_for_selector(f"tr[data-key='{waiting}']")
    _shot(page, "console-instances.png")

    # Its timeline: started, four checkpoints, completed; executions link to n8n.
    page.click(f"a:text-is('{order}')")
    page.wait_for_selector("[data-testid=timeline]")
    kinds = _kinds(page)
    assert kinds[0] == "started" and kinds[-1] == "completed" and kinds.count("checkpoint") == 4, kinds
    link = page.locator("[data-testid=timeline] tr[data-kind=started] a").get_attribute("href")
    inst = sidecar.instance(ORDER_WF, order)
    assert inst is not None
    assert link == f"{stack.n8n.url}/workflow/{ORDER_WF}/executions/{inst.created_by_execution_id}", link

    # A diff of the first and the last checkpoint, computed in the browser.
    page.check("input[aria-label='diff from #1']")
    page.check("input[aria-label='diff to #4']")
    page.click("#diff")
    page.wait_for_selector("[data-testid=diff]")
    diff = page.inner_text("[data-testid=diff]")
    first = json.loads(sidecar.checkpoints.GetCheckpoint(checkpoint_pb2.GetCheckpointRequest(
        workflow_id=ORDER_WF, instance_key=order, sequence=1, include_state=True), metadata=sidecar.md,
        timeout=5).checkpoint.state_json)
    last = sidecar.latest_state(ORDER_WF, order)
    for added in sorted(set(last) - set(first)):
        assert f"+ $.{added}:" in diff, (added, diff)
    # The shot shows the actions, the timeline and the diff.
    page.evaluate("document.getElementById('actions').scrollIntoView({block: 'start'})")
    _shot(page, "console-timeline.png")

    # Cancel with confirmation: backing out changes nothing; confirming records actor and reason.
    page.goto(f"{sidecar.http_url}/console/#/instance?wf={HTTP_WF}&key={waiting}")
    page.wait_for_selector("#cancel-instance")
    page.click("#cancel-instance")
    page.wait_for_selector("#confirm[open]")
    page.click("#confirm-cancel")
    page.wait_for_selector("#confirm:not([open])", state="attached")
    assert sidecar.instance(HTTP_WF, waiting).status == common_pb2.INSTANCE_STATUS_RUNNING  # type: ignore[union-attr]
    page.click("#cancel-instance")
    page.fill("#confirm-actor", "ops:e2e")
    page.fill("#confirm-reason", "duplicate order, cancelled from the console")
    page.click("#confirm-ok")
    page.wait_for_selector("[data-testid=timeline] tr[data-kind=cancelled]")
    row = page.inner_text("[data-testid=timeline] tr[data-kind=cancelled]")
    assert "ops:e2e" in row and "duplicate order, cancelled from the console" in row, row
    assert _kinds(page)[-1] == "cancelled"

    cancelled = sidecar.instance(HTTP_WF, waiting)
    assert cancelled is not None and cancelled.status == common_pb2.INSTANCE_STATUS_CANCELLED
    events = audit_pb2_grpc.AuditServiceStub(sidecar.channel).ListInstanceEvents(
        audit_pb2.ListInstanceEventsRequest(workflow_id=HTTP_WF, instance_key=waiting), metadata=sidecar.md,
        timeout=5).events
    assert (events[-1].kind, events[-1].actor, events[-1].detail) == (
        "cancelled", "ops:e2e", "duplicate order, cancelled from the console")
    REPORT.add("console: login, timeline, diff, cancel (browser)", 2, 1, 0, time.monotonic() - t0,
               note="wrong token refused; cancel confirmed with actor and reason")


def _login(page: Any, base_url: str) -> None:
    """Logs in unless this tab already holds the token."""
    page.goto(f"{base_url}/console/")
    if page.evaluate("sessionStorage.getItem('durable.console.token')") is None:
        page.fill("#token", TOKEN)
        page.click("#login")
    page.wait_for_selector("[data-testid=instances-table], [data-testid=no-instances]")


def test_console_versions_node_diff_move_with_dry_run_and_keys(stack: Stack, page: Any) -> None:
    t0 = time.monotonic()
    sidecar = stack.sidecar
    install_http_face_workflow(stack)
    run = uuid.uuid4().hex[:6]
    moved, order = f"console-{run}-move", f"console-{run}-keys"
    # An instance bound to no version yet, then two versions of its workflow: the second changes
    # one node and adds one.
    post_http_face_order(stack, moved, 10, complete=False)
    v1 = copy.deepcopy(http_face_workflow(sidecar.http_url))
    v2 = copy.deepcopy(v1)
    v2["nodes"][2]["parameters"]["options"] = {"timeout": 5000}
    v2["nodes"].append({"id": str(uuid.uuid4()), "name": "Audit Copy", "type": "n8n-nodes-base.noOp",
                        "typeVersion": 1, "position": [880, 0], "parameters": {}})
    versions = version_pb2_grpc.VersionServiceStub(sidecar.channel)
    numbers = []
    for definition, label in ((v1, "1.0.0"), (v2, "1.1.0")):
        reply = versions.RegisterVersion(version_pb2.RegisterVersionRequest(
            workflow_id=HTTP_WF, definition_json=json.dumps(definition).encode(), label=label, actor="e2e",
            note=f"console test {run}"), metadata=sidecar.md, timeout=10)
        numbers.append(reply.version.version)
    old, new = numbers

    _login(page, sidecar.http_url)
    page.goto(f"{sidecar.http_url}/console/#/versions?wf={HTTP_WF}")
    page.wait_for_selector("[data-testid=versions-table]")
    page.check(f"input[aria-label='old {old}']")
    page.check(f"input[aria-label='new {new}']")
    page.click("#version-diff-button")
    page.wait_for_selector("[data-testid=node-diff]")
    node_diff = page.inner_text("[data-testid=node-diff]")
    assert "+ Audit Copy (added)" in node_diff and "~ Save Checkpoints (changed: parameters)" in node_diff, node_diff
    assert node_diff.count("\n") == 1, node_diff  # nothing else differs

    # Move the running instance to the newer version: the dialog insists on a dry run first.
    page.goto(f"{sidecar.http_url}/console/#/instance?wf={HTTP_WF}&key={moved}")
    page.click("#move-instance")
    page.wait_for_selector("#confirm[open] #move-target")
    page.select_option("#move-target", str(new))
    page.fill("#confirm-actor", "ops:e2e")
    page.fill("#confirm-reason", "needs the audit copy")
    page.click("#confirm-ok")
    page.wait_for_selector("#confirm-error:not([hidden])")
    assert "dry run" in page.inner_text("#confirm-error").lower()
    assert sidecar.instance(HTTP_WF, moved).bound_version == 0  # type: ignore[union-attr]
    page.click("#move-dry-run")
    page.wait_for_selector("#move-preview li")
    assert f"{moved}: version 0 → {new}" in page.inner_text("#move-preview")
    assert sidecar.instance(HTTP_WF, moved).bound_version == 0  # type: ignore[union-attr]  # a dry run moves nothing
    page.click("#confirm-ok")
    page.wait_for_selector("[data-testid=timeline] tr[data-kind=moved]")
    assert "needs the audit copy" in page.inner_text("[data-testid=timeline] tr[data-kind=moved]")
    assert sidecar.instance(HTTP_WF, moved).bound_version == new  # type: ignore[union-attr]
    moves = [e for e in sidecar.change_log(HTTP_WF) if e.kind == version_pb2.CHANGE_KIND_INSTANCE_MOVED]
    assert [(e.instance_key, e.to_version, e.actor, e.reason) for e in moves] == [
        (moved, new, "ops:e2e", "needs the audit copy")], moves

    # An order's idempotency keys: the Guard's default key is the instance key, one per scope.
    assert stack.post_order(order, amount=7.0) == 200
    wait_until("the order to complete", lambda: (i := sidecar.instance(ORDER_WF, order)) is not None
               and i.status == common_pb2.INSTANCE_STATUS_COMPLETED, 180)
    page.goto(f"{sidecar.http_url}/console/#/instance?wf={ORDER_WF}&key={order}")
    page.wait_for_selector("[data-testid=keys-table]")
    keys = page.locator("[data-testid=keys-table] tbody tr").all_inner_texts()
    scopes = sorted(row.split("\t")[0] for row in keys)
    assert scopes == ["coupon", "inventory", "payment", "shipping"] and all("completed" in r for r in keys), keys
    page.goto(f"{sidecar.http_url}/console/#/keys?prefix={order}&scope=payment")
    page.wait_for_selector("[data-testid=keys-table]")
    assert page.locator("[data-testid=keys-table] tbody tr").count() == 1
    REPORT.add("console: versions diff, move with dry run, keys", 2, 1, 0, time.monotonic() - t0,
               note="node diff in the browser; move refused before its dry run")


def test_console_retry_a_failed_instance_and_resume_a_parked_one(stack: Stack, page: Any) -> None:
    """The events-and-failures actions: Retry (FAILED → RUNNING) and Resume now (a wake-up ends at once)."""
    t0 = time.monotonic()
    sidecar = stack.sidecar
    install_http_face_workflow(stack)
    run = uuid.uuid4().hex[:6]
    failed, parked = f"console-{run}-failed", f"console-{run}-parked"
    for key in (failed, parked):
        post_http_face_order(stack, key, 5, complete=False)
    instances = instance_pb2_grpc.InstanceServiceStub(sidecar.channel)
    execution = sidecar.instance(HTTP_WF, failed).created_by_execution_id  # type: ignore[union-attr]
    instances.FailInstance(instance_pb2.FailInstanceRequest(workflow_id=HTTP_WF, instance_key=failed,
                                                            execution_id=execution, error_message="card declined"),
                           metadata=sidecar.md, timeout=5)
    parked_by = sidecar.instance(HTTP_WF, parked).created_by_execution_id  # type: ignore[union-attr]
    instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(workflow_id=HTTP_WF, instance_key=parked,
                                                                execution_id=parked_by, delay_seconds=86_400),
                             metadata=sidecar.md, timeout=5)

    _login(page, sidecar.http_url)
    for key, button, kind, reason in ((failed, "#retry-instance", "retried", "card replaced by the customer"),
                                      (parked, "#resume-instance", "resumed_by_operator", "no need to wait a day")):
        page.goto(f"{sidecar.http_url}/console/#/instance?wf={HTTP_WF}&key={key}")
        page.wait_for_selector(button)
        page.click(button)
        page.fill("#confirm-actor", "ops:e2e")
        page.fill("#confirm-reason", reason)
        page.click("#confirm-ok")
        page.wait_for_selector(f"[data-testid=timeline] tr[data-kind={kind}]")
        assert reason in page.inner_text(f"[data-testid=timeline] tr[data-kind={kind}]")
        events = audit_pb2_grpc.AuditServiceStub(sidecar.channel).ListInstanceEvents(
            audit_pb2.ListInstanceEventsRequest(workflow_id=HTTP_WF, instance_key=key), metadata=sidecar.md,
            timeout=5).events
        last = events[-1]
        assert (last.kind, last.actor) == (kind, "ops:e2e") and reason in last.detail, events
    retried = sidecar.instance(HTTP_WF, failed)
    assert retried is not None and retried.status == common_pb2.INSTANCE_STATUS_RUNNING
    resumed = sidecar.instance(HTTP_WF, parked)
    assert resumed is not None and resumed.status == common_pb2.INSTANCE_STATUS_RUNNING
    # Due now instead of in a day (same machine's clock; an hour of slack).
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    assert not resumed.HasField("wake_at") or resumed.wake_at.ToDatetime(tzinfo=dt.UTC) < soon, resumed
    REPORT.add("console: retry and resume (browser)", 2, 0, 0, time.monotonic() - t0,
               note="RecoveryService through the confirmation dialog")


def test_console_limits_show_each_keys_holders_and_waiters_in_order(stack: Stack, page: Any) -> None:
    """The Limits page (issue 43): a concurrency limit's key with its holder and its waiters, oldest first, each
    linked to its instance; the kind filter narrows the list."""
    from durable.v1 import limits_pb2, limits_pb2_grpc

    t0 = time.monotonic()
    sidecar = stack.sidecar
    run = uuid.uuid4().hex[:6]
    name, wf = f"console-{run}-crm", "consoleLimits"
    keys = [f"console-{run}-lim-{i}" for i in range(3)]
    instances = instance_pb2_grpc.InstanceServiceStub(sidecar.channel)
    limits = limits_pb2_grpc.LimitServiceStub(sidecar.channel)
    outcomes = []
    for i, key in enumerate(keys):
        instances.StartOrResume(instance_pb2.StartOrResumeRequest(workflow_id=wf, instance_key=key,
                                                                  execution_id=f"exec-{run}-{i}"),
                                metadata=sidecar.md, timeout=5)
        outcomes.append(limits.AcquireSlot(limits_pb2.AcquireSlotRequest(
            workflow_id=wf, instance_key=key, execution_id=f"exec-{run}-{i}", limit_name=name,
            limit_key="customer-7", max_holders=1), metadata=sidecar.md, timeout=5).outcome)
    assert outcomes == [limits_pb2.ACQUIRE_OUTCOME_ACQUIRED] + [limits_pb2.ACQUIRE_OUTCOME_WAITING] * 2

    _login(page, sidecar.http_url)
    page.goto(f"{sidecar.http_url}/console/#/limits?name={name}")
    page.wait_for_selector("[data-testid=limits-table]")
    rows = page.locator("[data-testid=limits-table] tbody tr").all_inner_texts()
    assert len(rows) == 1, rows
    cells = rows[0].split("\t")
    assert cells[:5] == ["concurrency", name, "customer-7", "1", "2"], cells
    entries = page.locator("[data-testid=limits-table] ul.entries li").all_inner_texts()
    assert [e.split()[0] for e in entries] == ["holding", "waiting", "waiting"], entries
    assert [e.split()[1] for e in entries] == keys, entries
    _shot(page, "console-limits.png")
    page.click(f"[data-testid=limits-table] a:has-text('{keys[1]}')")
    page.wait_for_selector("[data-testid=timeline]")
    assert "limit_waiting" in _kinds(page)
    page.goto(f"{sidecar.http_url}/console/#/limits?name={name}&kind=RATE")
    page.wait_for_selector("text=No limit key matches.")
    REPORT.add("console: limits page (browser)", 3, 0, 0, time.monotonic() - t0,
               note="a key's holder and its two waiters in order, linked to their instances")


def test_console_polish_found_by_a_new_user(stack: Stack, page: Any) -> None:
    """Issue 44's console defects, each checked: no navigation on the log-in page; the namespace shown; a
    Resume Trigger's claim token shown short; an id that is not an n8n execution not linked; a completed
    instance without its past "Last error"; a version that was never registered said so; the Versions page
    listing the workflows; a timeline that says when it shows only part of an instance's history."""
    t0 = time.monotonic()
    sidecar = stack.sidecar
    run = uuid.uuid4().hex[:6]
    wf = f"consolePolish{run}"
    claimed, done, long_key = f"polish-{run}-claimed", f"polish-{run}-done", f"polish-{run}-long"
    instances = instance_pb2_grpc.InstanceServiceStub(sidecar.channel)
    md = sidecar.md

    def start(key: str, execution: str) -> None:
        instances.StartOrResume(instance_pb2.StartOrResumeRequest(workflow_id=wf, instance_key=key,
                                                                  execution_id=execution), metadata=md, timeout=5)

    # Held by a Resume Trigger's claim (the token the lease owner shows until an execution takes it over).
    start(claimed, "9001")
    instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(workflow_id=wf, instance_key=claimed,
                                                                execution_id="9001", delay_seconds=0),
                             metadata=md, timeout=5)
    got = instances.ClaimResumable(instance_pb2.ClaimResumableRequest(workflow_ids=[wf], claimant="e2e-trigger",
                                                                      max_instances=5),
                                   metadata=md, timeout=5)
    token = next(r.claim_token for r in got.instances if r.instance.instance_key == claimed)
    assert token.startswith("claim:") and len(token) > 40, token
    # Run by a script (execution ids that are not n8n's), failed once under the retry policy, then completed.
    start(done, "ops-script-7")
    instances.FailInstance(instance_pb2.FailInstanceRequest(workflow_id=wf, instance_key=done,
                                                            execution_id="ops-script-7",
                                                            error_message="lease lapsed while the CRM was down",
                                                            retry=True), metadata=md, timeout=5)
    start(done, "ops-script-8")
    finished = instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=wf, instance_key=done, execution_id="ops-script-8"), metadata=md, timeout=5).instance
    assert finished.last_error == "lease lapsed while the CRM was down"  # kept by the sidecar; the console hides it
    # More checkpoints than the console reads per source (2,000).
    start(long_key, "9002")
    for i in range(2001):
        sidecar.checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[
            checkpoint_pb2.SaveCheckpointItem(workflow_id=wf, instance_key=long_key, step_name=f"step-{i}",
                                              state_json=b'{"i": %d}' % i, execution_id="9002",
                                              node_name="Durable Checkpoint")]), metadata=md, timeout=5)
    namespace = audit_pb2_grpc.AuditServiceStub(sidecar.channel).GetCaller(audit_pb2.GetCallerRequest(),
                                                                           metadata=md, timeout=5).namespace

    # The log-in page shows no navigation and no Log out (a new tab: no token yet).
    tab = page.context.new_page()
    try:
        tab.goto(f"{sidecar.http_url}/console/")
        tab.wait_for_selector("#token")
        assert not tab.locator("#nav").is_visible() and not tab.locator("#logout").is_visible()
    finally:
        tab.close()

    _login(page, sidecar.http_url)
    page.wait_for_selector("#namespace b")
    assert page.inner_text("#namespace b") == namespace and page.locator("#nav").is_visible()

    # The claim token is shown short, whole in its tooltip; script ids are text, not links into n8n.
    page.goto(f"{sidecar.http_url}/console/#/instance?wf={wf}&key={claimed}")
    page.wait_for_selector("[data-testid=timeline]")
    owner = page.locator("dl.facts dd [data-claim]")
    assert owner.inner_text() == "Resume Trigger claim" and owner.get_attribute("title") == token
    assert token not in page.inner_text("[data-testid=timeline]")
    assert page.locator("dl.facts dt:text-is('Bound version') + dd").inner_text() == "not registered"
    page.goto(f"{sidecar.http_url}/console/#/instance?wf={wf}&key={done}")
    page.wait_for_selector("[data-testid=timeline] tr[data-kind=completed]")
    assert page.locator("[data-testid=timeline] a").count() == 0  # no link to an n8n execution that isn't one
    assert "ops-script-8" in page.inner_text("[data-testid=timeline] tr[data-kind=completed]")
    facts = page.inner_text("dl.facts")
    assert "Last error" not in facts and "CRM was down" not in facts, facts
    assert page.locator("[data-testid=timeline-truncated]").count() == 0

    # A timeline cut at 2,000 checkpoints says so.
    page.goto(f"{sidecar.http_url}/console/#/instance?wf={wf}&key={long_key}")
    page.wait_for_selector("[data-testid=timeline-truncated]")
    assert "the first 2000 checkpoints" in page.inner_text("[data-testid=timeline-truncated]")

    # The Versions page lists the workflows (this one: no version registered, three instances).
    page.goto(f"{sidecar.http_url}/console/#/versions")
    page.wait_for_selector(f"[data-testid=workflows-table] tr[data-wf='{wf}']")
    cells = page.locator(f"[data-testid=workflows-table] tr[data-wf='{wf}'] td").all_inner_texts()
    assert cells == [wf, "0", "none registered", "3"], cells
    _shot(page, "console-workflows.png")
    page.click(f"[data-testid=workflows-table] a:text-is('{wf}')")
    page.wait_for_selector("h1:has-text('Versions of')")
    REPORT.add("console: defects a new user found (browser)", 3, 0, 0, time.monotonic() - t0,
               note="log-in page, namespace, claim token, links, last error, version, workflows, cut timeline")


def test_console_filters_and_sorts_instances_by_search_fields(stack: Stack, page: Any) -> None:
    """Issue 44: an operator filters the instance list by search fields (a text equal, a number at least) and
    sorts it by one, largest first; the fields show in the list and on the instance's page."""
    t0 = time.monotonic()
    sidecar = stack.sidecar
    run = uuid.uuid4().hex[:6]
    wf = f"consoleSearch{run}"
    instances = instance_pb2_grpc.InstanceServiceStub(sidecar.channel)
    md = sidecar.md
    rows = {"a": {"tier": "gold", "amount": 120}, "b": {"tier": "gold", "amount": 80},
            "c": {"tier": "silver", "amount": 500}, "d": {"tier": "gold", "amount": 999.5}, "e": {}}
    for name, fields in rows.items():
        key = f"search-{run}-{name}"
        instances.StartOrResume(instance_pb2.StartOrResumeRequest(
            workflow_id=wf, instance_key=key, execution_id="9100",
            search_fields_json=json.dumps(fields).encode() if fields else b""), metadata=md, timeout=5)

    _login(page, sidecar.http_url)
    page.goto(f"{sidecar.http_url}/console/#/instances")
    page.wait_for_selector("#instance-filters")
    page.fill("#instance-filters input[name=wf]", wf)
    page.fill("#instance-filters input[name=sf]", "tier=gold, amount>=100")
    page.fill("#instance-filters input[name=sort]", "amount")
    page.check("#instance-filters input[name=desc]")
    page.click("#search")
    # The list shown before the search (every workflow's instances) is replaced: wait for the filtered one
    # (expect() polls; the console's CSP forbids a string predicate).
    rows_shown = page.locator("[data-testid=instances-table] tbody tr")
    expect(rows_shown.first).to_have_attribute("data-key", f"search-{run}-d", timeout=15_000)
    expect(rows_shown).to_have_count(2, timeout=15_000)
    keys = page.locator("[data-testid=instances-table] tbody tr").evaluate_all("rows => rows.map(r => r.dataset.key)")
    assert keys == [f"search-{run}-d", f"search-{run}-a"], keys
    assert page.locator("#counts [data-status=ALL] b").inner_text() == "2"
    fields = page.locator("[data-testid=instances-table] td.fields").all_inner_texts()
    assert fields == ["amount=999.5 · tier=gold", "amount=120 · tier=gold"], fields
    _shot(page, "console-search-fields.png")
    page.click(f"[data-testid=instances-table] a:text-is('search-{run}-a')")
    page.wait_for_selector("dl.facts")
    assert page.locator("dl.facts dt:text-is('Search fields') + dd").inner_text() == "amount=120 · tier=gold"
    # A condition the sidecar refuses is shown as its error, naming the field.
    page.goto(f"{sidecar.http_url}/console/#/instances?wf={wf}&sf=tier")
    page.wait_for_selector(".error")
    assert "search_fields[0]" in page.inner_text(".error")
    REPORT.add("console: filter and sort by search fields (browser)", 5, 0, 0, time.monotonic() - t0,
               note="text equal, number at least, sorted largest first, shown on the instance page")


def test_console_hides_what_a_read_token_may_not_do(stack: Stack, page: Any) -> None:
    """Issue 44's roles in the console: a read token sees the instance and its timeline but no action (the
    sidecar would refuse it: PERMISSION_DENIED), and its role beside the namespace; the admin token sees
    Cancel and Move."""
    t0 = time.monotonic()
    sidecar = stack.sidecar
    run = uuid.uuid4().hex[:6]
    wf, key = f"consoleRoles{run}", f"roles-{run}"
    instance_pb2_grpc.InstanceServiceStub(sidecar.channel).StartOrResume(instance_pb2.StartOrResumeRequest(
        workflow_id=wf, instance_key=key, execution_id="9100"), metadata=sidecar.md, timeout=5)
    tab = page.context.browser.new_context(viewport=VIEWPORT).new_page()  # a tab of its own: its own token
    try:
        tab.goto(f"{sidecar.http_url}/console/")
        tab.fill("#token", READ_TOKEN)
        tab.click("#login")
        tab.wait_for_selector("#namespace b")
        assert tab.get_attribute("#namespace", "data-role") == "read" and "read" in tab.inner_text("#namespace")
        tab.goto(f"{sidecar.http_url}/console/#/instance?wf={wf}&key={key}")
        tab.wait_for_selector("[data-testid=read-only]")
        assert tab.locator("#cancel-instance, #move-instance, #retry-instance, #resume-instance").count() == 0
        tab.goto(f"{sidecar.http_url}/console/#/instances?wf={wf}")
        tab.wait_for_selector("[data-testid=instances-table]")
        assert tab.locator("#bulk").count() == 0  # no bulk action for a read token either
        # What the page would have sent is refused by the sidecar for this token, whatever the client.
        refused = tab.evaluate("""async ([token, workflowId, instanceKey]) => {
            const r = await fetch('/durable.v1.InstanceService/CancelInstance', {method: 'POST',
              headers: {'Content-Type': 'application/json', 'Authorization': 'Bearer ' + token},
              body: JSON.stringify({workflowId, instanceKey, actor: 'ops:reader', reason: 'try'})});
            return [r.status, (await r.json()).code];
        }""", [READ_TOKEN, wf, key])
        assert refused == [403, "permission_denied"], refused
    finally:
        tab.context.close()
    _login(page, sidecar.http_url)
    page.goto(f"{sidecar.http_url}/console/#/instance?wf={wf}&key={key}")
    page.wait_for_selector("#cancel-instance")
    assert page.locator("#move-instance").count() == 1
    assert sidecar.instance(wf, key).status == common_pb2.INSTANCE_STATUS_RUNNING  # type: ignore[union-attr]
    REPORT.add("console: a read token sees no action (browser)", 1, 0, 0, time.monotonic() - t0,
               note="role beside the namespace; the sidecar answers 403 permission_denied")


def test_console_bulk_retry_with_its_preview_progress_and_result(stack: Stack, page: Any) -> None:
    """Issue 44: an operator narrows the instance list (workflow, status, a search field, the error text), previews
    what a bulk retry would take (the count and the first ones), starts it through the confirmation dialog, and
    follows it on its page to the end; each matching instance is retried once, the others are left alone."""
    t0 = time.monotonic()
    sidecar = stack.sidecar
    run = uuid.uuid4().hex[:6]
    wf = f"consoleBulk{run}"
    instances = instance_pb2_grpc.InstanceServiceStub(sidecar.channel)
    md = sidecar.md
    matching, others = [], []
    for n in range(36):
        key = f"bulk-{run}-{n:02d}"
        tier = "gold" if n % 3 else "silver"
        error = "payment API 503" if n % 4 else "card declined"
        instances.StartOrResume(instance_pb2.StartOrResumeRequest(
            workflow_id=wf, instance_key=key, execution_id="9100",
            search_fields_json=json.dumps({"tier": tier}).encode()), metadata=md, timeout=5)
        instances.FailInstance(instance_pb2.FailInstanceRequest(
            workflow_id=wf, instance_key=key, execution_id="9100", error_message=error), metadata=md, timeout=5)
        (matching if tier == "gold" and "503" in error else others).append(key)

    _login(page, sidecar.http_url)
    page.goto(f"{sidecar.http_url}/console/#/instances")
    page.wait_for_selector("#instance-filters")
    page.fill("#instance-filters input[name=wf]", wf)
    page.select_option("#instance-filters select[name=status]", "FAILED")
    page.fill("#instance-filters input[name=sf]", "tier=gold")
    page.fill("#instance-filters input[name=err]", "503")
    page.click("#search")
    page.wait_for_selector("[data-testid=instances-table] tbody tr")
    assert page.locator("#counts [data-status=ALL] b").inner_text() == str(len(matching))
    page.select_option("#bulk-action", "RETRY")
    page.click("#bulk-preview-button")
    page.wait_for_selector("[data-testid=bulk-count]")
    assert page.inner_text("[data-testid=bulk-count]").startswith(f"{len(matching)} instances match")
    sample = page.locator("[data-testid=bulk-sample] a").all_inner_texts()
    assert sample == sorted(matching)[:10], sample
    _shot(page, "console-bulk-preview.png")
    page.click("#bulk-start")
    page.fill("#confirm-actor", "ops:e2e")
    page.fill("#confirm-reason", "payment provider recovered")
    page.click("#confirm-ok")
    page.wait_for_selector("[data-testid=operation-status]")
    # The console's CSP forbids eval, so no wait_for_function with a string predicate: expect() polls without it.
    expect(page.locator("[data-testid=operation-status]")).to_have_text("completed", timeout=30_000)
    progress = page.inner_text("[data-testid=operation-progress]")
    assert progress == f"{len(matching)} of {len(matching)} taken · {len(matching)} acted on · 0 skipped", progress
    _shot(page, "console-bulk-operation.png")
    for key in matching:
        inst = sidecar.instance(wf, key)
        assert inst is not None and inst.status == common_pb2.INSTANCE_STATUS_RUNNING, (key, inst)
        events = audit_pb2_grpc.AuditServiceStub(sidecar.channel).ListInstanceEvents(
            audit_pb2.ListInstanceEventsRequest(workflow_id=wf, instance_key=key), metadata=md, timeout=5).events
        retried = [e for e in events if e.kind == "retried"]
        assert len(retried) == 1 and retried[0].actor == "ops:e2e" and "payment provider recovered" in \
            retried[0].detail, events
    for key in others:
        inst = sidecar.instance(wf, key)
        assert inst is not None and inst.status == common_pb2.INSTANCE_STATUS_FAILED, (key, inst)
    page.goto(f"{sidecar.http_url}/console/#/operations")
    page.wait_for_selector("[data-testid=operations-table]")
    assert "payment provider recovered" in page.inner_text("[data-testid=operations-table]")
    REPORT.add("console: bulk retry by filter (browser)", len(matching), 0, 0, time.monotonic() - t0,
               note="preview (count and sample), confirmation, progress to completed; the others untouched")


def test_console_replays_a_completed_instance_from_a_chosen_checkpoint(stack: Stack, page: Any) -> None:
    """Issue 44: Replay… on a completed instance's page forks it from the checkpoint chosen; the console opens the
    fork, whose timeline starts with the replay, and the original stays completed with a 'replayed' event."""
    t0 = time.monotonic()
    sidecar = stack.sidecar
    run = uuid.uuid4().hex[:6]
    wf, key = f"consoleReplay{run}", f"replay-{run}"
    instances = instance_pb2_grpc.InstanceServiceStub(sidecar.channel)
    checkpoints = checkpoint_pb2_grpc.CheckpointServiceStub(sidecar.channel)
    md = sidecar.md
    instances.StartOrResume(instance_pb2.StartOrResumeRequest(workflow_id=wf, instance_key=key, execution_id="9100"),
                            metadata=md, timeout=5)
    for step in ("paid", "reserved", "shipped"):
        checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[checkpoint_pb2.SaveCheckpointItem(
            workflow_id=wf, instance_key=key, step_name=step, state_json=json.dumps({"step": step}).encode(),
            execution_id="9100")]), metadata=md, timeout=5)
    instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(workflow_id=wf, instance_key=key,
                                                                    execution_id="9100"), metadata=md, timeout=5)
    _login(page, sidecar.http_url)
    page.goto(f"{sidecar.http_url}/console/#/instance?wf={wf}&key={key}")
    page.wait_for_selector("#replay-instance")
    page.click("#replay-instance")
    page.select_option("#replay-from", "2")
    page.fill("#confirm-actor", "ops:e2e")
    page.fill("#confirm-reason", "shipping had a bug")
    page.click("#confirm-ok")
    page.wait_for_selector(f"h1:has-text('{key}~r1')")
    page.wait_for_selector("[data-testid=timeline] tr[data-kind=started]")
    assert f"replay of {key} from checkpoint 2 (reserved)" in page.inner_text(
        "[data-testid=timeline] tr[data-kind=started]")
    fork = sidecar.instance(wf, f"{key}~r1")
    assert fork is not None and fork.last_sequence == 2 and fork.last_step == "reserved", fork
    original = sidecar.instance(wf, key)
    assert original is not None and original.status == common_pb2.INSTANCE_STATUS_COMPLETED
    events = audit_pb2_grpc.AuditServiceStub(sidecar.channel).ListInstanceEvents(
        audit_pb2.ListInstanceEventsRequest(workflow_id=wf, instance_key=key), metadata=md, timeout=5).events
    assert events[-1].kind == "replayed" and events[-1].actor == "ops:e2e", events
    REPORT.add("console: replay from a checkpoint (browser)", 1, 0, 0, time.monotonic() - t0,
               note="Replay… with the checkpoint chosen opens the fork <key>~r1")


def test_console_lists_a_checkpoints_files_and_downloads_them(stack: Stack, page: Any) -> None:
    """Issue 45: an instance's checkpoint with files shows "Files (n)"; the table names each file (property,
    name, type, size, hash) and Download saves the very bytes, through the console's token."""
    import hashlib

    from durable.v1 import common_pb2 as cpb
    from durable.v1 import files_pb2, files_pb2_grpc

    t0 = time.monotonic()
    sidecar = stack.sidecar
    run = uuid.uuid4().hex[:6]
    wf, key = f"consoleFiles{run}", f"files-{run}"
    md = sidecar.md
    pdf = b"%PDF-1.7\n" + os.urandom(30_000)
    digest = hashlib.sha256(pdf).hexdigest()
    files_pb2_grpc.FileServiceStub(sidecar.channel).UploadFile(iter([
        files_pb2.UploadFileRequest(header=files_pb2.UploadFileHeader(sha256=digest, size_bytes=len(pdf))),
        files_pb2.UploadFileRequest(chunk=pdf)]), metadata=md, timeout=10)
    instance_pb2_grpc.InstanceServiceStub(sidecar.channel).StartOrResume(instance_pb2.StartOrResumeRequest(
        workflow_id=wf, instance_key=key, execution_id="9100"), metadata=md, timeout=5)
    checkpoint_pb2_grpc.CheckpointServiceStub(sidecar.channel).SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(
        items=[checkpoint_pb2.SaveCheckpointItem(
            workflow_id=wf, instance_key=key, step_name="downloaded", state_json=b'{"invoice": "INV-9"}',
            execution_id="9100", files=[cpb.FileRef(property="data", file_name="Rechnung März.pdf",
                                                    mime_type="application/pdf", sha256=digest,
                                                    size_bytes=len(pdf))])]), metadata=md, timeout=5)
    _login(page, sidecar.http_url)
    page.goto(f"{sidecar.http_url}/console/#/instance?wf={wf}&key={key}")
    page.click("[data-testid=timeline] button[data-files='1']")
    page.wait_for_selector("[data-testid=files] tbody tr")
    row = page.inner_text("[data-testid=files] tbody tr")
    assert "data" in row and "Rechnung März.pdf" in row and "application/pdf" in row and "29.3 KiB" in row, row
    with page.expect_download() as info:
        page.click("[data-testid=files] button[data-download=data]")
    download = info.value
    assert download.suggested_filename == "Rechnung März.pdf", download.suggested_filename
    assert Path(download.path()).read_bytes() == pdf
    REPORT.add("console: a checkpoint's files (browser)", 1, 0, 0, time.monotonic() - t0,
               note="Files (1) on the timeline: name, type, size, hash; Download saves the same bytes")
