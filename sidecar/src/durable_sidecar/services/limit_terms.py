"""Flow control's vocabulary (issue 43), shared by the limits' services: what a call may do over a limit, what
it answers, and the checks every limit call makes of its caller."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from .. import validation
from ..domain import Instance, InstanceRef, InstanceStatus
from ..errors import FailedPrecondition
from .instance_rows import check_ref, instance_name

MAX_PERIOD_MS = 86_400_000


class Over(enum.Enum):
    WAIT = "wait"
    REFUSE = "refuse"


class Outcome(enum.Enum):
    ACQUIRED = "acquired"
    ALLOWED = "allowed"
    WAITING = "waiting"
    BUSY = "busy"
    RUN = "run"
    DEBOUNCED = "debounced"


class Keep(enum.Enum):
    LAST = "last"
    FIRST = "first"


@dataclass(frozen=True)
class Answer:
    """What a limit call answers: the outcome, the instance after it, and the figures the outcome comes with."""

    outcome: Outcome
    instance: Instance
    holders: int = 0
    waiters: int = 0
    position: int = 0
    wait_ms: int = 0
    at: datetime | None = None  # a slot's time, or when a debounce burst ends


@dataclass(frozen=True)
class SectionRate:
    """A rate taken inside a section once its place is held (AcquireSlot's rate), as Throttle's terms."""

    limit: int
    period_ms: int
    burst: int = 1
    calls: int = 1


@dataclass(frozen=True)
class Released:
    released: bool
    granted: int
    holders: int
    waiters: int


def ms(delta: timedelta) -> int:
    return max(0, int(delta / timedelta(milliseconds=1) + 0.999))


def check_call(ref: InstanceRef, execution_id: str, limit_name: str, limit_key: str) -> None:
    check_ref(ref)
    validation.identifier("execution_id", execution_id)
    validation.identifier("limit_name", limit_name)
    validation.identifier("limit_key", limit_key)

def leased(inst: Instance, ref: InstanceRef, execution_id: str, now: datetime) -> Instance:
    """The caller's instance (locked first, then the key's row, which tells the time): it must run and the
    execution must hold its lease."""
    if inst.status is not InstanceStatus.RUNNING or inst.suspended_at is not None:
        state = "suspended" if inst.suspended_at is not None else inst.status.value
        raise FailedPrecondition(f"instance {instance_name(ref)} is {state}; only running instances pass limits")
    if inst.lease_owner != execution_id or inst.lease_expires_at is None or inst.lease_expires_at <= now:
        held = (f"held by {inst.lease_owner}" if inst.lease_owner and inst.lease_expires_at
                and inst.lease_expires_at > now else "not held")
        raise FailedPrecondition(f"execution {execution_id} does not hold the lease of instance "
                                 f"{instance_name(ref)} ({held}): start or resume it first (Resume Point)")
    return inst
