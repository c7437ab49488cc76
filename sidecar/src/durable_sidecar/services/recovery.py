"""An operator's redrive of an instance: RetryInstance and ResumeInstance."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from .. import validation
from ..domain import Instance, InstanceRef, InstanceStatus, RunState
from ..errors import FailedPrecondition
from ..stores.base import Conn, Database
from ..stores.instances import InstanceStore
from ..stores.purge import PurgeStore
from ..stores.waits import WaitStore
from .instance_rows import check_ref, instance_name, locked_instance

log = logging.getLogger(__name__)


class RecoveryService:
    """An operator's RetryInstance and ResumeInstance (CancelInstance is InstanceService.finish)."""

    def __init__(self, db: Database, instances: InstanceStore, waits: WaitStore, *,
                 purged: PurgeStore | None = None) -> None:
        self.db = db
        self.instances = instances
        self.waits = waits
        # Tells a purged instance (its states erased: nothing to run again from).
        self.purged = purged
        # Called after a redrive made an instance due now: this replica's Resume Trigger streams claim at once
        # instead of at their next poll (wiring.py).
        self.on_due: Callable[[], None] = lambda: None

    @staticmethod
    def _check(ref: InstanceRef, actor: str, reason: str) -> None:
        check_ref(ref)
        validation.identifier("actor", actor)
        validation.text("reason", reason, required=True)

    async def _redrive_txn(self, conn: Conn, inst: Instance, *, kind: str, actor: str, reason: str) -> Instance:
        """Runs the instance again from its last checkpoint. A wait that ended there (an event taken, or its
        timeout) and that no checkpoint followed stays ended: the redriven execution is handed the same event,
        as a resumed one is, since the execution that took it died before it counted."""
        now = await self.waits.now_txn(conn)
        done = await self.waits.update_txn(
            conn, inst.ref, now=now, status=InstanceStatus.RUNNING.value, finished_at=None, error_message="",
            suspended_at=None, lease_owner="", lease_expires_at=None, awaited_event="", wake_at=now,
            wake_reason="redrive", attempt=0, attempt_sequence=inst.last_sequence, last_error="")
        await self.instances.add_event_txn(conn, inst.ref, kind, actor=actor,
                                           detail=f"was {inst.status.value}, from sequence {inst.last_sequence}: "
                                                  f"{reason}")
        log.info("instance redriven", extra={"action": kind, "actor": actor})
        return done

    async def _act(self, ref: InstanceRef, *, kind: str, actor: str, reason: str,
                   refuse: Callable[[Conn, Instance], Awaitable[Instance | None]]) -> Instance:
        """Locks the instance, lets `refuse` raise (or return the instance to leave it as it is), then redrives it."""
        self._check(ref, actor, reason)
        redriven = False

        async def txn(conn: Conn) -> Instance:
            nonlocal redriven
            inst, redriven = await self._act_txn(conn, ref, kind=kind, actor=actor, reason=reason, refuse=refuse)
            return inst

        done = await self.db.transaction(txn)
        if redriven:
            self.on_due()
        return done

    async def _act_txn(self, conn: Conn, ref: InstanceRef, *, kind: str, actor: str, reason: str,
                       refuse: Callable[[Conn, Instance], Awaitable[Instance | None]]) -> tuple[Instance, bool]:
        """_act inside the caller's transaction: (the instance, whether it was redriven). A refusal raises before
        anything is written."""
        inst = await locked_instance(self.instances, conn, ref)
        unchanged = await refuse(conn, inst)
        if unchanged is not None:
            return unchanged, False
        return await self._redrive_txn(conn, inst, kind=kind, actor=actor, reason=reason), True

    async def retry_txn(self, conn: Conn, ref: InstanceRef, *, actor: str, reason: str) -> tuple[Instance, bool]:
        """RetryInstance inside the caller's transaction (a bulk operation's batch); the caller wakes the streams."""
        return await self._act_txn(conn, ref, kind="retried", actor=actor, reason=reason,
                                   refuse=lambda c, i: self._refuse_retry(c, i, ref))

    async def resume_txn(self, conn: Conn, ref: InstanceRef, *, actor: str, reason: str) -> tuple[Instance, bool]:
        """ResumeInstance inside the caller's transaction (a bulk operation's batch); the caller wakes the streams."""
        return await self._act_txn(conn, ref, kind="resumed_by_operator", actor=actor, reason=reason,
                                   refuse=lambda c, i: self._refuse_resume(c, i, ref))

    async def _refuse_retry(self, conn: Conn, inst: Instance, ref: InstanceRef) -> Instance | None:
        if inst.status is InstanceStatus.RUNNING:
            return inst  # retried already (or never failed): nothing to redrive
        if inst.status in (InstanceStatus.COMPLETED, InstanceStatus.CANCELLED):
            raise FailedPrecondition(f"instance {instance_name(ref)} is {inst.status.value}; only suspended or failed "
                                     "instances can be retried")
        if self.purged is not None and await self.purged.was_purged_txn(conn, ref):
            raise FailedPrecondition(f"instance {instance_name(ref)} was purged (PurgeInstance): its states are "
                                     "erased and it cannot run again; start a new instance")
        return None

    async def _refuse_resume(self, conn: Conn, inst: Instance, ref: InstanceRef) -> Instance | None:
        if inst.status is InstanceStatus.FAILED:
            raise FailedPrecondition(f"instance {instance_name(ref)} is failed; retry it (RetryInstance, "
                                     "`durable-sidecar instances retry`) to run it again")
        if inst.status.final:
            raise FailedPrecondition(f"instance {instance_name(ref)} is {inst.status.value}; it cannot be resumed")
        if inst.status is InstanceStatus.RUNNING:
            state = inst.run_state(await self.waits.now_txn(conn))
            if inst.wake_reason == "redrive" and state is RunState.SCHEDULED:
                return inst  # resumed already, not yet claimed
            if state not in (RunState.WAITING, RunState.SCHEDULED):
                raise FailedPrecondition(
                    f"instance {instance_name(ref)} is running and {state.value}: there is no wait to end "
                    "(a stalled instance is taken by the Resume Trigger)")
        return None

    async def retry(self, ref: InstanceRef, *, actor: str, reason: str) -> Instance:
        return await self._act(ref, kind="retried", actor=actor, reason=reason,
                               refuse=lambda c, i: self._refuse_retry(c, i, ref))

    async def resume(self, ref: InstanceRef, *, actor: str, reason: str) -> Instance:
        return await self._act(ref, kind="resumed_by_operator", actor=actor, reason=reason,
                               refuse=lambda c, i: self._refuse_resume(c, i, ref))
