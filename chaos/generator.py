"""A seeded generator of valid durable workflows, their deliveries, their providers' schedules and what must come out.

One case is drawn from `random.Random(f"{seed}:{index}")`, so it is the same whatever N is, and `--case`
replays it alone. Every workflow is written the way node-package/README.md says, from our nodes at their
newest versions (e2e/scenarios.py DocsFlow) with their options at their defaults, plus n8n core nodes.

A case is built by building blocks, one function each (`BLOCKS`). To add one: decide it in `draw_shape`,
write its function, wire it in `build_workflows`, say what it changes in `expectations`, and move it from
"still to do" to the list in docs/testing.md.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from itertools import pairwise
from typing import Any

from harness import CREDENTIAL_ID
from scenarios import DocsFlow, side_effect_sub_workflow

from chaos.history import ExpectedCall

# The fake services (e2e/fake_services.py): each segment of a case calls its own.
PROVIDERS = ("payment", "inventory", "shipping", "coupon", "notify")
# n8n's Retry On Fail on an HTTP Request node (its own defaults: 3 tries, 1 s apart).
HTTP_RETRY_TRIES = 3
# The Resume Point's retry policy where the case uses it: one automatic resume, 1 s backoff. (The defaults,
# 5 resumes from 10 s doubling, would take five minutes to exhaust; the block is about the policy.)
RETRY_POLICY_RESUMES = 1
RETRY_POLICY_BACKOFF_S = 1
# How long a slow and a stalled provider hold a call (seconds, drawn in these ranges).
SLOW_S = (1.0, 3.0)
STALL_S = (8.0, 12.0)
# The field a Switch routes on: each key's delivery carries one (an IF routes on its `method`).
CHANNELS = ("web", "phone", "partner")
# The event a case's instance waits for, and how long after a key's first delivery chaos signals it (seconds,
# drawn: early signals come before the wait and are kept in the mailbox, or before the instance exists and are
# answered with an error the sender retries).
EVENT = "delivered"
SIGNAL_AFTER_S = (0.0, 8.0)
# Each key's order has 1–3 line items (`body.lines`, each with its `sku`) where a case claims per line.
MAX_LINES = 3

RESPOND_NODE = "responseNode"    # Webhook → Respond: Using 'Respond to Webhook' Node ("Accepted" after Start)
LAST_NODE = "lastNode"           # Webhook → Respond: When Last Node Finishes (Finished, Busy → No Operation)


@dataclass(frozen=True)
class Segment:
    """One side effect: Claim → call → Save step `s<number>` (scope `s<number>`)."""

    number: int
    provider: str
    shape: str              # "plain", "branch" (IF on the business key, rejoined by a Merge), "switch" (a Switch on
                            # the key's channel into `outputs` calls, rejoined by a Merge), "sub" (a sub-workflow) or
                            # "lines" (Split Out of the order's line items, a Claim keyed by the line, one call each)
    code: bool = False      # a Code node that keeps pairing between the Claim's First Run and the call
    http_retry: bool = False
    outputs: int = 0        # a switch's outputs: 3 (one rule per channel) or 2 (a rule for "web", the fallback)
    wait_s: int = 0         # n8n's Wait node (After Time Interval, seconds) before the segment's Claim
    loop: bool = False      # lines: one at a time through Loop Over Items (batch size 1), not all at once

    @property
    def step(self) -> str:
        return f"s{self.number}"


@dataclass(frozen=True)
class Shape:
    """The drawn structure of a case's workflow, before any node exists."""

    respond: str
    segments: tuple[Segment, ...]
    retry_policy: bool      # the Resume Point's retry policy, against a provider that fails
    event_after: int = 0    # the segment after whose Save the instance waits for the event "delivered" (0: none)
    signal_via: str = ""    # who signals it: "workflow" (the case's carrier workflow) or "http" (chaos, through a
                            # sidecar's HTTP/JSON face, SignalInstance)


@dataclass(frozen=True)
class Delivery:
    """One POST of a key to the case's webhook: `first` and `concurrent` ones `offset_s` after the case starts,
    `after-completion` ones once the instance has completed."""

    key: str
    copy: int
    when: str
    offset_s: float


@dataclass(frozen=True)
class ProviderSchedule:
    """What the provider does with one key's calls: fail the first `fail_first` with 500, then take `delay_s`."""

    provider: str
    key: str
    kind: str               # "healthy", "slow", "stall"
    fail_first: int = 0
    delay_s: float = 0.0


