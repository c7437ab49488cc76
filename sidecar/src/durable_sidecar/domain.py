"""Typed records the services and stores exchange (no driver types cross this line)."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from .domain_files import FileRef


class InstanceStatus(str, enum.Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Stored as 'running' with suspended_at set (see migration 0008); not final.
    SUSPENDED = "suspended"

    @property
    def final(self) -> bool:
        return self in (InstanceStatus.COMPLETED, InstanceStatus.FAILED, InstanceStatus.CANCELLED)


class StartOutcome(enum.Enum):
    STARTED = "started"
    RESUMED = "resumed"
    FINISHED = "finished"
    BUSY = "busy"
    # check_delivery: the instance exists and the sent start item is another delivery; nothing changed.
    DIFFERENT = "different"


class ResumeReason(enum.Enum):
    STALLED = "stalled"
    WAKE_UP = "wake_up"
    EVENT = "event"
    TIMEOUT = "timeout"
    RETRY = "retry"
    REDRIVE = "redrive"


class RunState(enum.Enum):
    """What a running instance does now (derived, never stored); NONE when it is not running."""

    NONE = ""
    ACTIVE = "active"
    WAITING = "waiting"
    SCHEDULED = "scheduled"
    STALLED = "stalled"


@dataclass(frozen=True)
class RetryPolicy:
    """Automatic resumes allowed without progress (0: no limit) and the backoff before each."""

    max_automatic_resumes: int = 0
    initial_backoff_ms: int = 0
    max_backoff_ms: int = 0  # 0: no cap beyond one day
    backoff_multiplier: float = 2.0
    jitter: float = 0.0


@dataclass(frozen=True)
class RetryPolicyGiven:
    """A retry policy as a caller chose it: each field left out (None) takes the sidecar's default."""

    max_automatic_resumes: int | None = None
    initial_backoff_ms: int | None = None
    max_backoff_ms: int | None = None
    backoff_multiplier: float | None = None
    jitter: float | None = None

    def over(self, defaults: RetryPolicy) -> RetryPolicy:
        """This policy, completed from `defaults`."""
        return RetryPolicy(
            max_automatic_resumes=defaults.max_automatic_resumes if self.max_automatic_resumes is None
            else self.max_automatic_resumes,
            initial_backoff_ms=defaults.initial_backoff_ms if self.initial_backoff_ms is None
            else self.initial_backoff_ms,
            max_backoff_ms=defaults.max_backoff_ms if self.max_backoff_ms is None else self.max_backoff_ms,
            backoff_multiplier=defaults.backoff_multiplier if self.backoff_multiplier is None
            else self.backoff_multiplier,
            jitter=defaults.jitter if self.jitter is None else self.jitter,
        )


@dataclass(frozen=True)
class InstanceRef:
    """The identity of an instance inside the caller's namespace."""

    namespace: str
    workflow_id: str
    instance_key: str


@dataclass(frozen=True)
class Instance:
    namespace: str
    workflow_id: str
    instance_key: str
    status: InstanceStatus
    bound_version: int
    version_label: str
    lease_owner: str
    lease_expires_at: datetime | None
    wake_at: datetime | None
    last_sequence: int
    last_step: str
    checkpoint_count: int
    resume_count: int
    error_message: str
    result_json: bytes | None
    created_by_execution_id: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    # The instance's lease length; 0 for an instance made before it was recorded
    # (it renews with the sidecar's default).
    lease_seconds: int = 0
    # Issue 15: the wait (event name, why wake_at is set), how the last wait ended
    # (while no newer checkpoint exists), the retry policy (None: the sidecar's
    # default), automatic resumes without progress, and suspension.
    awaited_event: str = ""
    wake_reason: str = ""
    wait_outcome: str = ""
    wait_event_id: int | None = None
    retry_policy: RetryPolicy | None = None
    attempt: int = 0
    last_error: str = ""
    suspended_at: datetime | None = None
    # Issue 44: its search fields (name, text or number), sorted by name; None where not read.
    search_fields: tuple[tuple[str, str | float], ...] | None = None

    @property
    def ref(self) -> InstanceRef:
        return InstanceRef(self.namespace, self.workflow_id, self.instance_key)

    def run_state(self, now: datetime) -> RunState:
        if self.status is not InstanceStatus.RUNNING:
            return RunState.NONE
        if self.awaited_event:
            return RunState.WAITING
        if self.wake_at is not None:
            return RunState.SCHEDULED
        if self.lease_expires_at is not None and self.lease_expires_at > now:
            return RunState.ACTIVE
        if self.lease_expires_at is None and not self.lease_owner:
            # Released without a wake-up: only an instance parked by an old sidecar; nothing will claim it.
            return RunState.SCHEDULED
        return RunState.STALLED


