"""Waiting for the outside world and failing well: Await Event, Signal, the retry policy and operator redrive.

The rules live here; stores/waits.py holds their SQL, once for both backends.
Every mutating call locks the instance row first (InstanceStore.get_txn with
for_update), so a signal, a wait, a claim and an operator's action on one
instance run one after another, on any number of sidecar replicas.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from .. import validation
from ..domain import (
    AwaitOutcome,
    Instance,
    InstanceRef,
    InstanceStatus,
    MailboxEvent,
    NewEvent,
    Page,
    ResumeReason,
    RetryPolicy,
    RunState,
    SignalOutcome,
)
from ..errors import FailedPrecondition, InvalidArgument, NotFound, TooLarge
from ..logs import instance_key_var
from ..stores.base import Conn, Database
from ..stores.instances import InstanceStore
from ..stores.waits import WaitStore

log = logging.getLogger(__name__)

MAX_TIMEOUT_SECONDS = 31_622_400
MAX_BACKOFF_MS = 86_400_000
MAX_RESUMES = 1000


def _check_ref(ref: InstanceRef) -> None:
    validation.identifier("workflow_id", ref.workflow_id)
    validation.identifier("instance_key", ref.instance_key)
    instance_key_var.set(ref.instance_key)


def _name(ref: InstanceRef) -> str:
    return f"{ref.workflow_id}/{ref.instance_key}"


async def _locked(instances: InstanceStore, conn: Conn, ref: InstanceRef, *, hint: str = "") -> Instance:
    """The instance, its row locked to the end of the transaction; NotFound when it does not exist."""
    inst = await instances.get_txn(conn, ref, for_update=True)
    if inst is None:
        raise NotFound(f"instance {_name(ref)} does not exist{hint}")
    return inst


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
            done = await self.waits.update_txn(
                conn, inst.ref, now=now, suspended_at=now, lease_owner="", lease_expires_at=None, wake_at=None,
                wake_reason="", awaited_event="", attempt=inst.attempt, attempt_sequence=inst.last_sequence,
                last_error=error)
            await self.instances.add_event_txn(
                conn, inst.ref, "suspended", actor=actor,
                detail=f"after {inst.attempt} automatic resumes (max {policy.max_automatic_resumes}): {error}")
            log.warning("instance suspended", extra={"attempts": inst.attempt})
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


class EventService:
    """AwaitEvent, SignalInstance and ListEvents."""

    def __init__(self, db: Database, instances: InstanceStore, waits: WaitStore, *, max_payload_bytes: int,
                 default_lease_seconds: int) -> None:
        self.db = db
        self.instances = instances
        self.waits = waits
        self.max_payload_bytes = max_payload_bytes
        self.default_lease_seconds = default_lease_seconds

    async def await_event(self, ref: InstanceRef, *, execution_id: str, event_name: str,
                          deadline: datetime | None, timeout_seconds: int | None
                          ) -> tuple[AwaitOutcome, Instance, MailboxEvent | None]:
        _check_ref(ref)
        validation.identifier("execution_id", execution_id)
        validation.identifier("event_name", event_name)
        if timeout_seconds is not None and not 1 <= timeout_seconds <= MAX_TIMEOUT_SECONDS:
            raise InvalidArgument(f"timeout_seconds must be 1 to {MAX_TIMEOUT_SECONDS}, got {timeout_seconds}")

        async def txn(conn: Conn) -> tuple[AwaitOutcome, Instance, MailboxEvent | None]:
            inst = await _locked(self.instances, conn, ref)
            if inst.status is not InstanceStatus.RUNNING:
                raise FailedPrecondition(f"instance {_name(ref)} is {inst.status.value}; only running instances "
                                         "can wait for an event")
            now = await self.waits.now_txn(conn)
            # A repeated call: the same wait already ended with an event this execution took, or is parked.
            if inst.wait_outcome == "event" and inst.wait_event_id is not None and inst.lease_owner == execution_id:
                taken = await self.waits.get_event_txn(conn, ref, inst.wait_event_id)
                if taken is not None and taken.event_name == event_name:
                    return AwaitOutcome.RECEIVED, inst, taken
            if inst.awaited_event == event_name and not inst.lease_owner:
                return AwaitOutcome.WAITING, inst, None
            pending = await self.waits.oldest_pending_txn(conn, ref, event_name)
            if pending is not None:
                taken = await self.waits.consume_txn(conn, ref, pending.id, sequence=inst.last_sequence,
                                                     consumed_by=execution_id, now=now)
                assert taken is not None, "the instance lock keeps other consumers out"
                lease = inst.lease_seconds or self.default_lease_seconds
                done = await self.waits.update_txn(
                    conn, ref, now=now, awaited_event="", wake_at=None, wake_reason="", wait_outcome="event",
                    wait_sequence=inst.last_sequence, wait_event_id=taken.id, lease_owner=execution_id,
                    lease_expires_at=now + timedelta(seconds=lease))
                await self.instances.add_event_txn(conn, ref, "event_received", actor=execution_id,
                                                   detail=f"{event_name} (dedupe id {taken.dedupe_id}), from the mailbox")
                return AwaitOutcome.RECEIVED, done, taken
            until = deadline if deadline is not None else (
                now + timedelta(seconds=timeout_seconds) if timeout_seconds is not None else None)
            done = await self.waits.update_txn(
                conn, ref, now=now, awaited_event=event_name, wake_at=until,
                wake_reason="timeout" if until is not None else "", wait_outcome="", wait_event_id=None,
                lease_owner="", lease_expires_at=None)
            await self.instances.add_event_txn(
                conn, ref, "awaiting_event", actor=execution_id,
                detail=event_name + (f", timeout at {until.isoformat()}" if until is not None else ""))
            return AwaitOutcome.WAITING, done, None

        return await self.db.transaction(txn)

    async def signal(self, ref: InstanceRef, *, event_name: str, dedupe_id: str, payload_json: bytes | None,
                     sender: str) -> tuple[SignalOutcome, MailboxEvent, Instance]:
        _check_ref(ref)
        validation.identifier("event_name", event_name)
        validation.identifier("dedupe_id", dedupe_id)
        validation.identifier("sender", sender, required=False)
        if payload_json:
            if len(payload_json) > self.max_payload_bytes:
                raise TooLarge(f"payload_json is {len(payload_json)} bytes; the limit is {self.max_payload_bytes} "
                               "bytes (DURABLE_MAX_STATE_BYTES)")
            validation.json_bytes("payload_json", payload_json)
        new = NewEvent(ref, event_name, dedupe_id, payload_json or None, sender)

        async def txn(conn: Conn) -> tuple[SignalOutcome, MailboxEvent, Instance]:
            inst = await _locked(self.instances, conn, ref, hint="; a signal never starts an instance")
            seen = await self.waits.by_dedupe_txn(conn, ref, dedupe_id)
            if seen is not None:
                return SignalOutcome.DUPLICATE, seen, inst
            if inst.status.final:
                raise FailedPrecondition(f"instance {_name(ref)} is {inst.status.value}; it takes no more events")
            now = await self.waits.now_txn(conn)
            stored = await self.waits.insert_event_txn(conn, new, now=now)
            if stored is None:  # the unique key saw it first: a duplicate after all
                seen = await self.waits.by_dedupe_txn(conn, ref, dedupe_id)
                assert seen is not None
                return SignalOutcome.DUPLICATE, seen, inst
            outcome = SignalOutcome.STORED
            if inst.status is InstanceStatus.RUNNING and inst.awaited_event == event_name:
                taken = await self.waits.consume_txn(conn, ref, stored.id, sequence=inst.last_sequence,
                                                     consumed_by=sender, now=now)
                assert taken is not None
                stored = taken
                inst = await self.waits.update_txn(
                    conn, ref, now=now, awaited_event="", wake_at=now, wake_reason="event", wait_outcome="event",
                    wait_sequence=inst.last_sequence, wait_event_id=stored.id)
                outcome = SignalOutcome.DELIVERED
            await self.instances.add_event_txn(conn, ref, "signalled", actor=sender,
                                               detail=f"{event_name} (dedupe id {dedupe_id}): {outcome.value}")
            return outcome, stored, inst

        return await self.db.transaction(txn)

    async def list_events(self, ref: InstanceRef, *, pending_only: bool,
                          page: Page) -> tuple[list[MailboxEvent], str]:
        _check_ref(ref)

        async def txn(conn: Conn) -> tuple[list[MailboxEvent], str]:
            if await self.instances.get_txn(conn, ref) is None:
                raise NotFound(f"instance {_name(ref)} does not exist")
            return await self.waits.list_events_txn(conn, ref, pending_only=pending_only, page=page)

        return await self.db.transaction(txn)


class RecoveryService:
    """An operator's RetryInstance and ResumeInstance (CancelInstance is InstanceService.finish)."""

    def __init__(self, db: Database, instances: InstanceStore, waits: WaitStore) -> None:
        self.db = db
        self.instances = instances
        self.waits = waits

    @staticmethod
    def _check(ref: InstanceRef, actor: str, reason: str) -> None:
        _check_ref(ref)
        validation.identifier("actor", actor)
        validation.text("reason", reason, required=True)

    async def _redrive_txn(self, conn: Conn, inst: Instance, *, kind: str, actor: str, reason: str) -> Instance:
        now = await self.waits.now_txn(conn)
        done = await self.waits.update_txn(
            conn, inst.ref, now=now, status=InstanceStatus.RUNNING.value, finished_at=None, error_message="",
            suspended_at=None, lease_owner="", lease_expires_at=None, awaited_event="", wake_at=now,
            wake_reason="redrive", wait_outcome="", wait_event_id=None, attempt=0, attempt_sequence=inst.last_sequence,
            last_error="")
        await self.instances.add_event_txn(conn, inst.ref, kind, actor=actor,
                                           detail=f"was {inst.status.value}, from sequence {inst.last_sequence}: "
                                                  f"{reason}")
        log.info("instance redriven", extra={"action": kind, "actor": actor})
        return done

    async def _act(self, ref: InstanceRef, *, kind: str, actor: str, reason: str,
                   refuse: Callable[[Conn, Instance], Awaitable[Instance | None]]) -> Instance:
        """Locks the instance, lets `refuse` raise (or return the instance to leave it as it is), then redrives it."""
        self._check(ref, actor, reason)

        async def txn(conn: Conn) -> Instance:
            inst = await _locked(self.instances, conn, ref)
            unchanged = await refuse(conn, inst)
            if unchanged is not None:
                return unchanged
            return await self._redrive_txn(conn, inst, kind=kind, actor=actor, reason=reason)

        return await self.db.transaction(txn)

    async def retry(self, ref: InstanceRef, *, actor: str, reason: str) -> Instance:
        async def refuse(conn: Conn, inst: Instance) -> Instance | None:
            if inst.status is InstanceStatus.RUNNING:
                return inst  # retried already (or never failed): nothing to redrive
            if inst.status in (InstanceStatus.COMPLETED, InstanceStatus.CANCELLED):
                raise FailedPrecondition(f"instance {_name(ref)} is {inst.status.value}; only suspended or failed "
                                         "instances can be retried")
            return None

        return await self._act(ref, kind="retried", actor=actor, reason=reason, refuse=refuse)

    async def resume(self, ref: InstanceRef, *, actor: str, reason: str) -> Instance:
        async def refuse(conn: Conn, inst: Instance) -> Instance | None:
            if inst.status is InstanceStatus.FAILED:
                raise FailedPrecondition(f"instance {_name(ref)} is failed; retry it (RetryInstance, "
                                         "`durable-sidecar instances retry`) to run it again")
            if inst.status.final:
                raise FailedPrecondition(f"instance {_name(ref)} is {inst.status.value}; it cannot be resumed")
            if inst.status is InstanceStatus.RUNNING:
                state = inst.run_state(await self.waits.now_txn(conn))
                if inst.wake_reason == "redrive" and state is RunState.SCHEDULED:
                    return inst  # resumed already, not yet claimed
                if state not in (RunState.WAITING, RunState.SCHEDULED):
                    raise FailedPrecondition(
                        f"instance {_name(ref)} is running and {state.value}: there is no wait to end "
                        "(a stalled instance is taken by the Resume Trigger)")
            return None

        return await self._act(ref, kind="resumed_by_operator", actor=actor, reason=reason, refuse=refuse)


def hand_out_reason(inst: Instance, claimed_as: ResumeReason) -> ResumeReason:
    """Why a claimed instance is handed out: the wait's end or the scheduled reason beats 'stalled'/'wake_up'."""
    if inst.wake_reason and claimed_as is ResumeReason.WAKE_UP:
        return ResumeReason(inst.wake_reason)
    if claimed_as is ResumeReason.STALLED and inst.wait_outcome:
        # The execution that took the event (or timeout) died before a checkpoint: hand it out again as such.
        return ResumeReason(inst.wait_outcome)
    return claimed_as
