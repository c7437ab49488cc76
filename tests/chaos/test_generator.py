"""The chaos generator (chaos/generator.py) without a stack: the same seed gives the same case, every generated
workflow is wired as the README says, and the expectations follow the workflow."""

from __future__ import annotations

import base64
import json
from itertools import pairwise
from typing import Any

from chaos import faults
from chaos.blocks import BLOCKS, signal_request
from chaos.generator import delivery_body, generate
from chaos.model import LAST_NODE, RESPOND_NODE, Case, Segment

URL = "http://127.0.0.1:9"


def body_entry(seg: Segment) -> str:
    """The first node of a segment after any n8n Wait: its sub-workflow's runner, its Split Out, its Durable Limit
    gate (Enter Section or Rate Limit) or its Claim."""
    if seg.limit:
        return f"{'Rate' if seg.limit == 'rate' else 'Enter'} {seg.step}"
    return {"sub": f"Run {seg.step}", "lines": f"Lines {seg.step}"}.get(seg.shape, f"Claim {seg.step}")


def links(wf: dict[str, Any]) -> list[tuple[str, int, str, int]]:
    return [(src, out, dst["node"], dst["index"]) for src, conns in wf["connections"].items()
            for out, targets in enumerate(conns["main"]) for dst in targets]


def test_a_seed_and_an_index_give_the_same_case_whatever_else_ran() -> None:
    first = generate(41, 3, URL)
    generate(41, 2, URL)
    again = generate(41, 3, URL)
    assert json.dumps(first.workflows) == json.dumps(again.workflows)
    assert first.plan() == again.plan()
    assert json.dumps(generate(42, 3, URL).plan()) != json.dumps(first.plan())


def test_every_generated_workflow_is_wired_to_nodes_it_has_and_answers_its_sender() -> None:
    for index in range(60):
        case = generate(7, index, URL)
        for wf in case.workflows:
            names = {n["name"] for n in wf["nodes"]}
            assert len(names) == len(wf["nodes"]), wf["id"]
            for src, _out, dst, _in in links(wf):
                assert src in names and dst in names, (wf["id"], src, dst)
        main = case.workflows[-1]
        rp_outputs = {out: dst for src, out, dst, _ in links(main) if src == "Resume Point"}
        hook = next(n for n in main["nodes"] if n["type"] == "n8n-nodes-base.webhook")
        assert hook["parameters"]["responseMode"] == case.shape.respond
        if case.shape.respond == RESPOND_NODE:
            assert rp_outputs[0] == "Accepted"
        else:
            assert case.shape.respond == LAST_NODE and rp_outputs[2] == rp_outputs[3] == "Already Received"
        # Start, Resume, (Finished, Busy,) then one step output per segment but the last, each into the next.
        segments = case.shape.segments
        steps = set(range(4, 4 + len(segments) - 1))
        event = {4 + len(segments) - 1} if case.shape.event_after else set()   # Wait Outputs: Event (Timed Out unused)
        assert set(rp_outputs) == ({0, 1} | steps | event | ({2, 3} if case.shape.respond == LAST_NODE else set())), \
            rp_outputs

        def entry(seg: Segment) -> str:
            if seg.wait_s:
                return f"Wait {seg.step}"
            return body_entry(seg)

        for out in steps:
            before, nxt = segments[out - 4], segments[out - 3]
            # After line items, their step leads back to their lines (the saved ones leave by Done Before).
            if before.number == case.shape.event_after:
                assert rp_outputs[out] == "Wait for Delivered" and rp_outputs[max(event)] == entry(nxt), rp_outputs
                continue
            assert rp_outputs[out] == entry(before if before.shape == "lines" else nxt), rp_outputs
        saves = [n for wf in case.workflows for n in wf["nodes"] if n["name"].startswith("Save ")]
        assert [n["parameters"].get("options", {}).get("completeInstance", False) for n in saves
                if n["name"] == f"Save {case.shape.segments[-1].step}"] == [True]
        assert all(n["typeVersion"] == 2 for n in saves)


