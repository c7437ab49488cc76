"""Signal-with-start: the instance a signal starts when no instance has its key (SignalInstance start_if_absent).

The new instance is written in the signal's own transaction, so a
StartOrResume racing it finds one instance either way. It is bound to the
workflow's current version (the version refreshed from n8n first, when API
access is configured and a check is due), holds the start item a Resume
Point would store for a delivery, and is unleased and due at once: the
Resume Trigger hands it out as a wake-up fallen due (reason WAKE_UP; the
audit trail's "started" event names the signal) and its Resume Point
resumes it from the start item, as after a crash before the first
checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..domain import Instance, InstanceRef, NewVersion
from ..stores.base import Conn
from ..stores.checkpoints import CheckpointStore
from ..stores.instances import InstanceStore
from ..stores.states import EncodedState
from ..stores.waits import WaitStore
from .checkpoints import CheckpointService
from .versions import VersionService

EMPTY_START_ITEM = b"{}"


@dataclass(frozen=True)
class SignalStart:
    """A start checked and prepared before the transaction opens."""

    ref: InstanceRef
    actor: str
    start_item_json: bytes
    start_item: EncodedState
    snapshot: NewVersion | None


class SignalStarts:
    def __init__(self, instances: InstanceStore, checkpoints: CheckpointStore, checkpoint_service: CheckpointService,
                 versions: VersionService, waits: WaitStore, *, default_lease_seconds: int) -> None:
        self.instances = instances
        self.checkpoints = checkpoints
        self.checkpoint_service = checkpoint_service
        self.versions = versions
        self.waits = waits
        self.default_lease_seconds = default_lease_seconds

    def check(self, start_item_json: bytes) -> bytes:
        """The start item to store (InvalidArgument / TooLarge as a Resume Point's delivery); empty means {}."""
        raw = start_item_json or EMPTY_START_ITEM
        self.checkpoint_service.check_state("start_item_json", raw, object_only=True)
        return raw

    async def prepare(self, ref: InstanceRef, start_item_json: bytes, *, actor: str) -> SignalStart:
        """Outside any transaction: the item checked and encoded, and n8n asked for the version when due."""
        raw = self.check(start_item_json)
        snapshot = await self.versions.snapshot_for_start(ref.namespace, ref.workflow_id, b"", actor=actor)
        return SignalStart(ref, actor, raw, self.checkpoints.encode(raw), snapshot)

    async def start_txn(self, conn: Conn, start: SignalStart, *, detail: str) -> Instance | None:
        """Writes the new instance, held for its delivery; None when its key exists (a racing start won)."""
        ref = start.ref
        binding = await self.versions.binding_txn(conn, ref.namespace, ref.workflow_id, start.snapshot,
                                                  pinned_version=0)
        created = await self.instances.create_txn(
            conn, ref, execution_id=start.actor, lease_seconds=self.default_lease_seconds,
            bound_version=binding.for_new, version_label="")
        if created is None:
            return None
        await self.instances.put_start_item_txn(conn, ref, start.start_item, size_bytes=len(start.start_item_json),
                                                from_signal=True)
        bound = f"; bound to version {binding.for_new}" if binding.for_new else ""
        await self.instances.add_event_txn(conn, ref, "started", actor=start.actor, detail=detail + bound)
        # Held for its delivery: unleased and without a wake-up, so no Resume Trigger takes it. The delivery (a
        # StartOrResume with a start item) starts it with its own item; an operator's ResumeInstance runs it from
        # this one.
        now = await self.waits.now_txn(conn)
        return await self.waits.update_txn(conn, ref, now=now, lease_owner="", lease_expires_at=None, wake_at=None)

    def remember(self, start: SignalStart) -> None:
        """After the commit: the new instance's state is its start item."""
        self.checkpoint_service.remember_start(start.ref, start.start_item_json, start.start_item)
