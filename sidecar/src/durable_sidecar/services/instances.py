"""InstanceService: start-or-resume with leases, final states, wake-ups and claiming resumable work."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from .. import validation
from ..domain import (
    Checkpoint,
    IdempotencyKey,
    Instance,
    InstanceFilter,
    InstanceRef,
    InstanceStatus,
    NewClaim,
    Page,
    Resumable,
    ResumeReason,
    RetryPolicy,
    RetryPolicyGiven,
    StartOutcome,
    StartResult,
)
from ..errors import FailedPrecondition, InvalidArgument, NotFound
from ..logs import instance_key_var
from ..stores.base import Conn, Database, StartedNew
from ..stores.checkpoints import CheckpointStore
from ..stores.instances import InstanceStore
from ..stores.search_fields import SearchFieldStore
from ..stores.states import EncodedState
from ..stores.waits import WaitStore, policy_columns
from .audit import check_filter
from .checkpoints import CheckpointService
from .events import hand_out_reason
from .retries import RetryRules, check_policy
from .search_fields import Change, SearchFieldService, parse_changes, with_fields
from .sessions import caller_live
from .start_items import same_delivery
from .versions import VersionService

if TYPE_CHECKING:
    from .idempotency import ClaimItem, IdempotencyService

log = logging.getLogger(__name__)

MAX_DELAY_SECONDS = 31_622_400


# WatchResumable's poll interval, as the contract states it (milliseconds).
POLL_INTERVAL_MS = (100, 600_000)
# A resume stream waiting for a wake-up still ahead claims this long after it (the database's clock has passed it
# by then).
WAKE_MARGIN_S = 0.01


def _log_start(result: StartResult) -> None:
    # One line per call at DEBUG: at INFO it was a JSON line per order on the hot path.
    if log.isEnabledFor(logging.DEBUG):
        log.debug("start_or_resume", extra={"outcome": result.outcome.value, "sequence": result.instance.last_sequence,
                                            "bound_version": result.instance.bound_version,
                                            "version_mismatch": result.version_mismatch})


def _check_ref(ref: InstanceRef) -> None:
    validation.identifier("workflow_id", ref.workflow_id)
    validation.identifier("instance_key", ref.instance_key)
    instance_key_var.set(ref.instance_key)


_Claim = TypeVar("_Claim", "ClaimItem", NewClaim)


def _with_instance_lease(sent: ClaimItem, claim: _Claim, instance_lease_seconds: int) -> _Claim:
    """As the Guard claims: a claim_on_start sent with lease 0 takes the instance's lease, so both lapse together."""
    return replace(claim, lease_seconds=instance_lease_seconds) if sent.lease_seconds == 0 else claim


