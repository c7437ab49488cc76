"""The retry policy of a failed instance: its checks, the backoff, and the verdict after a failure."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from .. import validation
from ..domain import Instance, RetryPolicy
from ..errors import InvalidArgument
from ..stores.base import Conn
from ..stores.instances import InstanceStore
from ..stores.waits import WaitStore

log = logging.getLogger(__name__)

MAX_BACKOFF_MS = 86_400_000
MAX_RESUMES = 1000


def check_policy(policy: RetryPolicy) -> RetryPolicy:
    """The policy with its defaults filled in; InvalidArgument naming the field that is out of range."""
    validation.in_range("retry_policy.max_automatic_resumes", policy.max_automatic_resumes, 0, MAX_RESUMES)
    validation.in_range("retry_policy.initial_backoff_ms", policy.initial_backoff_ms, 0, MAX_BACKOFF_MS)
    validation.in_range("retry_policy.max_backoff_ms", policy.max_backoff_ms, 0, MAX_BACKOFF_MS)
    if policy.max_backoff_ms and policy.max_backoff_ms < policy.initial_backoff_ms:
        raise InvalidArgument(f"retry_policy.max_backoff_ms ({policy.max_backoff_ms}) is below initial_backoff_ms "
                              f"({policy.initial_backoff_ms})")
    multiplier = policy.backoff_multiplier or 2.0
    if not (math.isfinite(multiplier) and 1.0 <= multiplier <= 10.0):
        raise InvalidArgument(f"retry_policy.backoff_multiplier must be 1 to 10 (0 means 2), got {multiplier}")
    if not (math.isfinite(policy.jitter) and 0.0 <= policy.jitter <= 1.0):
        raise InvalidArgument(f"retry_policy.jitter must be 0 to 1, got {policy.jitter}")
    return RetryPolicy(policy.max_automatic_resumes, policy.initial_backoff_ms, policy.max_backoff_ms, multiplier,
                       policy.jitter)


def backoff_ms(policy: RetryPolicy, attempt: int, rnd: Callable[[], float] = random.random) -> int:
    """Backoff before automatic resume `attempt` (1, 2, ...): exponential, capped, minus up to `jitter` of it."""
    if policy.initial_backoff_ms <= 0:
        return 0
    cap = policy.max_backoff_ms or MAX_BACKOFF_MS
    exponent = min(attempt - 1, 64)  # past 2^64 every factor is capped anyway
    base = min(float(cap), policy.initial_backoff_ms * policy.backoff_multiplier ** exponent)
    return max(0, int(base * (1.0 - policy.jitter * rnd())))


@dataclass(frozen=True)
class FailureVerdict:
    """What the retry policy made of one failed attempt: resumed now, parked for a backoff, or suspended."""

    instance: Instance
    resume_now: bool
    suspended: bool


class RetryRules:
    """The retry policy, applied inside the transaction that found the failure (the instance row locked)."""

    def __init__(self, instances: InstanceStore, waits: WaitStore, default_policy: RetryPolicy) -> None:
        self.instances = instances
        self.waits = waits
        self.default_policy = default_policy

    def policy_of(self, inst: Instance) -> RetryPolicy:
        return inst.retry_policy or self.default_policy

    async def suspend_txn(self, conn: Conn, inst: Instance, *, error: str, actor: str, now: datetime,
                          detail: str) -> Instance:
        """Suspends the (locked) instance with this error: its lease and any wait or wake-up dropped, until an
        operator moves it on."""
        done = await self.waits.update_txn(
            conn, inst.ref, now=now, suspended_at=now, lease_owner="", lease_expires_at=None, wake_at=None,
            wake_reason="", awaited_event="", attempt=inst.attempt, attempt_sequence=inst.last_sequence,
            last_error=error)
        await self.instances.add_event_txn(conn, inst.ref, "suspended", actor=actor, detail=detail)
        log.warning("instance suspended", extra={"namespace": inst.ref.namespace, "workflow_id": inst.ref.workflow_id,
                                                 "instance_key": inst.ref.instance_key, "attempts": inst.attempt,
                                                 "error": error})
        return done

    async def after_failure_txn(self, conn: Conn, inst: Instance, *, error: str, actor: str, now: datetime,
                                park_always: bool) -> FailureVerdict:
        """Counts one automatic resume of the failed instance and decides: now, after a backoff, or suspended.

        park_always: release the lease even without backoff (FailInstance: the
        execution that failed is done; the Resume Trigger takes it at once).
        """
        policy = self.policy_of(inst)
        attempt = inst.attempt + 1
        of = str(policy.max_automatic_resumes) if policy.max_automatic_resumes else "unlimited"
        if policy.max_automatic_resumes and attempt > policy.max_automatic_resumes:
            done = await self.suspend_txn(
                conn, inst, error=error, actor=actor, now=now,
                detail=f"after {inst.attempt} automatic resumes (max {policy.max_automatic_resumes}): {error}")
            return FailureVerdict(done, resume_now=False, suspended=True)
        delay = backoff_ms(policy, attempt)
        if delay > 0 or park_always:
            at = now + timedelta(milliseconds=delay)
            done = await self.waits.update_txn(
                conn, inst.ref, now=now, wake_at=at, wake_reason="retry", lease_owner="", lease_expires_at=None,
                awaited_event="", attempt=attempt, attempt_sequence=inst.last_sequence, last_error=error)
            await self.instances.add_event_txn(
                conn, inst.ref, "retry_scheduled", actor=actor,
                detail=f"attempt {attempt} of {of}, backoff {delay / 1000:.3f} s, next at {at.isoformat()}: {error}")
            return FailureVerdict(done, resume_now=False, suspended=False)
        done = await self.waits.update_txn(conn, inst.ref, now=now, attempt=attempt,
                                           attempt_sequence=inst.last_sequence, last_error=error)
        await self.instances.add_event_txn(conn, inst.ref, "automatic_resume", actor=actor,
                                           detail=f"attempt {attempt} of {of}, backoff 0 s: {error}")
        return FailureVerdict(done, resume_now=True, suspended=False)