def test_expectations_name_one_call_per_segment_and_allow_a_suspension_only_past_the_retry_policy() -> None:
    for index in range(60):
        case = generate(11, index, URL)
        for key, e in case.expected.items():
            per_segment = [case.lines[key] if s.shape == "lines" else 1 for s in case.shape.segments]
            assert e.trail == tuple(f"s{i + 1}" for i, n in enumerate(per_segment) for _ in range(n))
            assert [x.provider for x in e.calls] == [s.provider for s, n in zip(case.shape.segments, per_segment,
                                                                                   strict=True) for _ in range(n)]
            assert e.rewalked == tuple(s.step for s in case.shape.segments if s.shape == "lines")
            fails = max(s.fail_first for s in case.schedules if s.key == key)
            assert e.suspension_allowed == (case.shape.retry_policy and fails > 1)
            if fails:
                assert case.shape.retry_policy or any(s.http_retry for s in case.shape.segments)


def test_over_enough_cases_every_building_block_and_fault_kind_is_drawn() -> None:
    used = {b for index in range(40) for b in generate(3, index, URL).blocks}
    assert used == {b.name for b in BLOCKS}
    every = set()
    for database in faults.DATABASES:
        for mode in faults.MODES:
            dealt = {k for wave in faults.kinds_for_waves(3, 3, 3, modes=[mode] * 3, database=database) for k in wave}
            assert dealt == set(faults.kinds_fitting(mode, database=database)), (mode, database)
        # The short form (4 waves of 3, both modes) uses every kind its database fits.
        modes = faults.wave_modes(4, "both")
        every |= {k for wave in faults.kinds_for_waves(3, 4, 3, modes=modes, database=database) for k in wave}
    assert every == set(faults.KINDS)


def test_a_reduced_case_keeps_its_first_keys_and_side_effects_under_new_ids() -> None:
    from chaos.generator import reduce

    big = next(c for c in (generate(5, i, URL) for i in range(60)) if len(c.keys) > 1 and len(c.shape.segments) > 2)
    small = reduce(big, URL, keys=1, segments=2, copies=False, tag="r1")
    assert small.keys == [f"{big.keys[0]}r1"] and small.workflow_id == f"{big.workflow_id}r1"
    assert 1 <= len(small.shape.segments) <= 2 and small.shape.segments[-1].shape != "sub"
    assert small.shape.segments == big.shape.segments[:len(small.shape.segments)]
    assert [d.when for d in small.deliveries] == ["first"]
    [e] = small.expected.values()
    assert e.trail == tuple(s.step for s in small.shape.segments)
    assert {s.provider for s in small.schedules} == {s.provider for s in small.shape.segments}


def test_a_switch_sends_each_channel_to_its_own_call_and_a_merge_takes_every_output() -> None:
    outputs_seen = set()
    for index in range(80):
        case = generate(13, index, URL)
        main = case.workflows[-1]
        nodes = {n["name"]: n for n in main["nodes"]}
        for seg in (s for s in case.shape.segments if s.shape == "switch"):
            outputs_seen.add(seg.outputs)
            switch, merge = nodes[f"Channel {seg.step}"], nodes[f"Merge {seg.step}"]
            rules = [r["conditions"]["conditions"][0]["rightValue"] for r in switch["parameters"]["rules"]["values"]]
            fallback = switch["parameters"]["options"].get("fallbackOutput") == "extra"
            assert len(rules) + fallback == seg.outputs
            outs = {out: dst for src, out, dst, _ in links(main) if src == switch["name"]}
            assert sorted(outs) == list(range(seg.outputs))
            assert sorted(i for _, _, dst, i in links(main) if dst == merge["name"]) == list(range(seg.outputs))
            assert merge["parameters"].get("numberInputs", 2) == seg.outputs
            for key in case.keys:
                channel = delivery_body(case, key)["channel"]
                taken = rules.index(channel) if channel in rules else len(rules)
                [logic] = [x.logic for x in case.expected[key].calls if x.scope == seg.step]
                assert outs[taken] == f"Call {seg.step} {logic}", (case.index, key, channel)
    assert outputs_seen == {2, 3}


