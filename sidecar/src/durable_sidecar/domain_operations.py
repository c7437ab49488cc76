"""Typed records of bulk operations the services and stores exchange (no driver types cross this line)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class BulkAction(enum.Enum):
    """What a bulk operation does to each instance it takes (as the one-instance RPC of that name)."""

    RETRY = "retry"
    RESUME = "resume"
    CANCEL = "cancel"
    MOVE = "move"
    REPLAY = "replay"


class OperationStatus(enum.Enum):
    RUNNING = "running"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    COMPLETED = "completed"

    @property
    def final(self) -> bool:
        return self in (OperationStatus.CANCELLED, OperationStatus.COMPLETED)


@dataclass(frozen=True)
class Operation:
    """A bulk action over the instances of one namespace that match a filter, and where it stands."""

    id: int
    namespace: str
    action: BulkAction
    status: OperationStatus
    selector_json: str
    actor: str
    reason: str
    to_version: int
    replay_from_step: str
    matched_at_start: int
    acted: int
    skipped: int
    last_workflow_id: str
    last_instance_key: str
    last_skip: str
    owner: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