@dataclass(frozen=True)
class Expected:
    """What one key must come to: its trail, one effective call per provider (with the branch's `logic`), and
    whether a suspension is allowed (the schedule fails more often than the retry policy resumes)."""

    workflow_id: str
    key: str
    trail: tuple[str, ...]
    calls: tuple[ExpectedCall, ...]             # one per side effect, one per line of a line-item side effect
    retry_policy: bool
    fail_first: int
    suspension_allowed: bool
    base_bound_s: float
    rewalked: tuple[str, ...] = ()              # steps saved once per line item (walked again on a resume)


@dataclass
class Case:
    seed: int
    index: int
    workflow_id: str
    path: str
    shape: Shape
    blocks: list[str]
    workflows: list[dict[str, Any]]             # sub-workflows first, then the case's workflow
    keys: list[str]
    methods: dict[str, str]
    deliveries: list[Delivery]
    schedules: list[ProviderSchedule]
    expected: dict[str, Expected] = field(default_factory=dict)
    channels: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)     # each key's number of line items
    signal_after_s: dict[str, float] = field(default_factory=dict)  # when chaos signals EVENT, after the first delivery

    def plan(self) -> dict[str, Any]:
        """The case without its workflows, as JSON (written beside them when it fails)."""
        return {"seed": self.seed, "index": self.index, "workflow_id": self.workflow_id, "path": self.path,
                "shape": asdict(self.shape), "blocks": self.blocks, "keys": self.keys, "methods": self.methods,
                "channels": self.channels, "lines": self.lines, "signal_after_s": self.signal_after_s,
                "deliveries": [asdict(d) for d in self.deliveries],
                "schedules": [asdict(s) for s in self.schedules],
                "expected": {k: asdict(e) for k, e in self.expected.items()}}


# --- drawing ----------------------------------------------------------------------------------------------


def draw_shape(rng: random.Random) -> Shape:
    respond = rng.choice([RESPOND_NODE, LAST_NODE])
    n = rng.randint(1, 4)
    providers = rng.sample(PROVIDERS, n)
    # A sub-workflow holds one segment, never the last (the last Save completes the instance in the caller).
    sub_at = rng.randrange(n - 1) if n >= 2 and rng.random() < 0.35 else None
    segments = []
    for i in range(n):
        if i == sub_at:
            segments.append(Segment(i + 1, providers[i], "sub"))
            continue
        # Line items never last: the loop's Saves would complete the instance at its first line.
        if i < n - 1 and rng.random() < 0.25:
            segments.append(Segment(i + 1, providers[i], "lines", loop=rng.random() < 0.5))
            continue
        r = rng.random()
        kind = "branch" if r < 0.25 else "switch" if r < 0.45 else "plain"
        segments.append(Segment(i + 1, providers[i], kind, code=rng.random() < 0.3,
                                outputs=rng.choice([2, 3]) if kind == "switch" else 0))
    # n8n's Wait before a segment, where a Save of this workflow or the Resume Point reaches it with no durable
    # node between (README "n8n's Wait node"): not after a sub-workflow, whose Save cannot see the Wait, nor after
    # line items, whose step output leads back to their lines, not to the Wait.
    segments = [replace(s, wait_s=rng.randint(1, 3)) if (i == 0 or segments[i - 1].shape not in ("sub", "lines"))
                and rng.random() < 0.2 else s for i, s in enumerate(segments)]
    # At most one kind of failing provider per case, on one segment outside a sub-workflow.
    failing = [s for s in segments if s.shape not in ("sub", "lines")]
    retry = rng.choice(["none", "none", "http-retry", "retry-policy"])
    retry_policy = retry == "retry-policy"
    if retry == "http-retry":
        target = rng.choice(failing)
        segments = [replace(s, http_retry=s is target) for s in segments]
    # Wait for Event between a Save of this workflow and the next side effect; not before an n8n Wait, which must
    # follow its Save with no durable node between, nor after line items, whose step leads back to their lines.
    waits_for = [s.number for s, nxt in pairwise(segments) if s.shape not in ("sub", "lines") and not nxt.wait_s]
    event_after = rng.choice(waits_for) if waits_for and rng.random() < 0.3 else 0
    signal_via = rng.choice(["workflow", "http"]) if event_after else ""
    return Shape(respond, tuple(segments), retry_policy, event_after, signal_via)


