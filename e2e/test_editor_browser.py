"""The n8n editor in a real browser (Playwright driving Debian's chromium): our nodes are found, the example is readable.

Logs into the editor the e2e stack started, searches the node panel for each of the words a
user would try ("durable", "checkpoint", "idempotency", "resume") and expects all four of our
nodes each time, then opens the order example at fit-to-screen and checks that no output label
on the canvas is cut: every label's text fits its box (n8n cuts a label wider than 96 CSS px
with an ellipsis) and, where the node type declares fixed output names, the label is that name.
The same for the flow-control examples (crm-sync, chat-debounce). A screenshot of each canvas goes to
e2e/results/ (DURABLE_E2E_CANVAS_PNG_DIR chooses the folder, e.g. docs/images to refresh the ones in the
docs).

Playwright never downloads a browser here: `make browser-setup` installs Debian's chromium.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ORDER_WF, REPORT, Stack
from harness import OWNER_EMAIL, OWNER_PASSWORD, REPO

CHROMIUM = "/usr/bin/chromium"
OUR_NODES = {"Resume Point", "Durable Checkpoint", "Idempotency Guard", "Resume Trigger", "Durable Instance",
             "Durable Limit"}
SEARCH_WORDS = ("durable", "checkpoint", "idempotency", "resume")
VIEWPORT = {"width": 1600, "height": 1000}

playwright_api = pytest.importorskip("playwright.sync_api", reason="run `make browser-setup` (make e2e does)")


@pytest.fixture(scope="module")
def editor(stack: Stack) -> Iterator[Any]:
    """A chromium page logged into the stack's n8n as its owner."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run `make browser-setup` (make e2e does)"
    with playwright_api.sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where chromium refuses its sandbox.
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_context(viewport=VIEWPORT).new_page()
            page.set_default_timeout(60_000)
            page.goto(f"{stack.n8n.url}/signin")
            page.fill("input[name=emailOrLdapLoginId]", OWNER_EMAIL)
            page.fill("input[name=password]", OWNER_PASSWORD)
            page.click("[data-test-id=form-submit-button]")
            page.wait_for_url("**/home/**")
            yield page
        finally:
            browser.close()


def open_workflow(page: Any, stack: Stack, workflow_id: str) -> None:
    page.goto(f"{stack.n8n.url}/workflow/{workflow_id}")
    page.wait_for_selector("[data-test-id=canvas-node]")
    page.wait_for_load_state("networkidle")


def test_editor_node_panel_finds_all_six_nodes_for_each_word(stack: Stack, editor: Any) -> None:
    t0 = time.monotonic()
    open_workflow(editor, stack, ORDER_WF)
    editor.click("[data-test-id=node-creator-plus-button]")
    search = editor.locator("input[data-test-id=node-creator-search-bar]")
    found: dict[str, list[str]] = {}
    for word in SEARCH_WORDS:
        search.fill(word)
        # The list filters as one types: give it up to 10 s to show all six (a loaded machine is slow).
        deadline = time.monotonic() + 10
        while True:
            editor.wait_for_timeout(300)
            found[word] = editor.locator("[data-test-id=node-creator-item-name]").all_inner_texts()
            if OUR_NODES <= set(found[word]) or time.monotonic() > deadline:
                break
    editor.keyboard.press("Escape")
    missing = {word: sorted(OUR_NODES - set(names)) for word, names in found.items() if OUR_NODES - set(names)}
    assert not missing, f"the node panel search misses our nodes: {missing}; it showed {found}"
    REPORT.add("browser: node panel finds all 6 nodes for 4 words", 0, 0, 0, time.monotonic() - t0,
               note=", ".join(SEARCH_WORDS))


def declared_output_names(page: Any, stack: Stack, workflow: dict[str, Any]) -> dict[str, list[str]]:
    """Node name -> its type's fixed outputNames (nodes whose outputs are computed are left out).

    Fails when n8n does not know a node's type and version: the canvas would draw it as an
    unknown node without outputs, and a label check would pass on nothing.
    """
    types = page.evaluate("async (url) => (await fetch(url)).json()", f"{stack.n8n.url}/types/nodes.json")
    out: dict[str, list[str]] = {}
    unknown = []
    for node in workflow["nodes"]:
        for t in types:
            versions = t["version"] if isinstance(t["version"], list) else [t["version"]]
            if t["name"] == node["type"] and node.get("typeVersion", 1) in versions:
                if isinstance(t.get("outputNames"), list):
                    out[node["name"]] = [str(n) for n in t["outputNames"]]
                break
        else:
            unknown.append(f"{node['name']} ({node['type']} v{node.get('typeVersion', 1)})")
    assert not unknown, f"n8n does not know these nodes of the example (is the packed package current?): {unknown}"
    return out