def test_a_wait_node_follows_a_save_of_the_same_workflow_and_the_resume_point_leads_to_it_again() -> None:
    waits = 0
    for index in range(80):
        case = generate(17, index, URL)
        main = case.workflows[-1]
        nodes = {n["name"]: n for n in main["nodes"]}
        for i, seg in enumerate(s for s in case.shape.segments):
            if not seg.wait_s:
                assert f"Wait {seg.step}" not in nodes
                continue
            waits += 1
            wait = nodes[f"Wait {seg.step}"]
            assert wait["type"] == "n8n-nodes-base.wait" and 1 <= wait["parameters"]["amount"] <= 3
            into = {(src, out) for src, out, dst, _ in links(main) if dst == wait["name"]}
            out_of = [dst for src, _, dst, _ in links(main) if src == wait["name"]]
            assert out_of == [body_entry(seg)]
            # Line items walk again from their entry: the Resume Point's output for their own step leads there too.
            again = {("Resume Point", 4 + i)} if seg.shape == "lines" else set()
            if i == 0:
                start = "Accepted" if case.shape.respond == RESPOND_NODE else "Resume Point"
                assert into == {(start, 0), ("Resume Point", 1)} | again
            else:
                before = case.shape.segments[i - 1]
                assert before.shape not in ("sub", "lines"), "a Save in a sub-workflow cannot see the caller's Wait"
                assert into == {(f"Save {before.step}", 0), ("Resume Point", 4 + i - 1)} | again
    assert waits > 5


def test_line_items_are_split_claimed_per_line_and_looped_one_at_a_time_or_all_at_once() -> None:
    seen = set()
    for index in range(80):
        case = generate(19, index, URL)
        main = case.workflows[-1]
        nodes = {n["name"]: n for n in main["nodes"]}
        for i, seg in enumerate(case.shape.segments):
            if seg.shape != "lines":
                continue
            seen.add(seg.loop)
            assert i < len(case.shape.segments) - 1, "never the last segment: its Saves would complete the instance"
            split, claim = nodes[f"Lines {seg.step}"], nodes[f"Claim {seg.step}"]
            assert split["parameters"]["fieldToSplitOut"] == "body.lines"
            assert claim["parameters"]["key"] == "={{ $json.line.sku }}" and claim["parameters"]["scope"] == seg.step
            out = {(src, o): dst for src, o, dst, _ in links(main)}
            assert out[(claim["name"], 0)] == f"Call {seg.step}" and out[(claim["name"], 1)] == f"Save {seg.step}"
            if seg.loop:
                each = f"Each Line {seg.step}"
                assert out[(split["name"], 0)] == each and out[(each, 1)] == claim["name"]
                assert out[(f"Save {seg.step}", 0)] == each
            else:
                assert out[(split["name"], 0)] == claim["name"]
            for key in case.keys:
                skus = [line["sku"] for line in delivery_body(case, key)["lines"]]
                assert 1 <= len(skus) <= 3
                assert [x.line for x in case.expected[key].calls if x.scope == seg.step] == skus
                assert {s.key for s in case.schedules if s.provider == seg.provider} >= {f"{key}:{sku}" for sku in skus}
    assert seen == {True, False}


def test_a_wait_for_event_follows_a_save_and_a_carrier_workflow_signals_the_case() -> None:
    waited = 0
    for index in range(80):
        case = generate(23, index, URL)
        if not case.shape.event_after:
            assert len([wf for wf in case.workflows if wf["id"].endswith("signal")]) == 0 and not case.signal_after_s
            continue
        waited += 1
        main = case.workflows[-1]
        nodes = {n["name"]: n for n in main["nodes"]}
        before = case.shape.segments[case.shape.event_after - 1]
        nxt = case.shape.segments[case.shape.event_after]
        assert before.shape not in ("sub", "lines") and not nxt.wait_s
        assert nodes["Resume Point"]["parameters"]["waitOutputs"] is True
        wait = nodes["Wait for Delivered"]
        assert wait["parameters"] == {"operation": "awaitEvent", "eventName": "delivered"}
        out = {(src, o): dst for src, o, dst, _ in links(main)}
        assert out[(f"Save {before.step}", 0)] == "Wait for Delivered"
        assert out[("Wait for Delivered", 0)] == body_entry(nxt)
        assert set(case.signal_after_s) == set(case.keys)
        carriers = [wf for wf in case.workflows if wf["id"] == f"{case.workflow_id}signal"]
        if case.shape.signal_via == "http":
            assert carriers == []
            request = signal_request(case, case.keys[0])
            assert request["workflowId"] == case.workflow_id and request["eventName"] == "delivered"
            assert json.loads(base64.b64decode(request["payloadJson"]))["orderId"] == case.keys[0]
            continue
        assert case.shape.signal_via == "workflow" and carriers == [case.workflows[-2]]
        [signal] = [n for n in carriers[0]["nodes"] if n["type"] == "n8n-nodes-durable.durableInstance"]
        assert signal["parameters"]["workflowId"] == case.workflow_id and signal["parameters"]["eventName"] == "delivered"
    assert waited > 5