class InstanceService:
    def __init__(self, db: Database, instances: InstanceStore, checkpoints: CheckpointStore,
                 checkpoint_service: CheckpointService, versions: VersionService, *,
                 default_lease_seconds: int, waits: WaitStore,
                 default_retry_policy: RetryPolicy | None = None, keys: IdempotencyService | None = None) -> None:
        self.db = db
        self.instances = instances
        self.checkpoints = checkpoints
        self.checkpoint_service = checkpoint_service
        self.versions = versions
        self.default_lease_seconds = default_lease_seconds
        self.waits = waits
        self.retry = RetryRules(instances, waits, default_retry_policy or RetryPolicy())
        # Claims a start's claim_on_start; without it such starts are refused.
        self.keys = keys
        # Search fields shown with an instance (GetInstance, ListInstances), and set by starts; wiring.py sets both.
        self.fields: SearchFieldStore | None = None
        self.search: SearchFieldService | None = None
        # Prefix of claim tokens minted by this process (readable in the audit trail).
        self._claim_prefix = f"claim:{socket.gethostname()}:{os.getpid()}:"
        # How a watch stream sleeps between claims: until its poll interval, shutdown, or (wired to the session
        # service) leases freed by a session's end.
        self.wait_for_freed: Callable[[float, asyncio.Event], Awaitable[None]] = _sleep_or_stop
        # Called after a wake-up is scheduled: this replica's streams plan their next claim for it (wiring.py).
        self.on_due: Callable[[], None] = lambda: None
        # Told of each instance finish() made final, after the commit (limits hand its places on); wiring.py.
        self.on_finished: Callable[[InstanceRef], None] = lambda ref: None

    async def _latest_meta(self, conn: Conn, inst: Instance) -> Checkpoint | None:
        if inst.last_sequence == 0:
            return None
        return await self.checkpoints.get_txn(conn, inst.ref, inst.last_sequence, with_state=False)

    async def start_or_resume(
        self,
        ref: InstanceRef,
        *,
        execution_id: str,
        lease_seconds: int = 0,
        version_label: str = "",
        pinned_version: int = 0,
        definition_json: bytes = b"",
        claim_token: str = "",
        include_state: bool = False,
        start_item_json: bytes = b"",
        retry_policy: RetryPolicy | RetryPolicyGiven | None = None,
        claim_on_start: ClaimItem | None = None,
        wait_seconds: int = 0,
        check_delivery: bool = False,
        search_fields: bytes = b"",
        workflow_fingerprint: str = "",
    ) -> StartResult:
        """Starts or finds the instance; a new one binds the version being run (or the pinned one).

        The version being run is the sent definition's (registered first when
        new), else the workflow's current version, refreshed from n8n when API
        access is configured and a check is due or workflow_fingerprint is
        unfamiliar (see VersionService).

        lease_seconds 0 keeps the instance's lease length (the default for a new
        one); another value becomes its length when this call takes the lease.
        A new instance stores start_item_json with its STARTED event; an
        existing one keeps the item it started with.

        claim_on_start (the next Guard's key) is checked as a Claim item before
        anything is written and claimed once a STARTED outcome is decided; a
        claim that cannot be made then (a DomainError) leaves start_claim unset
        and the start stands.

        wait_seconds (the caller waits that long before its next durable call:
        an n8n Wait node) lengthens the lease this call takes, not the
        instance's lease length.

        check_delivery: an existing instance whose stored start item is another
        delivery than start_item_json (same_delivery) answers DIFFERENT before
        anything is written, whatever its status.

        An instance a signal started (SignalStarts) is held for its delivery:
        the first call with a start item replaces the signal's stand-in and,
        when nothing ran the instance yet, starts it (STARTED).
        """
        _check_ref(ref)
        fields: list[Change] = []
        if search_fields:
            if self.search is None:
                raise InvalidArgument("search_fields_json is not served here (no search field service)")
            fields = [(ref, parse_changes(search_fields, "search_fields_json"), "search_fields_json")]
        validation.identifier("execution_id", execution_id)
        validation.identifier("version_label", version_label, required=False)
        validation.identifier("claim_token", claim_token, required=False)
        validation.identifier("workflow_fingerprint", workflow_fingerprint, required=False, limit=128)
        requested_lease = validation.in_range("lease_seconds", lease_seconds, 1, 86_400, default=0)
        hold = validation.in_range("wait_seconds", wait_seconds, 1, 86_400, default=0)
        if pinned_version < 0:
            raise InvalidArgument("pinned_version must not be negative")
        if isinstance(retry_policy, RetryPolicyGiven):  # what the caller left out: this sidecar's defaults
            retry_policy = retry_policy.over(self.retry.default_policy)
        policy = check_policy(retry_policy) if retry_policy is not None else None
        checked_claim: NewClaim | None = None
        if claim_on_start is not None:
            if self.keys is None:
                raise InvalidArgument("claim_on_start is not served here (no idempotency service)")
            checked = (await self.keys.check_claims(ref.namespace, [claim_on_start], ["claim_on_start"]))[0]
            # What the start's statement claims for a new instance, whose lease is this one.
            checked_claim = _with_instance_lease(claim_on_start, checked, requested_lease or self.default_lease_seconds)
        start_item = None
        if start_item_json:
            self.checkpoint_service.check_state("start_item_json", start_item_json, object_only=True)
            start_item = self.checkpoints.encode(start_item_json)

        if fields:
            assert self.search is not None
            await self.search.check_room(fields)

        def lease_for(inst: Instance) -> int:
            return requested_lease or inst.lease_seconds or self.default_lease_seconds
        # Parsing and any HTTP call to n8n happen before the transaction opens.
        snapshot = await self.versions.snapshot_for_start(ref.namespace, ref.workflow_id, definition_json,
                                                          actor=execution_id, fingerprint=workflow_fingerprint)
        read = snapshot is not None and not definition_json  # n8n was read for this call
        if snapshot is None and not pinned_version and self.instances.one_statement_start:
            # A new instance bound to the workflow's current version: one statement.
            async def one(conn: Conn) -> StartedNew | None:
                return await self.instances.start_new_txn(
                    conn, ref, execution_id=execution_id, lease_seconds=requested_lease or self.default_lease_seconds,
                    version_label=version_label, start_item=start_item, start_item_bytes=len(start_item_json),
                    claim=checked_claim, hold_seconds=hold)

            started = await self.db.single(one)
            if started is not None:
                created = started.instance
                self.checkpoint_service.remember_start(ref, start_item_json, start_item)
                if policy is not None:  # the new instance's retry policy: one more short transaction
                    async def with_policy(conn: Conn) -> Instance:
                        return await self.waits.update_txn(conn, ref, now=await self.waits.now_txn(conn),
                                                           **policy_columns(policy))

                    created = await self.db.transaction(with_policy)
                # Bound to the version being run and labelled with the label sent: no mismatch.
                result = StartResult(StartOutcome.STARTED, created, None,
                                     start_item=start_item_json if include_state and start_item_json else None,
                                     current_version=started.current_version)
                _log_start(result)
                self.versions.ran(ref.namespace, ref.workflow_id, workflow_fingerprint, result.current_version,
                                  read=read)
                return await self._with_fields(fields, await self._claim_on_start(ref, result, claim_on_start,
                                                                                   started.claimed))

        delivered = False  # a signal-with-start's start item replaced by this delivery

        async def txn(conn: Conn) -> StartResult:
            binding = await self.versions.binding_txn(conn, ref.namespace, ref.workflow_id, snapshot,
                                                      pinned_version=pinned_version)
            result = await found_or_started(conn, binding.for_new)
            if policy is not None and result.outcome not in (StartOutcome.FINISHED, StartOutcome.DIFFERENT) \
                    and result.instance.retry_policy != policy:  # written once, not on every resume
                now = await self.waits.now_txn(conn)
                result = replace(result, instance=await self.waits.update_txn(conn, ref, now=now,
                                                                              **policy_columns(policy)))
            if result.outcome is StartOutcome.RESUMED and result.instance.wait_outcome:
                inst = result.instance
                event = (await self.waits.get_event_txn(conn, ref, inst.wait_event_id)
                         if inst.wait_event_id is not None else None)
                result = replace(result, wait_outcome=ResumeReason(inst.wait_outcome), event=event)
            if include_state and result.start_item is None:
                result = replace(result, start_item=await self.instances.start_item_txn(conn, ref))
            return await self.versions.verdict_txn(conn, result, current=binding.current,
                                                   version_label=version_label)

        async def found_or_started(conn: Conn, bound_version: int) -> StartResult:
            created = await self.instances.create_txn(
                conn, ref, execution_id=execution_id, lease_seconds=requested_lease or self.default_lease_seconds,
                bound_version=bound_version, version_label=version_label, hold_seconds=hold,
            )
            if created is not None:
                if start_item is not None:
                    await self.instances.put_start_item_txn(conn, ref, start_item, size_bytes=len(start_item_json))
                await self.instances.add_event_txn(conn, ref, "started", actor=execution_id,
                                                   detail=f"bound to version {bound_version}" if bound_version else "")
                return StartResult(StartOutcome.STARTED, created, None,
                                   start_item=start_item_json if include_state and start_item_json else None)
            inst = await self.instances.get_txn(conn, ref, for_update=True)
            if inst is None:  # deleted between the insert and the lock: let the retry loop start over
                raise FailedPrecondition("instance changed concurrently; retry")
            latest = await self._latest_meta(conn, inst)
            if start_item is not None:  # a delivery (re-deliveries are rare: the extra read is off the hot path)
                stored = await self.instances.start_item_with_source_txn(conn, ref)
                if stored is not None and stored[1]:
                    # The delivery a signal-with-start stood in for: it becomes the start item.
                    return await delivered_after_signal(conn, inst, latest, start_item)
                if check_delivery and stored is not None and not same_delivery(stored[0], start_item_json):
                    return StartResult(StartOutcome.DIFFERENT, inst, latest, start_item=stored[0])
            return await existing(conn, inst, latest)

        async def existing(conn: Conn, inst: Instance, latest: Checkpoint | None) -> StartResult:
            """The rules for an existing (locked) instance once its start item has been checked."""
            if inst.status.final:
                return StartResult(StartOutcome.FINISHED, inst, latest)
            if inst.status is InstanceStatus.SUSPENDED or (inst.awaited_event and not inst.lease_owner):
                # Suspended (an operator moves it on) or parked by AwaitEvent: not to be run now.
                return StartResult(StartOutcome.BUSY, inst, latest)
            if inst.lease_owner == execution_id:
                # A retry by the execution that already holds the lease: same answer, no new resume.
                inst = await self.instances.take_lease_txn(conn, ref, owner=execution_id, lease_seconds=lease_for(inst),
                                                           count_resume=False, hold_seconds=hold)
                # Its first run: it made the instance, or it is the delivery that started a held one (a
                # signal-with-start made it); either way nothing resumed it and nothing was saved.
                first = inst.resume_count == 0 and (inst.created_by_execution_id == execution_id
                                                    or inst.last_sequence == 0)
                return StartResult(StartOutcome.STARTED if first else StartOutcome.RESUMED, inst, latest)
            lease_alive, wake_pending = await self.instances.lease_state_txn(conn, ref)
            taking_claim = bool(claim_token) and inst.lease_owner == claim_token
            if not taking_claim and (lease_alive or wake_pending):
                return StartResult(StartOutcome.BUSY, inst, latest)
            inst = await self.instances.take_lease_txn(conn, ref, owner=execution_id, lease_seconds=lease_for(inst),
                                                       count_resume=True, hold_seconds=hold)
            await self.instances.add_event_txn(
                conn, ref, "resumed", actor=execution_id,
                detail=f"from sequence {inst.last_sequence}" + (" via resume claim" if taking_claim else ""),
            )
            return StartResult(StartOutcome.RESUMED, inst, latest)

        async def delivered_after_signal(conn: Conn, inst: Instance, latest: Checkpoint | None,
                                         encoded: EncodedState) -> StartResult:
            nonlocal delivered
            delivered = await self.instances.deliver_start_item_txn(conn, ref, encoded, size_bytes=len(start_item_json))
            lease_alive, wake_pending = await self.instances.lease_state_txn(conn, ref)
            ran = inst.last_sequence > 0 or inst.resume_count > 0 or lease_alive or wake_pending
            await self.instances.add_event_txn(
                conn, ref, "start_item_delivered", actor=execution_id,
                detail="the delivery replaced the start item its signal-with-start wrote" + (
                    "" if ran or inst.status is not InstanceStatus.RUNNING or inst.awaited_event
                    else "; this execution starts the instance"))
            if ran or inst.status is not InstanceStatus.RUNNING or inst.awaited_event:
                # Run already (an operator resumed it), finished or waiting: the delivery is answered as a
                # re-delivery; a resume that reads the start item from now on reads this one.
                return await existing(conn, inst, latest)
            # Held for this delivery (SignalStarts): it starts the instance as the new one it is.
            inst = await self.instances.take_lease_txn(conn, ref, owner=execution_id, lease_seconds=lease_for(inst),
                                                       count_resume=False, hold_seconds=hold)
            return StartResult(StartOutcome.STARTED, inst, None,
                               start_item=start_item_json if include_state else None)

        result = await self.db.transaction(txn)
        if delivered and result.instance.last_sequence == 0:
            self.checkpoint_service.remember_start(ref, start_item_json, start_item)
        if include_state and result.latest is not None:
            latest = await self.checkpoint_service.with_state(ref.namespace, result.latest)
            result = replace(result, latest=latest)
            if result.outcome in (StartOutcome.STARTED, StartOutcome.RESUMED):
                self.checkpoint_service.remember(ref, latest)
        elif result.outcome is StartOutcome.STARTED and result.instance.last_sequence == 0:
            self.checkpoint_service.remember_start(ref, start_item_json, start_item)
        _log_start(result)
        self.versions.ran(ref.namespace, ref.workflow_id, workflow_fingerprint, result.current_version, read=read)
        return await self._with_fields(fields, await self._claim_on_start(ref, result, claim_on_start))

    async def _with_fields(self, fields: list[Change], result: StartResult) -> StartResult:
        """Sets a start's search fields once it started or resumed the instance (the caller holds it)."""
        if fields and self.search is not None and result.outcome in (StartOutcome.STARTED, StartOutcome.RESUMED):
            await self.search.set_many(fields)
        return result

    async def _claim_on_start(self, ref: InstanceRef, result: StartResult, claim: ClaimItem | None,
                              claimed_with_start: IdempotencyKey | None = None) -> StartResult:
        """A STARTED result with its claim_on_start claimed; a claim that fails now leaves start_claim unset.

        claimed_with_start: the key the start's own statement inserted (nothing more to claim then).
        """
        if claim is None or result.outcome is not StartOutcome.STARTED:
            return result
        assert self.keys is not None
        if claimed_with_start is not None:
            return replace(result, start_claim=self.keys.acquired_with_write(claimed_with_start))
        claim = _with_instance_lease(claim, claim, result.instance.lease_seconds or self.default_lease_seconds)
        claimed = await self.keys.claim_after(ref.namespace, [claim], "claim_on_start")
        return replace(result, start_claim=claimed[0]) if claimed is not None else result

    async def get(self, ref: InstanceRef) -> tuple[Instance, Checkpoint | None]:
        _check_ref(ref)

        async def txn(conn: Conn) -> tuple[Instance, Checkpoint | None]:
            inst = await self.instances.get_txn(conn, ref)
            if inst is None:
                raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} does not exist")
            if self.fields is not None:
                inst = with_fields(inst, await self.fields.get_txn(conn, ref))
            return inst, await self._latest_meta(conn, inst)

        return await self.db.transaction(txn)

    async def list_instances(self, namespace: str, flt: InstanceFilter, page: Page) -> tuple[list[Instance], str]:
        check_filter(flt)

        async def txn(conn: Conn) -> tuple[list[Instance], str]:
            rows, token = await self.instances.list_txn(conn, namespace, flt, page)
            if self.fields is not None and rows:
                fields = await self.fields.of_instances_txn(conn, namespace,
                                                            [(i.workflow_id, i.instance_key) for i in rows])
                rows = [with_fields(i, fields.get((i.workflow_id, i.instance_key), {})) for i in rows]
            return rows, token

        return await self.db.transaction(txn)

    async def finish(
        self,
        ref: InstanceRef,
        status: InstanceStatus,
        *,
        actor: str,
        error_message: str = "",
        result_json: bytes | None = None,
        retry: bool = False,
        suspend: bool = False,
    ) -> Instance:
        """Moves a running instance to a final status; repeating the same final status is a no-op.

        A FAILED with retry goes to the retry policy instead: the instance stays
        running and is handed out again after the backoff, or is suspended once
        its automatic resumes are used up. With suspend it is suspended at once.
        """
        _check_ref(ref)
        validation.identifier("execution_id" if status is not InstanceStatus.CANCELLED else "actor", actor,
                              required=status is not InstanceStatus.CANCELLED)
        validation.text("error_message", error_message, required=status is InstanceStatus.FAILED)
        if result_json:
            validation.json_bytes("result_json", result_json)

        retry = status is InstanceStatus.FAILED and (retry or suspend)
        if self.instances.one_statement_finish and not retry:
            # The usual case, an instance not final yet: one statement. Anything else (no instance, final
            # already, a retried call) takes the locked path below, which says why.
            async def one(conn: Conn) -> Instance | None:
                return await self.instances.finish_running_txn(conn, ref, status=status, actor=actor,
                                                               error_message=error_message,
                                                               result_json=result_json or None)

            done = await self.db.single(one)
            if done is not None:
                self.on_finished(ref)
                return done

        async def txn(conn: Conn) -> Instance:
            return await self._finish_locked_txn(conn, ref, status, actor=actor, error_message=error_message,
                                                 result_json=result_json, retry=retry, suspend=suspend)

        if (finished := await self.db.transaction(txn)).status.final:
            self.on_finished(ref)
        return finished

    async def complete_txn(self, conn: Conn, ref: InstanceRef, *, actor: str) -> Instance:
        """CompleteInstance (no result) inside the caller's transaction: a save with complete_instance.

        The same work and audit event as finish(COMPLETED): the one statement where the backend
        has it, else the locked path, which also answers a repeat (already completed: unchanged).
        """
        if self.instances.one_statement_finish:
            done = await self.instances.finish_running_txn(conn, ref, status=InstanceStatus.COMPLETED, actor=actor)
            if done is not None:
                return done
        return await self._finish_locked_txn(conn, ref, InstanceStatus.COMPLETED, actor=actor)

    async def cancel_txn(self, conn: Conn, ref: InstanceRef, actor: str, reason: str) -> Instance:
        """CancelInstance inside the caller's transaction (a bulk operation's batch); FailedPrecondition, before
        anything is written, for an instance that finished already."""
        inst = await self.instances.get_txn(conn, ref, for_update=True)
        if inst is None:
            raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} does not exist")
        if inst.status.final:
            raise FailedPrecondition(f"instance {ref.workflow_id}/{ref.instance_key} is already {inst.status.value}")
        return await self._finish_locked_txn(conn, ref, InstanceStatus.CANCELLED, actor=actor, error_message=reason)

    async def _finish_locked_txn(self, conn: Conn, ref: InstanceRef, status: InstanceStatus, *, actor: str,
                                 error_message: str = "", result_json: bytes | None = None,
                                 retry: bool = False, suspend: bool = False) -> Instance:
        inst = await self.instances.get_txn(conn, ref, for_update=True)
        if inst is None:
            raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} does not exist")
        if inst.status is status:
            return inst
        if inst.status.final:
            raise FailedPrecondition(
                f"instance {ref.workflow_id}/{ref.instance_key} is already {inst.status.value}; "
                f"it cannot become {status.value}"
            )
        if status is InstanceStatus.FAILED and retry:
            if inst.status is InstanceStatus.SUSPENDED or (inst.wake_reason == "retry" and not inst.lease_owner):
                return inst  # a repeated call: the failure was counted already
            now = await self.waits.now_txn(conn)
            if suspend:
                return await self.retry.suspend_txn(conn, inst, error=error_message, actor=actor, now=now,
                                                    detail=f"at once, no automatic resume can mend it: {error_message}")
            verdict = await self.retry.after_failure_txn(conn, inst, error=error_message, actor=actor, now=now,
                                                         park_always=True)
            return verdict.instance
        done = await self.instances.finish_txn(conn, ref, status=status, error_message=error_message,
                                               result_json=result_json or None)
        await self.instances.add_event_txn(conn, ref, status.value, actor=actor, detail=error_message)
        return done

    async def schedule_wake_up(self, ref: InstanceRef, *, execution_id: str, wake_at: datetime | None,
                               delay_seconds: int | None) -> Instance:
        _check_ref(ref)
        validation.identifier("execution_id", execution_id)
        if (wake_at is None) == (delay_seconds is None):
            raise InvalidArgument("give exactly one of wake_at and delay_seconds")
        if delay_seconds is not None and not 0 <= delay_seconds <= MAX_DELAY_SECONDS:
            raise InvalidArgument(f"delay_seconds must be 0 to {MAX_DELAY_SECONDS}, got {delay_seconds}")

        async def txn(conn: Conn) -> Instance:
            inst = await self.instances.get_txn(conn, ref, for_update=True)
            if inst is None:
                raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} does not exist")
            if inst.status is not InstanceStatus.RUNNING:
                raise FailedPrecondition(
                    f"instance {ref.workflow_id}/{ref.instance_key} is {inst.status.value}; only running "
                    "instances can be scheduled"
                )
            if wake_at is not None and inst.wake_at == wake_at and not inst.lease_owner and not inst.wake_reason:
                return inst  # a retry: parked until that very time already
            done = await self.instances.schedule_wake_txn(conn, ref, wake_at=wake_at, delay_seconds=delay_seconds)
            if done.awaited_event or done.wake_reason or done.wait_outcome:
                # The wake-up replaces a wait (or a retry's schedule).
                done = await self.waits.update_txn(conn, ref, now=await self.waits.now_txn(conn), awaited_event="",
                                                   wake_reason="", wait_outcome="", wait_event_id=None)
            await self.instances.add_event_txn(conn, ref, "wake_scheduled", actor=execution_id,
                                               detail=done.wake_at.isoformat() if done.wake_at else "")
            return done

        done = await self.db.transaction(txn)
        self.on_due()  # the Resume Trigger's streams plan their next claim for this wake-up
        return done

    async def claim_resumable(self, namespace: str, *, workflow_ids: list[str], claimant: str,
                              max_instances: int, lease_seconds: int) -> list[Resumable]:
        for wf in workflow_ids:
            validation.identifier("workflow_ids[]", wf)
        validation.identifier("claimant", claimant)
        limit = validation.in_range("max_instances", max_instances, 1, 1000, default=10)
        lease = validation.in_range("lease_seconds", lease_seconds, 1, 86_400, default=self.default_lease_seconds)

        async def txn(conn: Conn) -> list[Resumable]:
            claimed = await self.instances.claim_resumable_txn(
                conn, namespace, workflow_ids=workflow_ids, limit=limit, lease_seconds=lease,
                token_prefix=self._claim_prefix,
            )
            out = []
            now = await self.waits.now_txn(conn) if claimed else None
            for inst, claimed_as, token in claimed:
                assert now is not None
                reason = hand_out_reason(inst, claimed_as)
                detail = reason.value
                if inst.awaited_event:  # the wait's deadline passed first: it ends with a timeout
                    inst = await self.waits.update_txn(conn, inst.ref, now=now, awaited_event="", wake_reason="",
                                                       wait_outcome="timeout", wait_sequence=inst.last_sequence,
                                                       wait_event_id=None)
                    await self.instances.add_event_txn(conn, inst.ref, "wait_timed_out", actor=claimant)
                elif inst.wake_reason:
                    inst = await self.waits.update_txn(conn, inst.ref, now=now, wake_reason="")
                if claimed_as is ResumeReason.STALLED:
                    verdict = await self.retry.after_failure_txn(
                        conn, inst, actor=claimant, now=now, park_always=False,
                        error=f"lease lapsed at sequence {inst.last_sequence}: its execution ended without saving "
                              "(it failed, or its n8n process died); see that execution in n8n")
                    if not verdict.resume_now:
                        continue  # parked for its backoff, or suspended
                    inst = verdict.instance
                    detail = f"{reason.value}, automatic resume {inst.attempt}"
                elif reason is ResumeReason.RETRY:
                    detail = f"retry, automatic resume {inst.attempt}"
                event = None
                if reason is ResumeReason.EVENT and inst.wait_event_id is not None:
                    event = await self.waits.get_event_txn(conn, inst.ref, inst.wait_event_id)
                await self.instances.add_event_txn(conn, inst.ref, "claimed", actor=claimant, detail=detail)
                out.append(Resumable(inst, reason, token, await self._latest_meta(conn, inst), event))
            return out

        claimed = await self.db.transaction(txn)
        if claimed:
            log.info("claimed resumable instances", extra={"count": len(claimed), "claimant": claimant})
        return claimed

    async def watch_resumable(self, namespace: str, *, workflow_ids: list[str], claimant: str, max_instances: int,
                              lease_seconds: int, poll_interval_ms: int,
                              stopping: asyncio.Event) -> AsyncIterator[list[Resumable]]:
        """Claims every poll interval until `stopping` is set; yields [] as a heartbeat."""
        interval = validation.in_range("poll_interval_ms", poll_interval_ms, *POLL_INTERVAL_MS, default=1000) / 1000
        live = caller_live.get()
        while not stopping.is_set():
            if not live():
                raise FailedPrecondition("session ended, so this stream stops before it claims anything more; open "
                                         "it again in a new session")
            batch = await self.claim_resumable(namespace, workflow_ids=workflow_ids, claimant=claimant,
                                               max_instances=max_instances, lease_seconds=lease_seconds)
            yield batch
            if batch:
                continue  # more may be waiting: claim again at once
            # A wake-up due before the next poll (a rate limit's slot, a timer, a retry's backoff) is claimed at
            # its time, not up to a poll interval late: a rate-limited item woken late calls late, among the
            # next slots' calls.
            ahead = await self.db.transaction(lambda conn: self.instances.next_wake_txn(
                conn, namespace, workflow_ids=workflow_ids))
            timeout = interval if ahead is None else min(interval, max(0.0, ahead.total_seconds()) + WAKE_MARGIN_S)
            await self.wait_for_freed(timeout, stopping)


async def _sleep_or_stop(timeout: float, stopping: asyncio.Event) -> None:
    try:
        await asyncio.wait_for(stopping.wait(), timeout=timeout)
    except TimeoutError:
        pass