@dataclass(frozen=True)
class Checkpoint:
    """A stored checkpoint; state is None when the reader did not ask for it."""

    workflow_id: str
    instance_key: str
    sequence: int
    step_name: str
    sha256: str
    size_bytes: int
    stored_bytes: int
    execution_id: str
    node_name: str
    created_at: datetime
    state: bytes | None = None
    file_count: int = 0  # files it carries (FileService.ListCheckpointFiles lists them)


@dataclass(frozen=True)
class NewCheckpoint:
    """A checkpoint to save, validated by the service."""

    ref: InstanceRef
    step_name: str
    state: bytes
    sha256: str
    execution_id: str
    node_name: str
    expected_sequence: int | None
    lease_seconds: int  # 0: the instance's lease length
    add_step_result: bool = False  # state is the step's result, merged into the instance's state
    complete_key: KeyCompletion | None = None
    complete_instance: bool = False  # after the save, the instance is COMPLETED in the same transaction
    files: tuple[FileRef, ...] = ()  # the files it carries (checked by FileService before the save)


@dataclass(frozen=True)
class KeyCompletion:
    """An idempotency key a checkpoint save completes in its own transaction."""

    ref: KeyRef
    attempt: int
    result_json: bytes  # the result replayed to duplicates (the item's state_json when none was sent)


@dataclass(frozen=True)
class SavedCheckpoint:
    checkpoint: Checkpoint
    deduplicated: bool
    # The stored state, for a step result merged into the instance's state.
    state: bytes | None = None
    # The key the save completed (or found completed by the same attempt).
    completed_key: IdempotencyKey | None = None
    # The instance as the save completed it (complete_instance).
    completed_instance: Instance | None = None
    # The answer to the item's claim_next, when it was made.
    next_claim: Claimed | None = None


@dataclass(frozen=True)
class StartResult:
    outcome: StartOutcome
    instance: Instance
    latest: Checkpoint | None
    # Version binding: the version new instances bind to now, whether the
    # instance is bound to another one, and that one's snapshot when it is.
    current_version: int = 0
    version_mismatch: bool = False
    bound: Version | None = None
    # The instance's start item, when the caller asked for state and one is stored.
    start_item: bytes | None = None
    # How the instance's last wait ended, and its event, when no checkpoint was saved since.
    wait_outcome: ResumeReason | None = None
    event: MailboxEvent | None = None
    # The answer to claim_on_start, when it was made (a STARTED outcome only).
    start_claim: Claimed | None = None


@dataclass(frozen=True)
class Resumable:
    instance: Instance
    reason: ResumeReason
    claim_token: str
    latest: Checkpoint | None
    event: MailboxEvent | None = None


@dataclass(frozen=True)
class MailboxEvent:
    """One signal in an instance's durable mailbox."""

    id: int
    workflow_id: str
    instance_key: str
    event_name: str
    dedupe_id: str
    payload_json: bytes | None
    sender: str
    received_at: datetime
    consumed_at: datetime | None


