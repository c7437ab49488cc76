"""A seeded generator of valid durable workflows, their deliveries, their providers' schedules and what must come out.

One case is drawn from `random.Random(f"{seed}:{index}")`, so it is the same whatever N is, and `--case`
replays it alone. Every workflow is written the way node-package/README.md says, from our nodes at their
newest versions (e2e/scenarios.py DocsFlow) with their options at their defaults, plus n8n core nodes.

A case is built by building blocks, one function each (`BLOCKS`). To add one: decide it in `draw_shape`,
write its function and wire it in `build_workflows` (chaos/blocks.py), say what it changes in `expectations`, and move it from
"still to do" to the list in docs/testing.md.
"""


from __future__ import annotations

import random
from dataclasses import replace
from itertools import pairwise
from typing import Any

from chaos.blocks import blocks_used, build_workflows
from chaos.history import ExpectedCall, LimitedCall
from chaos.model import (
    CHANNELS,
    LAST_NODE,
    MAX_LINES,
    PROVIDERS,
    RESPOND_NODE,
    RETRY_POLICY_RESUMES,
    SECTION_PLACES,
    SIGNAL_AFTER_S,
    SLOW_S,
    STALL_S,
    Case,
    Delivery,
    Expected,
    ProviderSchedule,
    Segment,
    Shape,
    items_at,
    rate_of,
    uploading,
)
from chaos.providers import sent_document

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
    segments = draw_limits(rng, segments)
    segments = draw_documents(rng, segments)
    return Shape(respond, tuple(segments), retry_policy, event_after, signal_via)


def draw_documents(rng: random.Random, segments: list[Segment]) -> list[Segment]:
    """The order's document (a file) downloaded after a quarter of the side effects' calls, saved with their step,
    and uploaded by the next side effect's call. Neither side in a sub-workflow (the file would stay in the
    caller) nor on line items (a Split Out drops the files), never after the last side effect, and no call that
    uploads a document downloads one: a resumed instance must send the file its Save kept."""
    out: list[Segment] = []
    for s, nxt in zip(segments, [*segments[1:], None], strict=True):
        fits = (nxt is not None and s.shape not in ("sub", "lines") and nxt.shape not in ("sub", "lines")
                and not (out and out[-1].document))
        out.append(replace(s, document=True) if fits and rng.random() < 0.25 else s)
    return out


def draw_limits(rng: random.Random, segments: list[Segment]) -> list[Segment]:
    """A Durable Limit (docs/nodes.md) on some side effects, shared by the case's keys: a section (one call at a
    time), a rate (RATE_ITEMS per RATE_PERIOD_S), or both in one Enter Section (Rate Limit Too; only where an
    order brings one item, before any lines segment). Not on a sub-workflow or line items (their Claims are inside a
    loop or another workflow), and no rate where n8n's Retry On Fail sends the call again without the limit. On a
    segment after a lines segment the order's items are still its lines, which reach the limit together
    (docs/flow-control.md "Several items of one instance"): a rate there has a Burst of the most items an order
    brings (model.items_at: a second lines segment splits each line's item by the lines again)."""
    out = []
    lined = 0
    for s in segments:
        kinds = ([] if s.shape in ("sub", "lines") else ["section"] if s.http_retry
                 else ["section", "rate", "section-rate"] if lined == 0 else ["section", "rate"])
        drawn = replace(s, limit=rng.choice(kinds), lined=lined) if kinds and rng.random() < 0.25 else s
        out.append(drawn)
        lined += s.shape == "lines"
    return out


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
        uploads = uploading(shape.segments)
        calls = tuple(call for s in shape.segments for call in (
            [ExpectedCall(s.provider, s.step, "plain", sku) for sku in skus] if s.shape == "lines" else
            [ExpectedCall(s.provider, s.step, segment_logic(s, case.methods[key], case.channels.get(key, CHANNELS[0])),
                          file=sent_document(key) if s.number in uploads else None)]))
        trail = tuple(step for s in shape.segments for step in [s.step] * (len(skus) if s.shape == "lines" else 1))
        # Each failure under the retry policy costs an execution, the lease's release (~5 s) and its backoff.
        bound = 60.0 + sum(s.delay_s for s in scheds) + (20.0 * fail_first if shape.retry_policy else 3.0 * fail_first)
        bound += sum(2 * s.wait_s for s in shape.segments)  # a resumed instance waits again
        bound += case.signal_after_s.get(key, 0.0)
        bound += limit_wait_s(case, key)
        out[key] = Expected(case.workflow_id, key, trail, calls, shape.retry_policy, fail_first,
                            shape.retry_policy and fail_first > RETRY_POLICY_RESUMES, bound,
                            tuple(s.step for s in shape.segments if s.shape == "lines"),
                            tuple(c for s in shape.segments if s.limit for c in limited_calls(s)))
    return out