def failing_segment(shape: Shape) -> Segment | None:
    """The segment whose provider fails first: the one with Retry On Fail, or (retry policy) the last outside a
    sub-workflow."""
    for s in shape.segments:
        if s.http_retry:
            return s
    if shape.retry_policy:
        return [s for s in shape.segments if s.shape != "sub"][-1]
    return None


def draw_deliveries(rng: random.Random, keys: list[str]) -> list[Delivery]:
    out = []
    for key in keys:
        first = round(rng.uniform(0.0, 4.0), 2)
        out.append(Delivery(key, 0, "first", first))
        for copy in range(1, rng.randint(1, 3)):
            when = rng.choice(["concurrent", "after-completion"])
            out.append(Delivery(key, copy, when, round(first + rng.uniform(0.0, 0.3), 2) if when == "concurrent" else 0.0))
    return out


def line_skus(n: int) -> list[str]:
    return [f"sku-{j + 1}" for j in range(n)]


def draw_schedules(rng: random.Random, shape: Shape, keys: list[str], lines: dict[str, int]) -> list[ProviderSchedule]:
    """Per key and side effect; a line-item side effect has one per line (the provider sees `<key>:<sku>`)."""
    fails = failing_segment(shape)
    out = []
    for key in keys:
        fail_first = rng.choice([1, 2]) if fails is not None else 0
        for seg in shape.segments:
            orders = [f"{key}:{sku}" for sku in line_skus(lines[key])] if seg.shape == "lines" else [key]
            for order in orders:
                kind = rng.choices(["healthy", "slow", "stall"], weights=[60, 25, 15])[0]
                delay = {"healthy": 0.0, "slow": rng.uniform(*SLOW_S), "stall": rng.uniform(*STALL_S)}[kind]
                out.append(ProviderSchedule(seg.provider, order, kind, fail_first if seg is fails else 0, round(delay, 2)))
    return out


def switch_logic(seg: Segment, channel: str) -> str:
    """The Switch output a channel takes: its own rule, or (2 outputs) "web"'s rule or the fallback."""
    return channel if seg.outputs == len(CHANNELS) or channel == CHANNELS[0] else "other"


def segment_logic(seg: Segment, method: str, channel: str) -> str:
    """The `logic` the segment's call sends: the branch the key takes."""
    if seg.shape == "branch":
        return method
    if seg.shape == "switch":
        return switch_logic(seg, channel)
    return "plain"


def expectations(case: Case) -> dict[str, Expected]:
    shape, out = case.shape, {}
    for key in case.keys:
        scheds = [s for s in case.schedules if s.key == key or s.key.startswith(f"{key}:")]
        fail_first = max((s.fail_first for s in scheds), default=0)
        skus = line_skus(case.lines.get(key, 1))
        calls = tuple(call for s in shape.segments for call in (
            [ExpectedCall(s.provider, s.step, "plain", sku) for sku in skus] if s.shape == "lines" else
            [ExpectedCall(s.provider, s.step, segment_logic(s, case.methods[key], case.channels.get(key, CHANNELS[0])))]))
        trail = tuple(step for s in shape.segments for step in [s.step] * (len(skus) if s.shape == "lines" else 1))
        # Each failure under the retry policy costs an execution, the lease's release (~5 s) and its backoff.
        bound = 60.0 + sum(s.delay_s for s in scheds) + (20.0 * fail_first if shape.retry_policy else 3.0 * fail_first)
        bound += sum(2 * s.wait_s for s in shape.segments)  # a resumed instance waits again
        bound += case.signal_after_s.get(key, 0.0)
        out[key] = Expected(case.workflow_id, key, trail, calls, shape.retry_policy, fail_first,
                            shape.retry_policy and fail_first > RETRY_POLICY_RESUMES, bound,
                            tuple(s.step for s in shape.segments if s.shape == "lines"))
    return out


# --- building blocks: one function each -----------------------------------------------------------------


class Builder:
    """The case's workflow under construction (DocsFlow: our nodes at their newest versions, one credential)."""

    def __init__(self, case_id: str, services_url: str) -> None:
        self.f = DocsFlow(case_id, f"chaos {case_id}", services_url, CREDENTIAL_ID)
        self.services_url = services_url
        self.case_id = case_id
        self.subs: list[dict[str, Any]] = []
        self.col = 0

    def at(self, row: int = 0) -> tuple[int, int]:
        self.col += 1
        return (220 * self.col, 200 * row)

    def set_node(self, name: str, **fields: Any) -> None:
        node = next(n for n in self.f.flow.nodes if n["name"] == name)
        node.update(fields)