@dataclass(frozen=True)
class NewEvent:
    """A signal to store, validated by the service."""

    ref: InstanceRef
    event_name: str
    dedupe_id: str
    payload_json: bytes | None
    sender: str


class SignalOutcome(enum.Enum):
    DELIVERED = "delivered"
    STORED = "stored"
    DUPLICATE = "duplicate"
    STARTED = "started"


class AwaitOutcome(enum.Enum):
    WAITING = "waiting"
    RECEIVED = "received"


@dataclass(frozen=True)
class InstanceFilter:
    workflow_id: str = ""
    statuses: tuple[InstanceStatus, ...] = ()
    bound_version: int = 0
    stalled_only: bool = False
    key_prefix: str = ""
    last_step: str = ""
    created_after: datetime | None = None  # inclusive
    created_before: datetime | None = None  # exclusive
    fields: tuple[FieldCondition, ...] = ()  # search fields, all must hold
    sort_field: str = ""  # list by this search field (only instances that have it)
    sort_descending: bool = False
    error_contains: str = ""  # the last error or the error message contains this text


class SearchOp(enum.Enum):
    EQ = "="
    LT = "<"
    LTE = "<="
    GT = ">"
    GTE = ">="


@dataclass(frozen=True)
class FieldCondition:
    """A search field compared with a value of its type (a number with numbers, a text with texts)."""

    name: str
    op: SearchOp
    value: str | float


@dataclass(frozen=True)
class PrunePolicy:
    workflow_id: str
    instance_key: str
    keep_last: int
    older_than_seconds: int
    dry_run: bool


@dataclass(frozen=True)
class PruneResult:
    deleted_count: int
    instance_count: int


@dataclass(frozen=True)
class Page:
    """Keyset paging: size and the opaque cursor the previous page returned."""

    size: int
    token: str


