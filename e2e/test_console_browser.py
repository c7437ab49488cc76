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

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ORDER_WF, REPORT, Stack
from durable.v1 import audit_pb2, audit_pb2_grpc, checkpoint_pb2, common_pb2
from harness import REPO, TOKEN, wait_until
from test_http_request_node import HTTP_WF, install_http_face_workflow, post_http_face_order

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