def limited_calls(seg: Segment) -> list[LimitedCall]:
    """What the oracle checks at the segment's provider: a section's places, a rate, or both (a section with Rate
    Limit Too)."""
    out = []
    if seg.limit in ("section", "section-rate"):
        out.append(LimitedCall(seg.provider, "section", SECTION_PLACES))
    if seg.limit in ("rate", "section-rate"):
        most, period_s, burst = rate_of(seg)
        out.append(LimitedCall(seg.provider, "rate", most, float(period_s), burst))
    return out


def limit_wait_s(case: Case, key: str) -> float:
    """What waiting for the case's other keys at its limits may add: at a section, their calls (each with its
    provider's delay and a retry policy's backoff); at a rate, their slots; and the park and wake-up of each turn."""
    others = [k for k in case.keys if k != key]
    extra = 0.0
    for seg in case.shape.segments:
        if seg.limit in ("section", "section-rate"):
            extra += sum(s.delay_s + 20.0 * s.fail_first + 10.0 for s in case.schedules
                         if s.provider == seg.provider and s.key in others)
        if seg.limit in ("rate", "section-rate"):
            most, period_s, _ = rate_of(seg)
            slots = items_at(seg)  # an order's items take a slot each
            extra += len(others) * (slots * period_s / most + 10.0)
    return extra


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
    return {"orderId": key, "customer": case.workflow_id, "amount": 42, "email": f"{key}@example.com",
            "method": case.methods[key],
            "channel": case.channels.get(key, CHANNELS[0]),
            "lines": [{"sku": sku} for sku in line_skus(case.lines.get(key, 1))]}


def simpler(seg: Segment) -> Segment | None:
    """The segment with the fewest nodes that still calls its provider once per key: no IF, Switch or line items
    (one plain Claim → call → Save), no Code node, no n8n Wait, no Durable Limit, no document; None if it is that already, or a sub-workflow
    (which the shrinker drops with the side effects after it). Retry On Fail stays: a failing provider needs it."""
    if seg.shape == "sub":
        return None
    plain = replace(seg, shape="plain", code=False, outputs=0, wait_s=0, loop=False, limit="", document=False)
    return None if plain == seg else plain


def reduce(case: Case, services_url: str, *, keys: int, segments: int, copies: bool, tag: str,
           plain: frozenset[int] = frozenset()) -> Case:
    """A smaller case for the shrinker: its first `keys` keys, its first `segments` side effects (a sub-workflow
    never last), the side effects numbered in `plain` made `simpler`, only each key's first delivery unless
    `copies`. Ids, paths and keys end in `tag`, so it runs beside the cases already in the stack."""
    segs = [(simpler(s) or s) if s.number in plain else s for s in case.shape.segments[:max(1, segments)]]
    while len(segs) > 1 and segs[-1].shape == "sub":
        segs.pop()
    segs[-1] = replace(segs[-1], document=False)    # no side effect after it to upload the document
    shape = replace(case.shape, segments=tuple(segs),
                    event_after=case.shape.event_after if case.shape.event_after < len(segs) else 0)
    providers = {s.provider for s in segs}
    # A line-item side effect made plain calls its provider once per key: its first line's schedule is the key's.
    unlined = {s.provider for s, was in zip(segs, case.shape.segments, strict=False)
               if was.shape == "lines" and s.shape != "lines"}
    renamed = {k: f"{k}{tag}" for k in case.keys[:max(1, keys)]}

    def order(o: str) -> str:   # a key's or a line's (`<key>:<sku>`) order under the new key
        base, sep, line = o.partition(":")
        return f"{renamed[base]}{sep}{line}"

    def kept(sched: ProviderSchedule) -> bool:
        base, _, line = sched.key.partition(":")
        if base not in renamed or sched.provider not in providers:
            return False
        return sched.provider not in unlined or line == line_skus(1)[0]

    def rekeyed(sched: ProviderSchedule) -> ProviderSchedule:
        if sched.provider in unlined:
            return replace(sched, key=renamed[sched.key.partition(":")[0]])
        return replace(sched, key=order(sched.key))

    workflow_id, path = f"{case.workflow_id}{tag}", f"{case.path}{tag}"
    small = Case(case.seed, case.index, workflow_id, path, shape, blocks_used(shape),
                 build_workflows(workflow_id, path, shape, services_url), list(renamed.values()),
                 {renamed[k]: m for k, m in case.methods.items() if k in renamed},
                 [replace(d, key=renamed[d.key]) for d in case.deliveries
                  if d.key in renamed and (copies or d.when == "first")],
                 [rekeyed(s) for s in case.schedules if kept(s)],
                 channels={renamed[k]: c for k, c in case.channels.items() if k in renamed},
                 lines={renamed[k]: n for k, n in case.lines.items() if k in renamed},
                 signal_after_s={renamed[k]: t for k, t in case.signal_after_s.items()
                                 if k in renamed and shape.event_after})
    small.expected = expectations(small)
    return small
