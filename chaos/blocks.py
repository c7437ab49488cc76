"""The building blocks of a chaos case's workflow, one function each (see chaos/generator.py): written as
node-package/README.md and docs/nodes.md tell users to wire them, from our nodes at their newest versions."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness import CREDENTIAL_ID
from scenarios import DocsFlow, side_effect_sub_workflow

from chaos.model import (
    CHANNELS,
    EVENT,
    HTTP_RETRY_TRIES,
    LAST_NODE,
    RESPOND_NODE,
    RETRY_POLICY_BACKOFF_S,
    RETRY_POLICY_RESUMES,
    SECTION_PLACES,
    Case,
    Segment,
    Shape,
    rate_of,
    uploading,
)
from chaos.providers import DOCUMENT_FIELD

# --- building blocks: one function each -----------------------------------------------------------------


class Builder:
    """The case's workflow under construction (DocsFlow: our nodes at their newest versions, one credential)."""

    def __init__(self, case_id: str, services_url: str) -> None:
        self.f = DocsFlow(case_id, f"chaos {case_id}", services_url, CREDENTIAL_ID)
        self.services_url = services_url
        self.case_id = case_id
        self.subs: list[dict[str, Any]] = []
        self.col = 0
        self.uploads: frozenset[int] = frozenset()     # the segments whose calls upload the order's document

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
    """A Code node that returns its items and keeps pairing (each item paired to its input); before a call that
    uploads the order's document it returns their files too."""
    files = " binary: item.binary," if seg.number in b.uploads else ""
    return str(b.f.node(f"Code {seg.step}", "n8n-nodes-base.code", 2, {
        "jsCode": f"return $input.all().map((item, i) => ({{ json: item.json,{files} pairedItem: {{ item: i }} }}));"},
        b.at(-1)))


def block_http_retry(b: Builder, call: str) -> None:
    """n8n's Retry On Fail on the call (3 tries, 1 s apart), against a provider that fails fewer times."""
    b.set_node(call, retryOnFail=True, maxTries=HTTP_RETRY_TRIES, waitBetweenTries=1000)


def block_call(b: Builder, seg: Segment, logic: str, name: str, row: int = -1) -> str:
    """The side effect: an HTTP Request to the segment's provider with the Claim's derived Idempotency-Key (a
    JSON body, or a multipart form with the order's document after a segment that downloaded it)."""
    if seg.number in b.uploads:
        call = block_upload_call(b, seg, logic, name, row)
    else:
        call = b.f.call(name, seg.provider, call_body(logic), b.at(row))
    if seg.http_retry:
        block_http_retry(b, call)
    return call


def block_download(b: Builder, seg: Segment) -> str:
    """After the call, an HTTP Request (GET, Response Format: File) downloads the order's document into binary
    property `data`, keeping the item's JSON (the provider's answer, which names the order), so the Save after it
    checkpoints the file with the state. The Claim's Done Before skips it: the Save gets the files of the Save
    that completed the key."""
    return str(b.f.node(f"Download {seg.step}", "n8n-nodes-base.httpRequest", 4.2, {
        "method": "GET", "url": f"={b.services_url}/documents/{{{{ $json.orderId }}}}",
        "options": {"response": {"response": {"responseFormat": "file"}}}}, b.at(1)))


def block_upload_call(b: Builder, seg: Segment, logic: str, name: str, row: int) -> str:
    """The side effect after a segment that downloaded the order's document: the same call as a multipart form
    (Body Content Type: Form-Data) whose fields are the order and the branch and whose part `document` is the
    n8n Binary File `data`, the file the previous Save checkpointed (restored by the Resume Point on a resume)."""
    return str(b.f.node(name, "n8n-nodes-base.httpRequest", 4.2, {
        "method": "POST", "url": f"{b.services_url}/{seg.provider}", "sendBody": True,
        "contentType": "multipart-form-data", "bodyParameters": {"parameters": [
            {"parameterType": "formData", "name": "orderId", "value": "={{ $json.body.orderId }}"},
            {"parameterType": "formData", "name": "logic", "value": logic},
            {"parameterType": "formBinaryData", "name": DOCUMENT_FIELD, "inputDataFieldName": "data"}]},
        "sendHeaders": True, "headerParameters": {"parameters": [
            {"name": "Idempotency-Key", "value": "={{ $json.idempotency.derivedKey }}"}]}, "options": {},
    }, b.at(row)))


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
    """The carrier's workflow (docs/nodes.md, Durable Instance; examples/carrier-webhook.json): Webhook (Using
    'Respond to Webhook' Node) → Durable Instance, Signal "delivered" to the case's workflow, Instance Key and
    Deduplication ID from the body, On Error: Continue (using error output) → Received; the error output →
    Not Accepted (the item's details.httpStatus: 409 a finished instance, 503 one not there yet) → Fail
    Execution."""
    f = DocsFlow(f"{case_id}signal", f"chaos {case_id} carrier", services_url, CREDENTIAL_ID)
    hook = f.node("Webhook", "n8n-nodes-base.webhook", 2.1, {"httpMethod": "POST", "path": f"{path}-signal",
                                                             "responseMode": RESPOND_NODE, "options": {}},
                  (0, 0), webhookId=f"{case_id}signal-hook")
    signal = f.node("Signal Delivered", "n8n-nodes-durable.durableInstance", 1, {
        "operation": "signal", "workflowId": case_id, "instanceKey": "={{ $json.body.orderId }}", "eventName": EVENT,
        "payloadJson": "={{ JSON.stringify($json.body) }}", "dedupeId": "={{ $json.body.eventId }}", "options": {}},
        (220, 0), credentials=f.cred, onError="continueErrorOutput")
    received = f.node("Received", "n8n-nodes-base.respondToWebhook", 1.5,
                      {"respondWith": "firstIncomingItem", "options": {}}, (440, 0))
    f.link(hook, signal)
    f.link(signal, received)
    f.link(signal, f.not_accepted((440, 200)), 1)
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
    """[Wait →] [Enter Section or Rate Limit →] Claim → [Code] → call (or IF → two calls → Merge, or Switch → 2–3
    calls → Merge) → [Download →] [Leave Section →] Save; Done Before → the same Save (or Leave Section). Returns
    the segment's entry and exit nodes."""
    wait = block_wait(b, seg) if seg.wait_s else None
    entry, exit_ = _segment_body(b, seg, last)
    if wait is None:
        return entry, exit_
    b.f.link(wait, entry)
    return wait, exit_


