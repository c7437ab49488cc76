"""The facts a chaos run collects (deliveries, provider calls, the sidecar's rows, faults): plain data the oracle reads.

Times are seconds since the epoch (time.time() here, PostgreSQL's now() on the same machine).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class SentFile(NamedTuple):
    """A file a call carried as a multipart form's part: the form field, the file name, the MIME type, the SHA-256
    of the bytes and their number."""

    field: str
    name: str
    mime: str
    sha256: str
    size: int


class ExpectedCall(NamedTuple):
    """One side effect a key must have exactly one effective call of: the provider, the Claim's scope (the Save's
    step), the branch the call goes by, for a line item its own key (the Claim's Key), and the file every call of
    it must carry (the order's document, downloaded and saved by the side effect before; None: no file)."""

    provider: str
    scope: str
    logic: str
    line: str = ""
    file: SentFile | None = None

    def order(self, key: str) -> str:
        """The orderId the provider sees: the business key, or `<key>:<line>` for a line item."""
        return f"{key}:{self.line}" if self.line else key

    def guard_key(self, key: str) -> str:
        """The key the Guard stores: the instance key, or a line's `["<key>","<line>"]` (a Key counts within
        its instance)."""
        return json.dumps([key, self.line], separators=(",", ":")) if self.line else key


class LimitedCall(NamedTuple):
    """A side effect behind a Durable Limit that every key of its case shares: the provider's calls of those keys
    are at most `most` in flight at once ("section"), or at most `most` started per `period_s`, `burst` of them at
    once after a quiet spell ("rate")."""

    provider: str
    kind: str
    most: int
    period_s: float = 0.0
    burst: int = 1


def belongs_to(order: str, key: str) -> bool:
    """Whether a provider's orderId is the key's own or one of its line items'."""
    return order == key or order.startswith(f"{key}:")


@dataclass(frozen=True)
class Expectation:
    """What the generator says one key must come to (chaos.generator.Expected, without the generator's types)."""

    case: int
    wave: int
    workflow_id: str
    key: str
    trail: tuple[str, ...]
    calls: tuple[ExpectedCall, ...]             # exactly one effective call each
    suspension_allowed: bool                    # the schedule fails more often than the retry policy resumes
    retry_policy: bool
    base_bound_s: float                         # its time to complete without faults
    # Steps saved once per line item: a resumed instance walks its lines again (the charged ones leave the Claim
    # by Done Before and are saved again), so their run in the trail may be longer than the lines.
    rewalked: tuple[str, ...] = ()
    limits: tuple[LimitedCall, ...] = ()        # shared with the other keys of its case (same `case` and `wave`)


@dataclass(frozen=True)
class DeliveryFact:
    """One delivery of a key as a sender made it (re-posting every second until a 2xx, up to its give-up)."""

    case: int
    wave: int
    key: str
    copy: int
    when: str                   # "first", "concurrent", "after-completion"
    sent_at: float
    answered_at: float
    status: int                 # the last answer's HTTP status (0: no answer)
    attempts: int

    @property
    def acknowledged(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True)
class CallFact:
    """One call a provider received."""

    provider: str
    key: str                    # the body's orderId: the business key, or `<key>:<line>` for a line item
    idempotency_key: str
    at: float
    status: int                 # 200; 500 (scheduled failure); 409 (its key still being performed); 0 (still performing)
    effective: bool             # it performed the side effect (not a replay of the key's stored answer)
    reply_id: str
    logic: str                  # the branch the workflow took ("plain", "card", "account")
    end: float = 0.0            # when the provider answered it (0: still performing)
    files: tuple[SentFile, ...] = ()    # the files its multipart form carried


@dataclass(frozen=True)
class InstanceFact:
    workflow_id: str
    key: str
    status: str                 # running, completed, failed, cancelled
    suspended: bool             # at collection time
    created_at: float
    finished_at: float | None
    resume_count: int
    completed_events: int       # 'completed' rows in its audit trail
    operator_retries: int       # `durable-sidecar instances retry` runs chaos made after seeing it suspended
    was_suspended: bool         # chaos saw it suspended before it retried it


@dataclass(frozen=True)
class CheckpointFact:
    workflow_id: str
    key: str
    sequence: int
    step: str
    created_at: float
    state: dict[str, Any]


@dataclass(frozen=True)
class KeyFact:
    """An idempotency key row (scope, key) as the sidecar holds it."""

    scope: str
    key: str
    status: str                 # in_progress, completed, failed
    attempt: int
    result_id: str              # the "id" of its stored result ("" when none)
    updated_at: float


@dataclass(frozen=True)
class FaultFact:
    kind: str                   # chaos.faults.KINDS: "n8n-kill", "worker-freeze", "redis-kill", ...
    wave: int
    target: str
    at: float
    back_at: float              # when the killed part served again


@dataclass
class History:
    expectations: list[Expectation] = field(default_factory=list)
    deliveries: list[DeliveryFact] = field(default_factory=list)
    calls: list[CallFact] = field(default_factory=list)
    instances: list[InstanceFact] = field(default_factory=list)
    checkpoints: list[CheckpointFact] = field(default_factory=list)
    keys: list[KeyFact] = field(default_factory=list)
    faults: list[FaultFact] = field(default_factory=list)
    collected_at: float = 0.0       # when the sidecars' rows were read

    def instance(self, workflow_id: str, key: str) -> InstanceFact | None:
        return next((i for i in self.instances if i.workflow_id == workflow_id and i.key == key), None)

    def trail(self, workflow_id: str, key: str) -> list[CheckpointFact]:
        return sorted((c for c in self.checkpoints if c.workflow_id == workflow_id and c.key == key),
                      key=lambda c: c.sequence)

    def calls_of(self, provider: str, key: str) -> list[CallFact]:
        return sorted((c for c in self.calls if c.provider == provider and c.key == key), key=lambda c: c.at)

    def deliveries_of(self, key: str) -> list[DeliveryFact]:
        return [d for d in self.deliveries if d.key == key]

    def key_row(self, scope: str, key: str) -> KeyFact | None:
        return next((k for k in self.keys if k.scope == scope and k.key == key), None)
