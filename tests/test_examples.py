"""The committed example workflows (examples/*.json): what examples/generate.py writes, wired consistently.

No n8n here (the e2e suite runs the examples in a real one): the JSON must be the generator's
output, every link must reach an existing node through an output the node has, and every Resume
Point step output must name a step some Save leaves running. A Save with the option Complete
Instance completes the instance in its own transaction, so no running instance ever stands at
its step: a step output for it could never fire, and nothing may follow it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))
PKG = "n8n-nodes-durable."


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_the_committed_examples_are_what_generate_py_writes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("examples_generate", ROOT / "examples" / "generate.py")
    assert spec is not None and spec.loader is not None
    generate: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    generate.HERE = tmp_path  # write into the test's folder, not over the committed files
    for writer in generate.WRITERS:
        writer()
    written = sorted(p.name for p in tmp_path.glob("*.json"))
    assert written == [p.name for p in EXAMPLES], "examples/*.json and generate.py's files differ"
    stale = [p.name for p in EXAMPLES if (tmp_path / p.name).read_text() != p.read_text()]
    assert stale == [], f"run `python examples/generate.py`: {stale} differ from its output"


def resume_point_outputs(params: dict[str, Any], on_error: str = "") -> list[str]:
    """The v2 Resume Point's outputs, in order (docs/nodes.md, "Resume Point"), then n8n's error output."""
    steps = [s.strip() for s in str(params.get("stepOutputs", "")).split(",") if s.strip()]
    outs = ["Start", "Resume", "Finished", "Busy", *steps]
    if params.get("versionMismatchOutput"):
        outs.append("Old Version")
    if params.get("waitOutputs"):
        outs += ["Event", "Timed Out"]
    if params.get("differentDelivery") == "output":
        outs.append("Different")
    if on_error == "continueErrorOutput":
        outs.append("Error")
    return outs


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_link_and_step_output_of_an_example_can_be_taken(path: Path) -> None:
    wf = load(path)
    nodes = {n["name"]: n for n in wf["nodes"]}
    assert len(nodes) == len(wf["nodes"]), "two nodes share a name"
    for src, conns in wf["connections"].items():
        assert src in nodes, f"a link leaves {src!r}, which is not a node"
        for out in conns["main"]:
            for dst in out:
                assert dst["node"] in nodes, f"{src} links to {dst['node']!r}, which is not a node"
    saves = [n for n in nodes.values()
             if n["type"] == PKG + "durableCheckpoint" and n["parameters"].get("operation") == "save"]
    completing = {n["name"] for n in saves if n["parameters"].get("options", {}).get("completeInstance")}
    left_running = {n["parameters"]["stepName"] for n in saves if n["name"] not in completing}
    for name in completing:
        assert not any(wf["connections"].get(name, {}).get("main", [])), (
            f"{name} completes the instance: nothing may run after it")
    for name, node in nodes.items():
        if node["type"] != PKG + "resumePoint":
            continue
        outs = resume_point_outputs(node["parameters"], node.get("onError", ""))
        linked = wf["connections"].get(name, {}).get("main", [])
        assert len(linked) <= len(outs), f"{name} links output {len(linked) - 1}; it has {len(outs)}: {outs}"
        for step in outs[4:]:
            if step in ("Old Version", "Event", "Timed Out", "Different", "Error"):
                break
            assert step in left_running, (
                f"{name} has a step output {step!r}, but no Save leaves a running instance at that step")


def test_the_order_examples_end_with_the_last_save_not_a_complete_node() -> None:
    """The cheapest documented ending: the last Save completes the instance (one node and one call less)."""
    for name, last_save in (("order-tracking.json", "Save Couponed"), ("renewal-reminder.json", "Save Reminded"),
                            ("order-delivery.json", "Save Notified")):
        wf = load(ROOT / "examples" / name)
        ops = [n["parameters"].get("operation") for n in wf["nodes"] if n["type"] == PKG + "durableCheckpoint"]
        assert "complete" not in ops, f"{name} still has a Complete Instance node"
        (save,) = [n for n in wf["nodes"] if n["name"] == last_save]
        assert save["parameters"]["options"] == {"completeInstance": True}, (name, save["parameters"])


@pytest.mark.parametrize("name", ["order-tracking.json", "renewal-reminder.json", "order-delivery.json",
                                  "crm-sync.json", "chat-debounce.json"])
def test_every_webhook_example_has_the_door(name: str) -> None:
    """docs/intake.md, The door: a body that can never make an order is answered 400 before the Resume Point;
    the Resume Point's error output answers the status its error item names (never a fixed 4xx: an
    unreachable sidecar must stay a 503 the sender retries), then fails the execution."""
    wf = load(ROOT / "examples" / name)
    nodes = {n["name"]: n for n in wf["nodes"]}
    links = wf["connections"]
    (check,) = [d["node"] for d in links["Webhook"]["main"][0]]
    assert nodes[check]["type"] == "n8n-nodes-base.if"
    (rp,) = [d["node"] for d in links[check]["main"][0]]
    (bad,) = [d["node"] for d in links[check]["main"][1]]
    assert nodes[rp]["type"] == PKG + "resumePoint" and nodes[rp]["typeVersion"] == 2.1
    assert nodes[rp]["parameters"]["versionLabel"], "no Version Label: the console would show none"
    assert nodes[bad]["parameters"]["options"]["responseCode"] == 400
    assert nodes[rp]["onError"] == "continueErrorOutput"
    regular = len(resume_point_outputs(nodes[rp]["parameters"]))
    outs = links[rp]["main"]
    assert len(outs) == regular + 1, "the last link must be the error output"
    (answer,) = [d["node"] for d in outs[regular]]
    assert nodes[answer]["parameters"]["options"]["responseCode"] == "={{ $json.details.httpStatus }}"
    (fail,) = [d["node"] for d in links[answer]["main"][0]]
    assert nodes[fail]["type"] == "n8n-nodes-base.stopAndError"