def limit_params(b: Builder, seg: Segment) -> dict[str, Any]:
    """The limit's name (one per case and side effect) and its key: the order's customer, which every key of the
    case shares, so the case's orders contend."""
    return {"limitName": f"{b.case_id}-{seg.step}", "limitKey": "={{ $json.body.customer }}"}


def block_enter_section(b: Builder, seg: Segment) -> tuple[str, str]:
    """Durable Limit Enter Section (Most at Once SECTION_PLACES; with the segment's rate when it is "section-rate",
    as Rate Limit Too) before the Claim, Leave Section (no Key) after the call, before the Save; the Claim's Done
    Before goes to the Leave Section too (node README "Flow control")."""
    most, period_s, _ = rate_of(seg)
    rate = ({"rateToo": True, "maxItems": most, "periodAmount": period_s, "periodUnit": "seconds"}
            if seg.limit == "section-rate" else {})
    enter = b.f.durable(f"Enter {seg.step}", "durableLimit", {
        "operation": "enterSection", **limit_params(b, seg), "maxHolders": SECTION_PLACES, **rate}, b.at())
    leave = b.f.durable(f"Leave {seg.step}", "durableLimit", {
        "operation": "leaveSection", "limitName": limit_params(b, seg)["limitName"]}, b.at(1))
    return enter, leave


def block_rate_limit(b: Builder, seg: Segment) -> str:
    """Durable Limit Rate Limit (Most Items RATE_ITEMS per RATE_PERIOD_S seconds) before the Claim, its options at
    their defaults; after lines segments, a Burst of the items an order brings (model.rate_of), as
    docs/flow-control.md says for a limit after a Split Out."""
    most, period_s, burst = rate_of(seg)
    return b.f.durable(f"Rate {seg.step}", "durableLimit", {
        "operation": "rateLimit", **limit_params(b, seg), "maxItems": most, "periodAmount": period_s,
        "periodUnit": "seconds", "options": {"burst": burst} if burst > 1 else {}}, b.at())


def _segment_body(b: Builder, seg: Segment, last: bool) -> tuple[str, str]:
    if seg.shape == "sub":
        node = block_sub_workflow(b, seg)
        return node, node
    if seg.shape == "lines":
        return block_line_items(b, seg)
    gate = leave = None
    if seg.limit in ("section", "section-rate"):
        gate, leave = block_enter_section(b, seg)
    elif seg.limit == "rate":
        gate = block_rate_limit(b, seg)
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
    if seg.document:
        download = block_download(b, seg)
        b.f.link(done, download)
        done = download
    save = block_save(b, seg, last)
    before_save = leave or save
    b.f.link(done, before_save)
    b.f.link(claim, before_save, 1)  # Done Before
    if leave is not None:
        b.f.link(leave, save)
    if gate is None:
        return claim, save
    b.f.link(gate, claim)
    return gate, save


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
    Block("Durable Limit Enter Section … Leave Section around the call, shared by the case's keys",
          block_enter_section, lambda s: any(g.limit == "section" for g in s.segments)),
    Block("Durable Limit Enter Section with Rate Limit Too … Leave Section around the call, shared by the case's keys",
          block_enter_section, lambda s: any(g.limit == "section-rate" for g in s.segments)),
    Block("Durable Limit Rate Limit before the Claim, shared by the case's keys", block_rate_limit,
          lambda s: any(g.limit == "rate" for g in s.segments)),
    Block("HTTP Request downloads the order's document (a file) before a Save; the next call uploads it (multipart)",
          block_download, lambda s: any(g.document for g in s.segments)),
)


def blocks_used(shape: Shape) -> list[str]:
    return [b.name for b in BLOCKS if b.used(shape)]


def build_workflows(case_id: str, path: str, shape: Shape, services_url: str) -> list[dict[str, Any]]:
    """The case's workflows, sub-workflows first. Resume Point outputs: 0 Start, 1 Resume, 2 Finished, 3 Busy,
    then one per step output (every segment's step but the last's, whose Save completes the instance)."""
    b = Builder(case_id, services_url)
    b.uploads = uploading(shape.segments)
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