def test_the_shrinker_can_cut_a_side_effect_to_a_plain_claim_call_save() -> None:
    """Fewer nodes inside a side effect: no IF, Switch or line items, no Code node, no n8n Wait; a line-item side
    effect made plain calls its provider once per key, on its first line's schedule."""
    from chaos.generator import reduce, simpler

    def fancy(c: Case) -> bool:
        kinds = {s.shape for s in c.shape.segments}
        return "lines" in kinds and bool(kinds & {"branch", "switch"}) and any(s.code or s.wait_s for s in c.shape.segments)

    big = next(c for c in (generate(11, i, URL) for i in range(300)) if fancy(c))
    cut = frozenset(s.number for s in big.shape.segments if simpler(s) is not None)
    small = reduce(big, URL, keys=len(big.keys), segments=len(big.shape.segments), copies=True, tag="r2", plain=cut)
    assert cut and all(s.shape in ("plain", "sub") and not s.code and not s.wait_s for s in small.shape.segments)
    assert [s.http_retry for s in small.shape.segments] == [s.http_retry for s in big.shape.segments]
    types = {n["type"] for w in small.workflows for n in w["nodes"]}
    assert not types & {"n8n-nodes-base.splitOut", "n8n-nodes-base.switch", "n8n-nodes-base.if",
                        "n8n-nodes-base.code", "n8n-nodes-base.wait", "n8n-nodes-base.splitInBatches"}
    lined = {s.provider for s in big.shape.segments if s.shape == "lines"}
    for key, e in small.expected.items():
        assert [(c.provider, c.logic, c.line) for c in e.calls] == [(s.provider, "plain", "") for s in small.shape.segments]
        base = key.removesuffix("r2")
        for provider in lined:
            [sched] = [s for s in small.schedules if s.provider == provider and s.key.partition(":")[0] == key]
            first = next(s for s in big.schedules if s.provider == provider and s.key == f"{base}:sku-1")
            assert sched.key == key and (sched.kind, sched.delay_s) == (first.kind, first.delay_s)
    assert simpler(small.shape.segments[0]) is None  # plain already: nothing more to cut


