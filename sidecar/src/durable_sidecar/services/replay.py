"""Replay from a checkpoint (issue 44): a finished instance runs again from one of its checkpoints as a fork.

Why a fork and not a reset in place: the original keeps its whole record (its checkpoints after the replayed
one, its completion, its idempotency keys and their results) for the audit, and the fork's key
("<key>~r<n>") is the epoch that makes every key derived from it new, so the replayed side effects really run
again instead of being answered from the original's records. A reset in place would have to rewrite or hide
the original's history and give its keys an epoch of their own; it is not offered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .. import validation
from ..domain import Instance, InstanceRef
from ..errors import FailedPrecondition, InvalidArgument, PermissionDenied
from ..stores.base import Conn, Database
from ..stores.instances import InstanceStore
from ..stores.purge import PurgeStore
from ..stores.replay import REPLAYED_KIND, ReplayStore
from ..stores.versions import VersionStore
from ..stores.waits import WaitStore, policy_columns
from .instance_rows import check_ref, instance_name, locked_instance

log = logging.getLogger(__name__)

# Forks tried past the count of earlier replays (a fork key someone took by hand).
_KEY_TRIES = 20


class ReplayService:
    def __init__(self, db: Database, instances: InstanceStore, store: ReplayStore, versions: VersionStore,
                 waits: WaitStore, purged: PurgeStore, *, default_lease_seconds: int) -> None:
        self.db = db
        self.instances = instances
        self.store = store
        self.versions = versions
        self.waits = waits
        self.purged = purged
        self.default_lease_seconds = default_lease_seconds
        # Called after a replay (its fork is due now): this replica's Resume Trigger streams claim at once.
        self.on_due: Callable[[], None] = lambda: None

    async def replay(self, ref: InstanceRef, *, from_sequence: int, to_version: int, actor: str, reason: str,
                     may_move: bool) -> tuple[Instance, int]:
        """The fork (due now) and how many checkpoints it got. may_move: the caller may bind it to another
        version (an admin's right, as MoveInstances)."""
        check_ref(ref)
        validation.identifier("actor", actor)
        validation.text("reason", reason, required=True)
        if from_sequence < 0:
            raise InvalidArgument("from_sequence must not be negative (0: from the start item)")
        if to_version < 0:
            raise InvalidArgument("to_version must not be negative (0: the original's version)")

        async def txn(conn: Conn) -> tuple[Instance, int]:
            return await self.replay_txn(conn, ref, from_sequence=from_sequence, to_version=to_version, actor=actor,
                                         reason=reason, may_move=may_move)

        fork, copied = await self.db.transaction(txn)
        log.info("instance replayed", extra={"actor": actor, "from_sequence": from_sequence,
                                             "fork": fork.instance_key})
        self.on_due()
        return fork, copied

    async def replay_txn(self, conn: Conn, ref: InstanceRef, *, from_sequence: int, to_version: int, actor: str,
                         reason: str, may_move: bool) -> tuple[Instance, int]:
        """replay inside the caller's transaction (a bulk operation's batch; checked arguments); a refusal
        raises before anything is written. The caller wakes the streams."""
        src = await locked_instance(self.instances, conn, ref)
        name = instance_name(ref)
        if not src.status.final:
            raise FailedPrecondition(f"instance {name} is {src.status.value}; only a completed, failed or "
                                     "cancelled instance can be replayed (cancel it first)")
        if await self.purged.was_purged_txn(conn, ref):
            raise FailedPrecondition(f"instance {name} was purged: its states are erased, nothing to replay")
        if from_sequence > src.last_sequence:
            raise InvalidArgument(f"from_sequence is {from_sequence}; instance {name} has checkpoints 1 to "
                                  f"{src.last_sequence} (0: from its start item)")
        step = ""
        if from_sequence:
            found = await self.store.step_txn(conn, ref, from_sequence)
            if found is None:
                raise InvalidArgument(f"instance {name} no longer has checkpoint {from_sequence} (pruned)")
            step = found
        version = src.bound_version
        if to_version and to_version != src.bound_version:
            if not may_move:
                raise PermissionDenied("replaying onto another version moves the instance: that needs the "
                                       "admin role (leave to_version 0 to replay on the original's version)")
            if await self.versions.get_txn(conn, ref.namespace, ref.workflow_id, to_version,
                                           with_definition=False) is None:
                raise InvalidArgument(f"to_version {to_version} is not a registered version of workflow "
                                      f"{ref.workflow_id}")
            version = to_version
        fork = await self._fork_txn(conn, src, version, actor)
        copied = await self.store.copy_txn(conn, ref, fork.ref, upto=from_sequence)
        now = await self.waits.now_txn(conn)
        columns = {"last_sequence": from_sequence, "last_step": step, "checkpoint_count": copied,
                   "lease_owner": "", "lease_expires_at": None, "wake_at": now, "wake_reason": "redrive",
                   "attempt": 0, "attempt_sequence": from_sequence}
        if src.retry_policy is not None:
            columns.update(policy_columns(src.retry_policy))
        done = await self.waits.update_txn(conn, fork.ref, now=now, **columns)
        where = f"checkpoint {from_sequence} ({step})" if from_sequence else "its start item"
        bound = f", bound to version {version}" if version else ""
        await self.instances.add_event_txn(conn, fork.ref, "started", actor=actor,
                                           detail=f"replay of {ref.instance_key} from {where}{bound}: {reason}")
        await self.instances.add_event_txn(conn, ref, REPLAYED_KIND, actor=actor,
                                           detail=f"as {fork.instance_key} from {where}{bound}: {reason}")
        return done, copied

    async def _fork_txn(self, conn: Conn, src: Instance, version: int, actor: str) -> Instance:
        """The fork's row, keyed <key>~r<n> with the first free n after the earlier replays."""
        n = await self.store.replays_txn(conn, src.ref) + 1
        for _ in range(_KEY_TRIES):
            key = f"{src.instance_key}~r{n}"
            if len(key) > validation.MAX_ID_LENGTH:
                raise InvalidArgument(f"the fork's key {key[:40]}… would be {len(key)} characters; the limit is "
                                      f"{validation.MAX_ID_LENGTH}")
            created = await self.instances.create_txn(
                conn, InstanceRef(src.namespace, src.workflow_id, key), execution_id=actor,
                lease_seconds=src.lease_seconds or self.default_lease_seconds, bound_version=version,
                version_label=src.version_label)
            if created is not None:
                return created
            n += 1
        raise FailedPrecondition(f"no free fork key after {src.instance_key}~r{n - 1}")