def call_body(logic: str) -> str:
    return f"={{{{ JSON.stringify({{ orderId: $json.body.orderId, logic: '{logic}' }}) }}}}"


def block_webhook(b: Builder, path: str, respond: str) -> str:
    """Webhook intake in a Respond mode the README documents (never Immediately)."""
    return b.f.webhook(path, respond)


def block_respond_accepted(b: Builder) -> str:
    """Respond to Webhook "Accepted" on the Resume Point's Start, before the first side effect."""
    return str(b.f.node("Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {"respondWith": "noData", "options": {}},
                        b.at()))


def block_answer_redeliveries(b: Builder, rp: str) -> None:
    """Respond: When Last Node Finishes: Finished and Busy go to a No Operation node, as the README says."""
    received = b.f.node("Already Received", "n8n-nodes-base.noOp", 1, {}, (440, 400))
    b.f.link(rp, received, 2)
    b.f.link(rp, received, 3)


def block_resume_trigger(b: Builder) -> str:
    return b.f.durable("Resume Trigger", "resumeTrigger", {}, (0, 200))


def block_resume_point(b: Builder, shape: Shape) -> str:
    params: dict[str, Any] = {"instanceKey": "={{ $json.body.orderId }}"}
    steps = [s.step for s in shape.segments[:-1]]
    if steps:
        params["stepOutputs"] = ", ".join(steps)
    if shape.event_after:
        params["waitOutputs"] = True
    if shape.retry_policy:
        block_retry_policy(params)
    return b.f.durable("Resume Point", "resumePoint", params, (220, 100))


def block_retry_policy(params: dict[str, Any]) -> None:
    """The Resume Point's retry policy (options Max Automatic Resumes and Retry Backoff)."""
    params["options"] = {"maxAutomaticResumes": RETRY_POLICY_RESUMES, "initialBackoffSeconds": RETRY_POLICY_BACKOFF_S}


def block_code_pass_through(b: Builder, seg: Segment) -> str:
    """A Code node that returns its items and keeps pairing (each item paired to its input)."""
    return str(b.f.node(f"Code {seg.step}", "n8n-nodes-base.code", 2, {
        "jsCode": "return $input.all().map((item, i) => ({ json: item.json, pairedItem: { item: i } }));"}, b.at(-1)))


def block_http_retry(b: Builder, call: str) -> None:
    """n8n's Retry On Fail on the call (3 tries, 1 s apart), against a provider that fails fewer times."""
    b.set_node(call, retryOnFail=True, maxTries=HTTP_RETRY_TRIES, waitBetweenTries=1000)


def block_call(b: Builder, seg: Segment, logic: str, name: str, row: int = -1) -> str:
    """The side effect: an HTTP Request to the segment's provider with the Claim's derived Idempotency-Key."""
    call = b.f.call(name, seg.provider, call_body(logic), b.at(row))
    if seg.http_retry:
        block_http_retry(b, call)
    return call


def block_claim(b: Builder, seg: Segment) -> str:
    return b.f.durable(f"Claim {seg.step}", "idempotencyGuard", {"operation": "claim", "scope": seg.step}, b.at())


def block_save(b: Builder, seg: Segment, last: bool) -> str:
    params: dict[str, Any] = {"operation": "save", "stepName": seg.step}
    if last:
        block_complete_on_last_save(params)
    return b.f.durable(f"Save {seg.step}", "durableCheckpoint", params, b.at())


def block_complete_on_last_save(params: dict[str, Any]) -> None:
    """The last Save with the option Complete Instance."""
    params["options"] = {"completeInstance": True}


def block_if_merge(b: Builder, seg: Segment, source: str) -> str:
    """An IF on the business key (the generator gave each key a method) into two calls, rejoined by a Merge."""
    wf = b.case_id
    by_card = b.f.node(f"Card {seg.step}?", "n8n-nodes-base.if", 2.3, {"conditions": {
        "options": {"caseSensitive": True, "leftValue": "", "typeValidation": "strict", "version": 3},
        "conditions": [{"id": f"{wf}-{seg.step}-method", "leftValue": "={{ $json.body.method }}", "rightValue": "card",
                        "operator": {"type": "string", "operation": "equals"}}],
        "combinator": "and"}, "options": {}}, b.at())
    card = block_call(b, seg, "card", f"Call {seg.step} card", -1)
    account = block_call(b, seg, "account", f"Call {seg.step} account", 1)
    merge = str(b.f.node(f"Merge {seg.step}", "n8n-nodes-base.merge", 3.2, {}, b.at()))
    b.f.link(source, by_card, 0)
    b.f.link(by_card, card, 0)
    b.f.link(by_card, account, 1)
    b.f.link(card, merge, 0, input=0)
    b.f.link(account, merge, 0, input=1)
    return merge