class KeyStatus(str, enum.Enum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"


class ClaimOutcome(enum.Enum):
    ACQUIRED = "acquired"
    DUPLICATE = "duplicate"
    IN_PROGRESS = "in_progress"


@dataclass(frozen=True)
class KeyRef:
    """The identity of an idempotency key inside the caller's namespace."""

    namespace: str
    scope: str
    key: str

    @property
    def derived_key(self) -> str:
        """Key to forward downstream: the same for every attempt and every replica, distinct per namespace."""
        identity = json.dumps(["durable.v1.idempotency", self.namespace, self.scope, self.key], ensure_ascii=False)
        return hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class IdempotencyKey:
    """A stored key; times are database times."""

    namespace: str
    scope: str
    key: str
    status: KeyStatus
    fingerprint: str
    attempt: int
    holder: str
    lease_expires_at: datetime | None
    result_json: bytes | None
    error_message: str
    expires_at: datetime
    created_at: datetime
    updated_at: datetime

    @property
    def ref(self) -> KeyRef:
        return KeyRef(self.namespace, self.scope, self.key)

    def lease_alive(self, now: datetime) -> bool:
        return (self.status is KeyStatus.IN_PROGRESS and self.lease_expires_at is not None
                and self.lease_expires_at > now)

    def expired(self, now: datetime) -> bool:
        """Past its expiry, unless a live lease still protects it (a holder is running)."""
        return self.expires_at <= now and not self.lease_alive(now)


@dataclass(frozen=True)
class NewClaim:
    """One claim, validated and fingerprinted by the service."""

    ref: KeyRef
    fingerprint: str
    lease_seconds: int
    ttl_seconds: int
    holder: str
    # The instance the claim works for: its lease holder may take the key over
    # from a holder that lost the instance.
    instance: InstanceRef | None = None
    # The payload as sent: its fingerprint before RFC 8785 (canonical.py,
    # Migration) is computed only when a stored fingerprint differs, so a key
    # claimed before the upgrade still matches it.
    payload_json: bytes = b""
    # SHA-256 of those raw bytes: an in-process replay knows the payload by it (memory/completed_keys.py).
    raw_sha256: str = ""


@dataclass(frozen=True)
class Claimed:
    outcome: ClaimOutcome
    key: IdempotencyKey


@dataclass(frozen=True)
class KeyCompleted:
    """A completion decided in a transaction; IdempotencyService.completed finishes it once that transaction committed."""

    key: IdempotencyKey
    now: datetime
    changed: bool  # False: the same attempt had completed it already (a retry)


@dataclass(frozen=True)
class KeyFilter:
    scope: str = ""
    statuses: tuple[KeyStatus, ...] = ()
    include_expired: bool = False
    stuck_only: bool = False  # in progress with a lapsed lease
    key_prefix: str = ""


@dataclass(frozen=True)
class ForcedRelease:
    """What an operator's forced release found and did."""

    before: IdempotencyKey
    after: IdempotencyKey
    released: bool  # False: the key was already released (failed); nothing changed
    lease_was_alive: bool


# --- Version binding -------------------------------------------------------


class ChangeKind(str, enum.Enum):
    VERSION_REGISTERED = "version_registered"
    INSTANCE_MOVED = "instance_moved"


@dataclass(frozen=True)
class Version:
    """A stored snapshot of a workflow definition; definition_json is None when the reader did not ask for it."""

    namespace: str
    workflow_id: str
    version: int
    content_hash: str
    n8n_version_id: str
    label: str
    note: str
    node_names: tuple[str, ...]
    created_by: str
    created_at: datetime
    definition_json: bytes | None = None


@dataclass(frozen=True)
class NewVersion:
    """A checked snapshot to register (content hash computed by the service)."""

    namespace: str
    workflow_id: str
    content_hash: str
    definition_json: bytes
    node_names: tuple[str, ...]
    n8n_version_id: str
    label: str
    note: str
    actor: str
    reason: str
    # The content hash before RFC 8785: a snapshot registered before the upgrade
    # still counts as the same content (canonical.py, Migration).
    legacy_content_hash: str = ""


@dataclass(frozen=True)
class Registered:
    version: Version
    created: bool


@dataclass(frozen=True)
class WorkflowHead:
    """Per-workflow row: the newest version number and the version new instances bind to."""

    latest_version: int
    current_version: int


@dataclass(frozen=True)
class WorkflowSummary:
    """A workflow of a namespace (AuditService.ListWorkflows): its registered versions and its instances."""

    workflow_id: str
    versions: int
    latest_version: int
    latest_label: str
    instances: int


@dataclass(frozen=True)
class MoveSelector:
    workflow_id: str
    instance_keys: tuple[str, ...] = ()
    statuses: tuple[InstanceStatus, ...] = ()
    from_version: int = 0


@dataclass(frozen=True)
class MoveCandidate:
    """An instance a move selected, with where its last checkpoint was saved."""

    instance_key: str
    bound_version: int
    last_step: str
    last_node: str


@dataclass(frozen=True)
class InstanceMove:
    instance_key: str
    from_version: int
    to_version: int
    last_step: str
    last_step_missing_in_target: bool


@dataclass(frozen=True)
class ChangeLogEntry:
    id: int
    kind: ChangeKind
    workflow_id: str
    instance_key: str
    from_version: int
    to_version: int
    actor: str
    reason: str
    created_at: datetime


# Audit events whose actor is the n8n execution that caused them (the others name a claimant or an operator).
EXECUTION_EVENT_KINDS = frozenset({"started", "resumed", "wake_scheduled", "completed", "failed"})


@dataclass(frozen=True)
class InstanceEvent:
    """One row of an instance's audit trail (durable_instance_events)."""

    id: int
    kind: str
    actor: str
    detail: str
    created_at: datetime

    @property
    def execution_id(self) -> str:
        return self.actor if self.kind in EXECUTION_EVENT_KINDS else ""


@dataclass(frozen=True)
class StatusCounts:
    """Instances by status under one filter, and how many running ones are stalled."""

    by_status: dict[InstanceStatus, int]
    stalled: int
