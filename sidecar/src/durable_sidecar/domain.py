"""Typed records the services and stores exchange (no driver types cross this line)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class InstanceStatus(str, enum.Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self is not InstanceStatus.RUNNING


class StartOutcome(enum.Enum):
    STARTED = "started"
    RESUMED = "resumed"
    FINISHED = "finished"
    BUSY = "busy"


class ResumeReason(enum.Enum):
    STALLED = "stalled"
    WAKE_UP = "wake_up"


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

    @property
    def ref(self) -> InstanceRef:
        return InstanceRef(self.namespace, self.workflow_id, self.instance_key)


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
    lease_seconds: int


@dataclass(frozen=True)
class SavedCheckpoint:
    checkpoint: Checkpoint
    deduplicated: bool


@dataclass(frozen=True)
class StartResult:
    outcome: StartOutcome
    instance: Instance
    latest: Checkpoint | None


@dataclass(frozen=True)
class Resumable:
    instance: Instance
    reason: ResumeReason
    claim_token: str
    latest: Checkpoint | None


@dataclass(frozen=True)
class InstanceFilter:
    workflow_id: str = ""
    statuses: tuple[InstanceStatus, ...] = ()
    bound_version: int = 0
    stalled_only: bool = False
    key_prefix: str = ""


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