def block_switch_merge(b: Builder, seg: Segment, source: str) -> str:
    """A Switch on the key's channel into 2 or 3 calls (one rule per channel; or a rule for "web" and the
    fallback output), rejoined by a Merge of as many inputs."""
    wf = b.case_id
    channels = CHANNELS[:seg.outputs] if seg.outputs == len(CHANNELS) else CHANNELS[:1]
    rules = [{"conditions": {
        "options": {"caseSensitive": True, "leftValue": "", "typeValidation": "strict", "version": 3},
        "conditions": [{"id": f"{wf}-{seg.step}-{channel}", "leftValue": "={{ $json.body.channel }}",
                        "rightValue": channel, "operator": {"type": "string", "operation": "equals"}}],
        "combinator": "and"}, "renameOutput": True, "outputKey": channel} for channel in channels]
    options = {} if len(channels) == seg.outputs else {"fallbackOutput": "extra"}
    switch = b.f.node(f"Channel {seg.step}", "n8n-nodes-base.switch", 3.4,
                      {"rules": {"values": rules}, "options": options}, b.at())
    b.f.link(source, switch, 0)
    calls = [block_call(b, seg, logic, f"Call {seg.step} {logic}", i - 1)
             for i, logic in enumerate([*channels, *(["other"] if options else [])])]
    # Merge 3.2 has 2 inputs unless Number of Inputs says more.
    merge = str(b.f.node(f"Merge {seg.step}", "n8n-nodes-base.merge", 3.2,
                         {"numberInputs": seg.outputs} if seg.outputs > 2 else {}, b.at()))
    for i, call in enumerate(calls):
        b.f.link(switch, call, i)
        b.f.link(call, merge, 0, input=i)
    return merge


def line_call_body() -> str:
    return "={{ JSON.stringify({ orderId: $json.body.orderId + ':' + $json.line.sku, logic: 'plain' }) }}"


def block_line_items(b: Builder, seg: Segment) -> tuple[str, str]:
    """One side effect per line item (docs/nodes.md): a Split Out of `body.lines` (each line under `line`, All
    Other Fields kept, so later nodes read the order as before) → [Loop Over Items, batch size 1 →] a Claim
    whose Key is the line's SKU → one call per line (the provider sees `<key>:<sku>`) → Save, once per line;
    Done Before → the same Save. Returns the Split Out and the node the next segment follows (the Save, or the
    loop's Done output); the Resume Point's output for this step leads to the Split Out again."""
    split = b.f.node(f"Lines {seg.step}", "n8n-nodes-base.splitOut", 1, {
        "fieldToSplitOut": "body.lines", "include": "allOtherFields", "options": {"destinationFieldName": "line"}},
        b.at())
    claim = b.f.durable(f"Claim {seg.step}", "idempotencyGuard",
                        {"operation": "claim", "scope": seg.step, "key": "={{ $json.line.sku }}"}, b.at())
    call = b.f.call(f"Call {seg.step}", seg.provider, line_call_body(), b.at(-1))
    save = block_save(b, seg, last=False)
    b.f.link(claim, call, 0)
    b.f.link(claim, save, 1)    # Done Before
    b.f.link(call, save)
    if not seg.loop:
        b.f.link(split, claim)
        return split, save
    return split, block_loop_over_items(b, seg, split, claim, save)


def block_loop_over_items(b: Builder, seg: Segment, split: str, claim: str, save: str) -> str:
    """Loop Over Items (batch size 1) after the Split Out: its loop output into the line's Claim, the Save back
    into it; its Done output (every line saved) is where the next segment follows."""
    each = str(b.f.node(f"Each Line {seg.step}", "n8n-nodes-base.splitInBatches", 3, {"batchSize": 1, "options": {}},
                        b.at(1)))
    b.f.link(split, each)
    b.f.link(each, claim, 1)    # loop: one line
    b.f.link(save, each)
    return each


