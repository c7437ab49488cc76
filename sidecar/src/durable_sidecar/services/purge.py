"""PurgeInstance: a finished instance's data erased on request (data-protection duties), with a tombstone.

One transaction erases what the database holds (stores/purge.py): the
checkpoints with their states, the start item, the search fields, the result
and error texts, mailbox payloads and the audit events' details; it keeps the instance row, the
trail's kinds, actors and times, the mailbox's dedupe ids, and adds the
tombstone, an audit event "purged" naming who and why and what was erased.
After the commit the cached states go from the cache (Redis or the in-process
one) and from this process's state memory. A cache that cannot be reached
leaves the purge UNAVAILABLE: the database part stands, and purging again
clears the cache again.
"""

from __future__ import annotations

import logging

from .. import validation
from ..domain import Instance, InstanceRef
from ..errors import FailedPrecondition, Unavailable
from ..stores.base import Conn, Database
from ..stores.cache import Cache
from ..stores.instances import InstanceStore
from ..stores.purge import PURGED_KIND, Erased, PurgeStore
from .checkpoints import CheckpointService
from .instance_rows import check_ref, instance_name, locked_instance

log = logging.getLogger(__name__)


class PurgeService:
    def __init__(self, db: Database, instances: InstanceStore, purge: PurgeStore, cache: Cache,
                 checkpoints: CheckpointService) -> None:
        self.db = db
        self.instances = instances
        self.purge = purge
        self.cache = cache
        self.checkpoints = checkpoints

    async def purge_instance(self, ref: InstanceRef, *, actor: str, reason: str) -> tuple[Instance, Erased]:
        check_ref(ref)
        validation.identifier("actor", actor)
        validation.text("reason", reason, required=True)

        async def txn(conn: Conn) -> tuple[Instance, Erased, int]:
            inst = await locked_instance(self.instances, conn, ref)
            if not inst.status.final:
                raise FailedPrecondition(f"instance {instance_name(ref)} is {inst.status.value}: only a finished "
                                         "instance can be purged; cancel it first (CancelInstance)")
            erased = await self.purge.erase_txn(conn, ref)
            now = await self.purge.now_txn(conn)
            done = await self.instances.update_txn(conn, ref, now=now, result_json=None, error_message="",
                                                   last_error="", checkpoint_count=0)
            await self.instances.add_event_txn(conn, ref, PURGED_KIND, actor=actor, detail=_tombstone(erased, reason))
            return done, erased, inst.last_sequence

        inst, erased, last_sequence = await self.db.transaction(txn)
        self.checkpoints.forget(ref)
        # Every sequence the instance ever had: a repeated purge clears what an unreachable cache kept.
        cleared = await self.cache.forget_states(ref.namespace, ref.workflow_id, ref.instance_key,
                                                 list(range(1, last_sequence + 1)))
        log.info("instance purged", extra={"actor": actor, "checkpoints": len(erased.checkpoint_sequences),
                                           "cache_cleared": cleared})
        if not cleared:
            raise Unavailable(f"instance {instance_name(ref)} is purged from the database, but the cache could not "
                              "be reached to delete its cached states: purge it again once the cache is back "
                              "(cached states also expire after DURABLE_CACHE_TTL_SECONDS)")
        return inst, erased


def _tombstone(erased: Erased, reason: str) -> str:
    parts = [f"{len(erased.checkpoint_sequences)} checkpoints"]
    if erased.start_item:
        parts.append("the start item")
    parts.append(f"{erased.event_payloads} event payloads")
    parts.append(f"{erased.search_fields} search fields")
    return f"erased {', '.join(parts)}, the result and error texts, {erased.event_details} audit details: {reason}"