# The examples whose canvas the docs show: (workflow id, file, its screenshot's name in e2e/results/).
CANVASES = [(ORDER_WF, "order-tracking.json", "order-example-canvas.png"),
            ("durableCrmSync", "crm-sync.json", "crm-sync-canvas.png"),
            ("durableChatDebounce", "chat-debounce.json", "chat-debounce-canvas.png")]


@pytest.mark.parametrize(("workflow_id", "file", "png"), CANVASES, ids=[c[0] for c in CANVASES])
def test_editor_example_shows_every_output_label_whole(stack: Stack, editor: Any, workflow_id: str, file: str,
                                                       png: str) -> None:
    t0 = time.monotonic()
    if workflow_id not in stack.workflows:  # imported unpublished: its webhooks stay off this n8n
        from conftest import customise
        from harness import publish_workflow

        wf = customise(json.loads((REPO / "examples" / file).read_text()), stack.services.url)
        publish_workflow(stack.n8n, wf, publish=False)
        stack.workflows[workflow_id] = wf
    open_workflow(editor, stack, workflow_id)
    # What a user sees first: no side panel, the whole workflow fitted to the screen.
    for close in editor.locator("[data-test-id=suggested-actions-close]").all():  # the Production Checklist
        if close.is_visible():
            close.click()
    editor.locator("[data-test-id=zoom-to-fit]").click()
    editor.wait_for_timeout(1000)

    labels: list[dict[str, Any]] = editor.evaluate("""() =>
        [...document.querySelectorAll('[data-test-id=canvas-node-output-handle]')].flatMap(handle => {
            const label = handle.querySelector('[class*=outputLabel]');
            if (!label) return [];
            const style = getComputedStyle(label);
            return [{node: handle.dataset.nodeName, index: Number(handle.dataset.index), text: label.textContent,
                     scrollWidth: label.scrollWidth, clientWidth: label.clientWidth, maxWidth: style.maxWidth}];
        })""")
    assert labels, "no output label found on the canvas (did n8n's canvas markup change?)"
    workflow = stack.workflows[workflow_id]
    declared = declared_output_names(editor, stack, workflow)
    cut = [f"{lb['node']} output {lb['index']} \"{lb['text']}\": {lb['scrollWidth']} px in a box of "
           f"{lb['clientWidth']} px (max-width {lb['maxWidth']})"
           for lb in labels if lb["scrollWidth"] > lb["clientWidth"] or "…" in lb["text"]]
    renamed = [f"{lb['node']} output {lb['index']}: canvas shows \"{lb['text']}\", the node type declares "
               f"\"{declared[lb['node']][lb['index']]}\""
               for lb in labels if lb["node"] in declared and lb["index"] < len(declared[lb["node"]])
               and lb["text"] != declared[lb["node"]][lb["index"]]]

    folder = Path(os.environ.get("DURABLE_E2E_CANVAS_PNG_DIR", str(REPO / "e2e" / "results")))
    shot = (folder if folder.is_absolute() else REPO / folder) / png
    shot.parent.mkdir(parents=True, exist_ok=True)
    editor.screenshot(path=str(shot))
    widest = max(labels, key=lambda lb: lb["scrollWidth"])
    print(f"\n{len(labels)} output labels; widest \"{widest['text']}\" {widest['scrollWidth']} px "
          f"(max-width {widest['maxWidth']}); screenshot {shot}")
    assert not cut, "output labels cut on the canvas:\n" + "\n".join(cut)
    assert not renamed, "\n".join(renamed)
    REPORT.add(f"browser: {file}, no output label cut", 0, 0, 0, time.monotonic() - t0,
               note=f"{len(labels)} labels, widest {widest['scrollWidth']} px of {widest['maxWidth']}")