def block_wait_for_event(b: Builder, rp: str, save: str, entry: str, step_output: int, event_output: int) -> None:
    """Durable Checkpoint, Wait for Event "delivered" (no timeout) after a Save, wired as docs/nodes.md shows:
    Save → Wait for Event → Received → the next side effect; the Resume Point's output for that step → the same
    Wait for Event; its Event output (Wait Outputs on) → the next side effect."""
    wait = b.f.durable("Wait for Delivered", "durableCheckpoint", {"operation": "awaitEvent", "eventName": EVENT},
                       b.at(1))
    b.f.link(save, wait)
    b.f.link(wait, entry)              # Received: the event had come before
    b.f.link(rp, wait, step_output)
    b.f.link(rp, entry, event_output)  # Event: resumed when it came


def block_signal_workflow(case_id: str, path: str, services_url: str) -> dict[str, Any]:
    """The carrier's workflow (docs/nodes.md, Durable Instance): Webhook (When Last Node Finishes) → Durable
    Instance, Signal "delivered" to the case's workflow, Instance Key and Deduplication ID from the body."""
    f = DocsFlow(f"{case_id}signal", f"chaos {case_id} carrier", services_url, CREDENTIAL_ID)
    hook = f.node("Webhook", "n8n-nodes-base.webhook", 2.1, {"httpMethod": "POST", "path": f"{path}-signal",
                                                             "responseMode": LAST_NODE, "options": {}},
                  (0, 0), webhookId=f"{case_id}signal-hook")
    signal = f.node("Signal Delivered", "n8n-nodes-durable.durableInstance", 1, {
        "operation": "signal", "workflowId": case_id, "instanceKey": "={{ $json.body.orderId }}", "eventName": EVENT,
        "payloadJson": "={{ JSON.stringify($json.body) }}", "dedupeId": "={{ $json.body.eventId }}", "options": {}},
        (220, 0), credentials=f.cred)
    f.link(hook, signal)
    return f.workflow()


def signal_body(key: str) -> dict[str, Any]:
    """What chaos posts to the carrier's webhook for `key` (every repeat the same event)."""
    return {"orderId": key, "eventId": f"{key}-{EVENT}"}


def signal_request(case: Case, key: str) -> dict[str, Any]:
    """The same event as a SignalInstance request to the sidecar's HTTP/JSON face (docs/http-json.md: protobuf's
    JSON mapping, `bytes` as base64), with the carrier's deduplication ID."""
    payload = base64.b64encode(json.dumps(signal_body(key)).encode()).decode()
    return {"workflowId": case.workflow_id, "instanceKey": key, "eventName": EVENT, "payloadJson": payload,
            "dedupeId": f"{key}-{EVENT}", "sender": "chaos"}


def block_sub_workflow(b: Builder, seg: Segment) -> str:
    """The segment in a sub-workflow of its own (README "A side effect in a sub-workflow"), run by an Execute
    Workflow node with its options at their defaults; the sub-workflow is published before its caller."""
    sub_id = f"{b.case_id}sub{seg.number}"
    sub = DocsFlow(sub_id, f"chaos {b.case_id} segment {seg.step}", b.services_url, CREDENTIAL_ID)
    b.subs.append(side_effect_sub_workflow(sub, (f"Claim {seg.step}", {"scope": seg.step}),
                                           (f"Call {seg.step}", call_body("plain")), (f"Save {seg.step}", seg.step),
                                           provider=seg.provider))
    return str(b.f.node(f"Run {seg.step}", "n8n-nodes-base.executeWorkflow", 1.2, {
        "workflowId": {"__rl": True, "value": sub_id, "mode": "id"},
        "workflowInputs": {"mappingMode": "defineBelow", "value": {}, "matchingColumns": [], "schema": [],
                           "attemptToConvertTypes": False, "convertFieldsToString": True},
        "options": {}}, b.at()))


def block_wait(b: Builder, seg: Segment) -> str:
    """n8n's Wait node (After Time Interval, 1–3 s) before the segment's Claim. The Save before it (or the
    Resume Point) reaches it with no durable node between, so its lease covers the wait, and the Resume
    Point's output for that step leads to the same Wait: a resumed instance waits again (README "n8n's Wait
    node")."""
    return str(b.f.node(f"Wait {seg.step}", "n8n-nodes-base.wait", 1.1, {"amount": seg.wait_s, "unit": "seconds"},
                        b.at(), webhookId=f"{b.case_id}-wait-{seg.step}"))