def test_durable_limits_gate_side_effects_as_the_node_readme_wires_them() -> None:
    """Enter Section → Claim, the call (or its Merge) and Done Before → Leave Section → Save; Rate Limit → Claim;
    one limit name per case and side effect, keyed by the order's customer (every key of the case the same),
    never on a sub-workflow or line items, no rate where Retry On Fail re-sends the call."""
    from chaos.model import RATE_ITEMS, RATE_PERIOD_S

    seen = set()
    for index in range(80):
        case = generate(29, index, URL)
        main = case.workflows[-1]
        nodes = {n["name"]: n for n in main["nodes"]}
        out = {(src, o): dst for src, o, dst, _ in links(main)}
        customers = {delivery_body(case, k)["customer"] for k in case.keys}
        assert customers == {case.workflow_id}
        for seg, e in ((s, s.step) for s in case.shape.segments):
            if not seg.limit:
                assert not any(n.startswith((f"Enter {e}", f"Leave {e}", f"Rate {e}")) for n in nodes)
                continue
            seen.add(seg.limit)
            assert seg.shape not in ("sub", "lines") and not (seg.limit != "section" and seg.http_retry)
            gate = nodes[body_entry(seg)]
            assert gate["type"] == "n8n-nodes-durable.durableLimit" and gate["typeVersion"] == 1
            assert gate["parameters"]["limitName"] == f"{case.workflow_id}-{e}"
            assert gate["parameters"]["limitKey"] == "={{ $json.body.customer }}"
            assert out[(gate["name"], 0)] == f"Claim {e}"
            if seg.limit == "rate":
                assert gate["parameters"]["operation"] == "rateLimit"
                assert out[(f"Claim {e}", 1)] == f"Save {e}"
                continue
            assert gate["parameters"]["operation"] == "enterSection" and gate["parameters"]["maxHolders"] == 1
            if seg.limit == "section-rate":  # Rate Limit Too, only where an order brings one item
                assert seg.lined == 0
                assert {k: gate["parameters"][k] for k in ("rateToo", "maxItems", "periodAmount")} == {
                    "rateToo": True, "maxItems": RATE_ITEMS, "periodAmount": RATE_PERIOD_S}
                assert {x.kind for x in next(iter(case.expected.values())).limits
                        if x.provider == seg.provider} == {"section", "rate"}
            else:
                assert "rateToo" not in gate["parameters"]
            leave = nodes[f"Leave {e}"]
            assert leave["parameters"] == {"operation": "leaveSection", "limitName": f"{case.workflow_id}-{e}"}
            assert out[(f"Claim {e}", 1)] == f"Leave {e}" and out[(f"Leave {e}", 0)] == f"Save {e}"
            into_leave = {src for src, _o, dst, _i in links(main) if dst == f"Leave {e}"}
            assert len(into_leave) == 2 and f"Claim {e}" in into_leave   # Done Before, and the call or its Merge
        for key, exp in case.expected.items():
            assert {x.provider for x in exp.limits} == {s.provider for s in case.shape.segments if s.limit}, key
    assert seen == {"section", "rate", "section-rate"}


def test_a_rate_limits_burst_holds_every_item_an_order_brings_to_it() -> None:
    """Each Split Out of the order's lines before a Rate Limit multiplies the items that reach it together by the
    lines (a second one splits every line's item again): the Burst holds MAX_LINES to the power of those Split
    Outs, at RATE_ITEMS per RATE_PERIOD_S on average, or the node fails the order for good (its documented
    refusal). Chaos seed 757220 case 2 (two lines segments, then a rate with Burst 3) failed an order of 2 lines."""
    from chaos.model import MAX_LINES, RATE_ITEMS, RATE_PERIOD_S

    def upstream(wf: dict[str, Any], node: str) -> set[str]:
        into: dict[str, set[str]] = {}
        for src, _o, dst, _i in links(wf):
            into.setdefault(dst, set()).add(src)
        seen, todo = set(), [node]
        while todo:
            for src in into.get(todo.pop(), ()):
                if src not in seen:
                    seen.add(src)
                    todo.append(src)
        return seen

    cases = [generate(757220, 2, URL)] + [generate(31, i, URL) for i in range(300)]
    deepest = 0
    for case in cases:
        main = case.workflows[-1]
        types = {n["name"]: n["type"] for n in main["nodes"]}
        for gate in (n for n in main["nodes"] if n["name"].startswith("Rate s")):
            splits = sum(types[n] == "n8n-nodes-base.splitOut" for n in upstream(main, gate["name"]))
            deepest = max(deepest, splits)
            items = MAX_LINES ** splits
            p = gate["parameters"]
            assert p["options"].get("burst", 1) >= items, (case.workflow_id, gate["name"], splits)
            assert p["maxItems"] * RATE_PERIOD_S == p["periodAmount"] * RATE_ITEMS, (case.workflow_id, p)
    assert deepest == 2


