"""Waiting for the outside world: Await Event, Signal and the mailbox (the retry policy is retries.py, an
operator's redrive recovery.py).

The rules live here; stores/waits.py holds their SQL, once for both backends.
Every mutating call locks the instance row first (InstanceStore.get_txn with
for_update), so a signal, a wait, a claim and an operator's action on one
instance run one after another, on any number of sidecar replicas.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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
    SignalOutcome,
)
from ..errors import FailedPrecondition, InvalidArgument, NotFound, TooLarge
from ..stores.base import Conn, Database
from ..stores.instances import InstanceStore
from ..stores.waits import WaitStore
from .instance_rows import check_ref, instance_name, locked_instance
from .recovery import RecoveryService
from .retries import RetryRules, backoff_ms, check_policy
from .signal_start import SignalStart, SignalStarts

# Where callers have imported them from: the retry policy and the operator's redrive have modules of their own.
__all__ = ["EventService", "RecoveryService", "RetryRules", "backoff_ms", "check_policy", "hand_out_reason"]

log = logging.getLogger(__name__)

MAX_TIMEOUT_SECONDS = 31_622_400


class EventService:
    """AwaitEvent, SignalInstance and ListEvents."""

    def __init__(self, db: Database, instances: InstanceStore, waits: WaitStore, *, max_payload_bytes: int,
                 default_lease_seconds: int) -> None:
        self.db = db
        self.instances = instances
        self.waits = waits
        self.max_payload_bytes = max_payload_bytes
        self.default_lease_seconds = default_lease_seconds
        # Signal-with-start (start_if_absent); without it such signals are refused.
        self.starts: SignalStarts | None = None
        # Called after a signal made its instance due now (an event delivered to its wait):
        # this replica's Resume Trigger streams claim at once instead of at their next poll (wiring.py).
        self.on_due: Callable[[], None] = lambda: None

    async def await_event(self, ref: InstanceRef, *, execution_id: str, event_name: str,
                          deadline: datetime | None, timeout_seconds: int | None
                          ) -> tuple[AwaitOutcome, Instance, MailboxEvent | None]:
        check_ref(ref)
        validation.identifier("execution_id", execution_id)
        validation.identifier("event_name", event_name)
        if timeout_seconds is not None and not 1 <= timeout_seconds <= MAX_TIMEOUT_SECONDS:
            raise InvalidArgument(f"timeout_seconds must be 1 to {MAX_TIMEOUT_SECONDS}, got {timeout_seconds}")

        async def txn(conn: Conn) -> tuple[AwaitOutcome, Instance, MailboxEvent | None]:
            inst = await locked_instance(self.instances, conn, ref)
            if inst.status is not InstanceStatus.RUNNING:
                raise FailedPrecondition(f"instance {instance_name(ref)} is {inst.status.value}; only running instances "
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

        outcome, done, event = await self.db.transaction(txn)
        if outcome is AwaitOutcome.WAITING and done.wake_at is not None:
            self.on_due()  # the Resume Trigger's streams plan their next claim for its timeout
        return outcome, done, event

    async def signal(self, ref: InstanceRef, *, event_name: str, dedupe_id: str, payload_json: bytes | None,
                     sender: str, start_if_absent: bool = False,
                     start_item_json: bytes = b"") -> tuple[SignalOutcome, MailboxEvent, Instance]:
        check_ref(ref)
        validation.identifier("event_name", event_name)
        validation.identifier("dedupe_id", dedupe_id)
        validation.identifier("sender", sender, required=False)
        if payload_json:
            if len(payload_json) > self.max_payload_bytes:
                raise TooLarge(f"payload_json is {len(payload_json)} bytes; the limit is {self.max_payload_bytes} "
                               "bytes (DURABLE_MAX_STATE_BYTES)")
            validation.json_bytes("payload_json", payload_json)
        if start_item_json and not start_if_absent:
            raise InvalidArgument("start_item_json is the start item of an instance the signal starts: "
                                  "set start_if_absent, or leave start_item_json empty")
        start: SignalStart | None = None
        if start_if_absent:
            if self.starts is None:
                raise InvalidArgument("start_if_absent is not served here (no instance service)")
            start = await self.starts.prepare(ref, start_item_json, actor=sender or "signal")
        new = NewEvent(ref, event_name, dedupe_id, payload_json or None, sender)

        async def txn(conn: Conn) -> tuple[SignalOutcome, MailboxEvent, Instance]:
            started = False
            inst = await self.instances.get_txn(conn, ref, for_update=True)
            if inst is None and start is not None:
                assert self.starts is not None
                created = await self.starts.start_txn(
                    conn, start, detail=f"by signal {event_name} (dedupe id {dedupe_id})")
                started = created is not None
                # A racing start's row (committed meanwhile) is the one instance: signal it as usual.
                inst = created or await self.instances.get_txn(conn, ref, for_update=True)
            if inst is None:
                raise NotFound(f"instance {instance_name(ref)} does not exist; a signal starts an instance only "
                               "with start_if_absent")
            seen = await self.waits.by_dedupe_txn(conn, ref, dedupe_id)
            if seen is not None:
                return SignalOutcome.DUPLICATE, seen, inst
            if inst.status.final:
                raise FailedPrecondition(f"instance {instance_name(ref)} is {inst.status.value}; it takes no more events")
            now = await self.waits.now_txn(conn)
            stored = await self.waits.insert_event_txn(conn, new, now=now)
            if stored is None:  # the unique key saw it first: a duplicate after all
                seen = await self.waits.by_dedupe_txn(conn, ref, dedupe_id)
                assert seen is not None
                return SignalOutcome.DUPLICATE, seen, inst
            outcome = SignalOutcome.STARTED if started else SignalOutcome.STORED
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

        outcome, event, inst = await self.db.transaction(txn)
        if outcome is SignalOutcome.STARTED and start is not None and self.starts is not None:
            self.starts.remember(start)
        if outcome is SignalOutcome.DELIVERED:
            # (An instance a signal STARTED is held for its delivery: nothing to wake.)
            self.on_due()
        return outcome, event, inst

    async def list_events(self, ref: InstanceRef, *, pending_only: bool,
                          page: Page) -> tuple[list[MailboxEvent], str]:
        check_ref(ref)

        async def txn(conn: Conn) -> tuple[list[MailboxEvent], str]:
            if await self.instances.get_txn(conn, ref) is None:
                raise NotFound(f"instance {instance_name(ref)} does not exist")
            return await self.waits.list_events_txn(conn, ref, pending_only=pending_only, page=page)

        return await self.db.transaction(txn)


def hand_out_reason(inst: Instance, claimed_as: ResumeReason) -> ResumeReason:
    """Why a claimed instance is handed out: the wait's end or the scheduled reason beats 'stalled'/'wake_up'."""
    if inst.wake_reason and claimed_as is ResumeReason.WAKE_UP:
        return ResumeReason(inst.wake_reason)
    if claimed_as is ResumeReason.STALLED and inst.wait_outcome:
        # The execution that took the event (or timeout) died before a checkpoint: hand it out again as such.
        return ResumeReason(inst.wait_outcome)
    return claimed_as