def block_segment(b: Builder, seg: Segment, last: bool) -> tuple[str, str]:
    """[Wait →] Claim → [Code] → call (or IF → two calls → Merge, or Switch → 2–3 calls → Merge) → Save; Done
    Before → the same Save. Returns the segment's entry and exit nodes."""
    wait = block_wait(b, seg) if seg.wait_s else None
    entry, exit_ = _segment_body(b, seg, last)
    if wait is None:
        return entry, exit_
    b.f.link(wait, entry)
    return wait, exit_


def _segment_body(b: Builder, seg: Segment, last: bool) -> tuple[str, str]:
    if seg.shape == "sub":
        node = block_sub_workflow(b, seg)
        return node, node
    if seg.shape == "lines":
        return block_line_items(b, seg)
    claim = block_claim(b, seg)
    first_run = claim
    if seg.code:
        code = block_code_pass_through(b, seg)
        b.f.link(claim, code, 0)
        first_run = code
    if seg.shape == "branch":
        done = block_if_merge(b, seg, first_run)
    elif seg.shape == "switch":
        done = block_switch_merge(b, seg, first_run)
    else:
        done = block_call(b, seg, "plain", f"Call {seg.step}")
        b.f.link(first_run, done, 0)
    save = block_save(b, seg, last)
    b.f.link(done, save)
    b.f.link(claim, save, 1)  # Done Before
    return claim, save


@dataclass(frozen=True)
class Block:
    """A building block: its name in the coverage report, the function that builds it, whether a shape uses it."""

    name: str
    build: Callable[..., Any]
    used: Callable[[Shape], bool]


BLOCKS = (
    Block("Webhook, Respond to Webhook after Start", block_respond_accepted, lambda s: s.respond == RESPOND_NODE),
    Block("Webhook, When Last Node Finishes (Finished, Busy → No Operation)", block_answer_redeliveries,
          lambda s: s.respond == LAST_NODE),
    Block("Resume Trigger → the same Resume Point", block_resume_trigger, lambda s: True),
    Block("Resume Point with step outputs", block_resume_point, lambda s: len(s.segments) > 1),
    Block("Claim → call → Save", block_segment, lambda s: True),
    Block("IF on the business key → Merge", block_if_merge, lambda s: any(g.shape == "branch" for g in s.segments)),
    Block("Switch on a drawn field (2–3 outputs) → Merge", block_switch_merge,
          lambda s: any(g.shape == "switch" for g in s.segments)),
    Block("Split Out of line items → Claim keyed by the line", block_line_items,
          lambda s: any(g.shape == "lines" for g in s.segments)),
    Block("Loop Over Items of line items", block_loop_over_items,
          lambda s: any(g.shape == "lines" and g.loop for g in s.segments)),
    Block("Wait for Event, Signal from a carrier workflow", block_signal_workflow, lambda s: s.signal_via == "workflow"),
    Block("Wait for Event, Signal through the HTTP/JSON face", signal_request, lambda s: s.signal_via == "http"),
    Block("Code node keeping pairing", block_code_pass_through, lambda s: any(g.code for g in s.segments)),
    Block("Execute Workflow sub-workflow", block_sub_workflow, lambda s: any(g.shape == "sub" for g in s.segments)),
    Block("n8n Wait node (1–3 s) after a Save, before a Claim", block_wait, lambda s: any(g.wait_s for g in s.segments)),
    Block("n8n Retry On Fail vs a failing provider", block_http_retry, lambda s: any(g.http_retry for g in s.segments)),
    Block("Resume Point retry policy vs a failing provider", block_retry_policy, lambda s: s.retry_policy),
    Block("Complete Instance on the last Save", block_complete_on_last_save, lambda s: True),
)


def blocks_used(shape: Shape) -> list[str]:
    return [b.name for b in BLOCKS if b.used(shape)]


