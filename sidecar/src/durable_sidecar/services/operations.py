"""Bulk operations by filter (issue 44): retry, resume or cancel every instance of a namespace that matches a
filter, previewed first, then run in batches by the operation loop of whichever sidecar holds the operation.

Each batch acts on the next instances after the operation's cursor and moves the cursor in the same
transaction (stores/operations.py): a sidecar killed mid-batch leaves nothing of that batch, and the sidecar that
takes the operation over (once the dead one's lease lapsed) redoes it. An instance the action no longer applies to
(retried meanwhile, finished) is skipped and counted, with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import datetime

from .. import failpoints, validation
from ..domain import (
    FieldCondition,
    Instance,
    InstanceFilter,
    InstanceRef,
    InstanceStatus,
    Page,
    SearchOp,
)
from ..domain_operations import BulkAction, Operation, OperationStatus
from ..errors import DomainError, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from ..stores.base import Conn, Database
from ..stores.operations import OperationStore
from ..stores.versions import VersionStore
from .audit import check_filter
from .recovery import RecoveryService

log = logging.getLogger(__name__)

MAX_SAMPLE = 100
# How long a sidecar holds an operation without finishing a batch; a killed sidecar's operation is taken over
# by another (or the restarted one) after it.
LEASE_SECONDS = 10

Cancel = Callable[[Conn, InstanceRef, str, str], Awaitable[Instance]]
# VersionService.move_one_txn: (conn, instance, to_version, actor, reason) -> moved.
Move = Callable[..., Awaitable[bool]]
# ReplayService.replay_txn.
Replay = Callable[..., Awaitable[tuple[Instance, int]]]


def selector_json(flt: InstanceFilter) -> str:
    """The filter as recorded on the operation (and shown to operators)."""
    out: dict[str, object] = {}
    for name, value in asdict(flt).items():
        if name in ("sort_field", "sort_descending") or value in ("", 0, False, (), None, []):
            continue
        if name == "statuses":
            value = [s.value for s in flt.statuses]
        elif name == "fields":
            name, value = "search_fields", [{"name": c.name, "op": c.op.value, "value": c.value} for c in flt.fields]
        elif isinstance(value, datetime):
            value = value.isoformat()
        out[name] = value
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


def selector_from_json(text: str) -> InstanceFilter:
    raw = json.loads(text)
    return InstanceFilter(
        workflow_id=raw.get("workflow_id", ""),
        statuses=tuple(InstanceStatus(s) for s in raw.get("statuses", ())),
        bound_version=int(raw.get("bound_version", 0)),
        stalled_only=bool(raw.get("stalled_only", False)),
        key_prefix=raw.get("key_prefix", ""),
        last_step=raw.get("last_step", ""),
        created_after=datetime.fromisoformat(raw["created_after"]) if raw.get("created_after") else None,
        created_before=datetime.fromisoformat(raw["created_before"]) if raw.get("created_before") else None,
        fields=tuple(FieldCondition(c["name"], SearchOp(c["op"]), c["value"]) for c in raw.get("search_fields", ())),
        error_contains=raw.get("error_contains", ""),
    )


class OperationService:
    def __init__(self, db: Database, store: OperationStore, recovery: RecoveryService, cancel: Cancel, *,
                 move: Move, replay: Replay, versions: VersionStore, batch_size: int = 100,
                 lease_seconds: int = LEASE_SECONDS) -> None:
        self.db = db
        self.store = store
        self.recovery = recovery
        self.cancel_txn = cancel
        self.move_txn = move
        self.replay_txn = replay
        self.versions = versions
        self.batch_size = batch_size
        self.lease_seconds = lease_seconds
        # Who holds an operation taken by this process (unique per process and start).
        self.owner = f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # Called after a batch that made instances due now (wiring.py: the Resume Trigger streams).
        self.on_due: Callable[[], None] = lambda: None
        self._kick = asyncio.Event()

    # --- checks --------------------------------------------------------------------------------------------

    @staticmethod
    def check(flt: InstanceFilter) -> None:
        check_filter(flt)
        if flt.sort_field:
            raise InvalidArgument("an operation takes instances by workflow and key: sort_by_field does not apply")

    # --- RPCs ----------------------------------------------------------------------------------------------

    async def preview(self, namespace: str, flt: InstanceFilter, *, sample_size: int) -> tuple[int, list[Instance]]:
        self.check(flt)
        size = validation.in_range("sample_size", sample_size, 1, MAX_SAMPLE, default=10)

        async def txn(conn: Conn) -> tuple[int, list[Instance]]:
            return (await self.store.count_txn(conn, namespace, flt),
                    await self.store.next_instances_txn(conn, namespace, flt, after=None, limit=size))

        return await self.db.transaction(txn)

    async def start(self, namespace: str, action: BulkAction, flt: InstanceFilter, *, actor: str, reason: str,
                    to_version: int = 0, replay_from_step: str = "", may_move: bool = False) -> Operation:
        """Records the operation. may_move: the caller may bind instances to another version (admin): a MOVE,
        or a REPLAY with to_version."""
        self.check(flt)
        validation.identifier("actor", actor)
        validation.text("reason", reason, required=True)
        if to_version < 0:
            raise InvalidArgument("to_version must not be negative")
        if action is BulkAction.MOVE and not to_version:
            raise InvalidArgument("to_version is required to move instances (a registered version number)")
        if to_version and action not in (BulkAction.MOVE, BulkAction.REPLAY):
            raise InvalidArgument(f"to_version is for a move or a replay, not a {action.value}")
        if replay_from_step:
            if action is not BulkAction.REPLAY:
                raise InvalidArgument(f"replay_from_step is for a replay, not a {action.value}")
            validation.identifier("replay_from_step", replay_from_step)
        if to_version:
            if not may_move:
                raise PermissionDenied("binding instances to another version is a move: that needs the admin role")
            if not flt.workflow_id:
                raise InvalidArgument("to_version needs the workflow in the filter: versions are per workflow")

        async def txn(conn: Conn) -> Operation:
            if to_version and await self.versions.get_txn(conn, namespace, flt.workflow_id, to_version,
                                                          with_definition=False) is None:
                raise InvalidArgument(f"to_version {to_version} is not a registered version of workflow "
                                      f"{flt.workflow_id}")
            matched = await self.store.count_txn(conn, namespace, flt)
            return await self.store.insert_txn(conn, namespace, action=action, selector_json=selector_json(flt),
                                               actor=actor, reason=reason, to_version=to_version,
                                               replay_from_step=replay_from_step, matched=matched)

        op = await self.db.transaction(txn)
        log.info("bulk operation started", extra={"operation": op.id, "action": action.value, "actor": actor,
                                                  "matched": op.matched_at_start})
        self._kick.set()
        return op

    async def get(self, namespace: str, op_id: int) -> Operation:
        async def txn(conn: Conn) -> Operation:
            return await self._found(conn, namespace, op_id)

        return await self.db.transaction(txn)

    async def list(self, namespace: str, page: Page) -> tuple[list[Operation], str]:
        async def txn(conn: Conn) -> tuple[list[Operation], str]:
            return await self.store.list_txn(conn, namespace, page)

        return await self.db.transaction(txn)

    async def _found(self, conn: Conn, namespace: str, op_id: int) -> Operation:
        if op_id <= 0:
            raise InvalidArgument("id is required (an operation's id, from StartOperation or ListOperations)")
        op = await self.store.get_txn(conn, namespace, op_id)
        if op is None:
            raise NotFound(f"operation {op_id} does not exist")
        return op

    async def _move(self, namespace: str, op_id: int, actor: str, to: OperationStatus,
                    allowed: tuple[OperationStatus, ...]) -> Operation:
        validation.identifier("actor", actor)

        async def txn(conn: Conn) -> Operation:
            op = await self._found(conn, namespace, op_id)
            if op.status is to:
                return op  # a repeat
            if op.status not in allowed:
                raise FailedPrecondition(f"operation {op_id} is {op.status.value}; it cannot become {to.value}")
            return await self.store.set_status_txn(conn, namespace, op_id, to)

        op = await self.db.transaction(txn)
        log.info("bulk operation %s", to.value, extra={"operation": op_id, "actor": actor})
        self._kick.set()
        return op

    async def pause(self, namespace: str, op_id: int, *, actor: str) -> Operation:
        return await self._move(namespace, op_id, actor, OperationStatus.PAUSED, (OperationStatus.RUNNING,))

    async def continue_(self, namespace: str, op_id: int, *, actor: str) -> Operation:
        return await self._move(namespace, op_id, actor, OperationStatus.RUNNING, (OperationStatus.PAUSED,))

    async def cancel(self, namespace: str, op_id: int, *, actor: str) -> Operation:
        return await self._move(namespace, op_id, actor, OperationStatus.CANCELLED,
                                (OperationStatus.RUNNING, OperationStatus.PAUSED))

    # --- the loop ------------------------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event, *, idle_seconds: float = 2.0) -> None:
        """Every `idle_seconds`, or at once when an operation is started or continued here, takes running
        operations nobody holds and runs them batch by batch, until `stopping` is set. (It waits first: a
        starting sidecar's pool is not grown by it, and a dead sidecar's operation waits out its lease anyway.)"""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), timeout=idle_seconds)
            self._kick.clear()
            if stopping.is_set():
                return
            try:
                while await self.run_once():
                    pass
            except Exception:  # a database outage: try again at the next round
                log.exception("bulk operation loop failed; retrying")

    async def run_once(self) -> bool:
        """Takes one operation and runs it until it ends, is paused or is lost; whether one was taken."""
        async def take(conn: Conn) -> Operation | None:
            return await self.store.take_next_txn(conn, owner=self.owner, lease_seconds=self.lease_seconds)

        op = await self.db.transaction(take)
        if op is None:
            return False
        while await self._batch(op.id):
            await asyncio.sleep(0)  # let RPCs in between
        return True

    async def _batch(self, op_id: int) -> bool:
        """One batch; whether the operation goes on."""
        due = False

        async def txn(conn: Conn) -> bool:
            nonlocal due
            due = False
            op = await self.store.lock_txn(conn, op_id)
            if op is None or op.status is not OperationStatus.RUNNING or op.owner != self.owner:
                return False  # paused, cancelled or taken over: stop
            flt = selector_from_json(op.selector_json)
            after = (op.last_workflow_id, op.last_instance_key) if op.last_workflow_id else None
            batch = await self.store.next_instances_txn(conn, op.namespace, flt, after=after, limit=self.batch_size,
                                                        existed_at=op.created_at)
            acted = skipped = 0
            last_skip = ""
            why = f"{op.reason} (bulk operation {op.id})"
            for inst in batch:
                try:
                    changed = await self._act(conn, op, inst, reason=why)
                except DomainError as e:
                    changed, last_skip = False, f"{inst.workflow_id}/{inst.instance_key}: {e}"
                if changed:
                    acted += 1
                    due = due or op.action is not BulkAction.CANCEL
                else:
                    skipped += 1
                    last_skip = last_skip or f"{inst.workflow_id}/{inst.instance_key}: nothing to do any more"
            if acted + skipped and (op.acted or op.skipped):
                failpoints.hit("operation.mid_batch")
            done = len(batch) < self.batch_size
            last = (batch[-1].workflow_id, batch[-1].instance_key) if batch else (op.last_workflow_id,
                                                                                 op.last_instance_key)
            if not await self.store.advance_txn(conn, op, last=last, acted=acted, skipped=skipped,
                                                last_skip=last_skip, done=done, lease_seconds=self.lease_seconds):
                raise _Lost()
            return not done

        try:
            more = await self.db.transaction(txn)
        except _Lost:
            log.warning("bulk operation taken over by another sidecar; this batch rolled back",
                        extra={"operation": op_id})
            return False
        if due:
            self.on_due()
        return more

    async def _act(self, conn: Conn, op: Operation, inst: Instance, *, reason: str) -> bool:
        """The action on one instance inside the batch's transaction; whether it changed the instance. A refusal
        raises a DomainError before anything of that instance is written."""
        ref, actor = inst.ref, op.actor
        if op.action is BulkAction.RETRY:
            return (await self.recovery.retry_txn(conn, ref, actor=actor, reason=reason))[1]
        if op.action is BulkAction.RESUME:
            return (await self.recovery.resume_txn(conn, ref, actor=actor, reason=reason))[1]
        if op.action is BulkAction.MOVE:
            return await self.move_txn(conn, inst, to_version=op.to_version, actor=actor, reason=reason)
        if op.action is BulkAction.REPLAY:
            start = 0
            if op.replay_from_step:
                start = await self.store.newest_step_txn(conn, ref, op.replay_from_step)
                if not start:
                    raise FailedPrecondition(f"no checkpoint of step {op.replay_from_step}")
            await self.replay_txn(conn, ref, from_sequence=start, to_version=op.to_version, actor=actor,
                                  reason=reason, may_move=True)  # the move was an admin's, checked at the start
            return True
        done = await self.cancel_txn(conn, ref, actor, reason)
        return done.status is InstanceStatus.CANCELLED


class _Lost(Exception):
    """The operation is no longer this sidecar's: the batch's transaction rolls back."""
