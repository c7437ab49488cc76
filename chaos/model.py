"""The chaos generator's vocabulary: what a case is made of (its shape, deliveries, provider schedules and
expectations) and the constants the drawing and the building blocks share."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

from chaos.history import ExpectedCall, LimitedCall

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

# Durable Limit on a side effect (issue 43), shared by every key of the case (its `customer`): a section of
# SECTION_PLACES at once around the call, or a rate of RATE_ITEMS per RATE_PERIOD_S before its Claim.
SECTION_PLACES = 1
RATE_ITEMS = 1
RATE_PERIOD_S = 2
# After a lines segment an order's items are its lines, which reach a Rate Limit together and take a slot each, so
# the limit there has a Burst of the most items an order brings and the same average rate: after one lines segment
# MAX_LINES per MAX_LINES × RATE_PERIOD_S. A second lines segment splits each of those items by the order's lines
# again (its Split Out of `body.lines` runs on every line's item), so after k of them an order brings up to
# MAX_LINES ** k items.

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
    limit: str = ""         # Durable Limit shared by the case's keys: "section" (Enter Section … Leave Section around
                            # the call), "rate" (Rate Limit before the Claim), "section-rate" (the section's Enter
                            # Section with Rate Limit Too); "" none
    lined: int = 0          # the lines segments before it: the order's items (up to MAX_LINES ** lined) reach the
                            # segment's limit together
    document: bool = False  # after the call, an HTTP Request downloads the order's document (a file on the item the
                            # Save checkpoints), and the next segment's call uploads it (multipart form-data)

    @property
    def step(self) -> str:
        return f"s{self.number}"


def items_at(seg: Segment) -> int:
    """The most items of one order that reach the segment's limit together: its lines after a lines segment, each
    split by the lines again after a second one."""
    return int(MAX_LINES ** seg.lined)


def rate_of(seg: Segment) -> tuple[int, int, int]:
    """A rate segment's Most Items, Per (seconds) and Burst: after lines segments, room for an order's items at
    once at the same average rate."""
    items = items_at(seg)
    return RATE_ITEMS * items, RATE_PERIOD_S * items, items


@dataclass(frozen=True)
class Shape:
    """The drawn structure of a case's workflow, before any node exists."""

    respond: str
    segments: tuple[Segment, ...]
    retry_policy: bool      # the Resume Point's retry policy, against a provider that fails
    event_after: int = 0    # the segment after whose Save the instance waits for the event "delivered" (0: none)
    signal_via: str = ""    # who signals it: "workflow" (the case's carrier workflow) or "http" (chaos, through a
                            # sidecar's HTTP/JSON face, SignalInstance)


def uploading(segments: tuple[Segment, ...]) -> frozenset[int]:
    """The numbers of the segments whose calls upload the order's document: each one after a segment that
    downloads it."""
    return frozenset(nxt.number for s, nxt in pairwise(segments) if s.document)


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
    limits: tuple[LimitedCall, ...] = ()        # side effects behind a Durable Limit the case's keys share


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