def build_workflows(case_id: str, path: str, shape: Shape, services_url: str) -> list[dict[str, Any]]:
    """The case's workflows, sub-workflows first. Resume Point outputs: 0 Start, 1 Resume, 2 Finished, 3 Busy,
    then one per step output (every segment's step but the last's, whose Save completes the instance)."""
    b = Builder(case_id, services_url)
    hook = block_webhook(b, path, shape.respond)
    trigger = block_resume_trigger(b)
    rp = block_resume_point(b, shape)
    b.f.link(hook, rp)
    b.f.link(trigger, rp)
    ends = [block_segment(b, seg, last=seg is shape.segments[-1]) for seg in shape.segments]
    first_entry = ends[0][0]
    if shape.respond == RESPOND_NODE:
        accepted = block_respond_accepted(b)
        b.f.link(rp, accepted, 0)        # Start
        b.f.link(accepted, first_entry)
    else:
        b.f.link(rp, first_entry, 0)     # Start
        block_answer_redeliveries(b, rp)
    b.f.link(rp, first_entry, 1)         # Resume: nothing saved yet
    for i in range(1, len(ends)):
        if shape.segments[i - 1].number == shape.event_after:
            block_wait_for_event(b, rp, ends[i - 1][1], ends[i][0], 4 + i - 1, 4 + len(shape.segments) - 1)
            continue
        b.f.link(ends[i - 1][1], ends[i][0])
        # The step output of the segment before; after line items, back to their Split Out (a resumed instance
        # walks its lines again, the saved ones leave their Claim by Done Before).
        b.f.link(rp, ends[i - 1 if shape.segments[i - 1].shape == "lines" else i][0], 4 + i - 1)
    signal = [block_signal_workflow(case_id, path, services_url)] if shape.signal_via == "workflow" else []
    return [*b.subs, *signal, b.f.workflow()]


def generate(seed: int, index: int, services_url: str) -> Case:
    """Case `index` of run `seed`: the same whatever the run's N."""
    rng = random.Random(f"{seed}:{index}")
    shape = draw_shape(rng)
    case_id = f"chaos{seed}x{index}"
    path = f"chaos-{seed}-{index}"
    keys = [f"s{seed}c{index}k{j}" for j in range(rng.randint(1, 3))]
    methods = {k: rng.choice(["card", "account"]) for k in keys}
    channels = {k: rng.choice(CHANNELS) for k in keys}
    lines = {k: rng.randint(1, MAX_LINES) for k in keys}
    signals = {k: round(rng.uniform(*SIGNAL_AFTER_S), 2) for k in keys} if shape.event_after else {}
    case = Case(seed, index, case_id, path, shape, blocks_used(shape),
                build_workflows(case_id, path, shape, services_url), keys, methods,
                draw_deliveries(rng, keys), draw_schedules(rng, shape, keys, lines), channels=channels, lines=lines,
                signal_after_s=signals)
    case.expected = expectations(case)
    return case


def delivery_body(case: Case, key: str) -> dict[str, Any]:
    """What a sender posts for `key` (every copy the same body: a re-delivery, never another order)."""
    return {"orderId": key, "amount": 42, "email": f"{key}@example.com", "method": case.methods[key],
            "channel": case.channels.get(key, CHANNELS[0]),
            "lines": [{"sku": sku} for sku in line_skus(case.lines.get(key, 1))]}


def reduce(case: Case, services_url: str, *, keys: int, segments: int, copies: bool, tag: str) -> Case:
    """A smaller case for the shrinker: its first `keys` keys, its first `segments` side effects (a sub-workflow
    never last), only each key's first delivery unless `copies`. Ids, paths and keys end in `tag`, so it runs
    beside the cases already in the stack."""
    segs = list(case.shape.segments[:max(1, segments)])
    while len(segs) > 1 and segs[-1].shape == "sub":
        segs.pop()
    shape = replace(case.shape, segments=tuple(segs),
                    event_after=case.shape.event_after if case.shape.event_after < len(segs) else 0)
    providers = {s.provider for s in segs}
    renamed = {k: f"{k}{tag}" for k in case.keys[:max(1, keys)]}

    def order(o: str) -> str:   # a key's or a line's (`<key>:<sku>`) order under the new key
        base, sep, line = o.partition(":")
        return f"{renamed[base]}{sep}{line}"

    workflow_id, path = f"{case.workflow_id}{tag}", f"{case.path}{tag}"
    small = Case(case.seed, case.index, workflow_id, path, shape, blocks_used(shape),
                 build_workflows(workflow_id, path, shape, services_url), list(renamed.values()),
                 {renamed[k]: m for k, m in case.methods.items() if k in renamed},
                 [replace(d, key=renamed[d.key]) for d in case.deliveries
                  if d.key in renamed and (copies or d.when == "first")],
                 [replace(s, key=order(s.key)) for s in case.schedules
                  if s.key.partition(":")[0] in renamed and s.provider in providers],
                 channels={renamed[k]: c for k, c in case.channels.items() if k in renamed},
                 lines={renamed[k]: n for k, n in case.lines.items() if k in renamed},
                 signal_after_s={renamed[k]: t for k, t in case.signal_after_s.items()
                                 if k in renamed and shape.event_after})
    small.expected = expectations(small)
    return small