def test_the_limits_ignored_plant_opens_every_limit_but_keeps_the_expectations() -> None:
    """`--plant limits-ignored` (the oracle's rule 6 must then fail in a real run): the first wave's Enter
    Sections and Rate Limits let everything through, the Leave Sections stay, no fault is injected, and the
    expectations still name the drawn limits."""
    from chaos.__main__ import plant_in_first_wave

    cases = [generate(101, i, URL) for i in range(3)]
    plan = plant_in_first_wave(cases, [], "regular", "limits-ignored")
    assert plan == []
    gates = [n["parameters"] for c in cases for wf in c.workflows for n in wf["nodes"]
             if n["type"] == "n8n-nodes-durable.durableLimit"]
    assert {p["operation"] for p in gates} == {"enterSection", "leaveSection", "rateLimit"}
    assert all(p["maxHolders"] == 1000 for p in gates if p["operation"] == "enterSection")
    assert all((p["maxItems"], p["periodAmount"]) == (1000, 1) for p in gates if p["operation"] == "rateLimit")
    assert all(e.limits for c in cases for e in c.expected.values())
    assert all(s.delay_s >= 3.0 for c in cases for s in c.schedules)


def test_a_document_is_downloaded_after_a_call_saved_with_its_step_and_uploaded_by_the_next_call() -> None:
    """Call (or its Merge) → Download (GET, Response Format: File) → [Leave Section →] Save; the next side effect's
    calls (each branch's) are multipart forms whose part `document` is the binary property `data`, and its Code
    node keeps the files; neither side in a sub-workflow or on line items, never after the last side effect, and
    the calls of that side effect, and only they, are expected to carry the order's document."""
    from chaos.providers import sent_document

    seen = 0
    for index in range(80):
        case = generate(31, index, URL)
        main = case.workflows[-1]
        nodes = {n["name"]: n for n in main["nodes"]}
        out = {(src, o): dst for src, o, dst, _ in links(main)}
        segments = case.shape.segments
        uploads = {nxt.number for s, nxt in pairwise(segments) if s.document}
        assert not segments[-1].document
        for i, seg in enumerate(segments):
            calls = [n for name, n in nodes.items() if name.startswith(f"Call {seg.step}")]
            if seg.document:
                seen += 1
                nxt = segments[i + 1]
                assert seg.shape not in ("sub", "lines") and nxt.shape not in ("sub", "lines") and not nxt.document
                download = nodes[f"Download {seg.step}"]
                assert download["type"] == "n8n-nodes-base.httpRequest" and download["typeVersion"] == 4.2
                assert download["parameters"]["method"] == "GET"
                assert download["parameters"]["url"] == f"={URL}/documents/{{{{ $json.orderId }}}}"
                assert download["parameters"]["options"]["response"]["response"]["responseFormat"] == "file"
                into = {src for src, _, dst, _ in links(main) if dst == download["name"]}
                assert into == ({f"Merge {seg.step}"} if seg.shape in ("branch", "switch") else {f"Call {seg.step}"})
                assert out[(download["name"], 0)] == (f"Leave {seg.step}" if seg.limit in ("section", "section-rate")
                                                      else f"Save {seg.step}")
            else:
                assert f"Download {seg.step}" not in nodes
            if seg.number not in uploads:
                assert all(c["parameters"].get("contentType") != "multipart-form-data" for c in calls)
                assert all(x.file is None for e in case.expected.values() for x in e.calls if x.scope == seg.step)
                continue
            assert calls and all(c["parameters"]["contentType"] == "multipart-form-data" for c in calls)
            for c in calls:
                fields = c["parameters"]["bodyParameters"]["parameters"]
                assert {"parameterType": "formBinaryData", "name": "document", "inputDataFieldName": "data"} in fields
                assert [h["value"] for h in c["parameters"]["headerParameters"]["parameters"]] == [
                    "={{ $json.idempotency.derivedKey }}"]
            if seg.code:
                assert "binary: item.binary" in nodes[f"Code {seg.step}"]["parameters"]["jsCode"]
            for key, e in case.expected.items():
                assert [x.file for x in e.calls if x.scope == seg.step] == [sent_document(key)] * len(
                    [x for x in e.calls if x.scope == seg.step])
    assert seen > 5


def test_the_shrinker_drops_a_document_with_the_side_effect_that_would_upload_it() -> None:
    from chaos.generator import reduce

    big = next(c for c in (generate(31, i, URL) for i in range(80)) if c.shape.segments[0].document)
    small = reduce(big, URL, keys=1, segments=1, copies=False, tag="r3")
    assert not small.shape.segments[0].document
    assert all(x.file is None for e in small.expected.values() for x in e.calls)
