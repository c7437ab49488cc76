"""PurgeStore: what PurgeInstance erases of one (locked) instance, written once for both backends.

Every method runs inside the caller's transaction on an instance row the
caller has locked (InstanceStore.get_txn with for_update). The instance row
itself is written through the InstanceStore, the one writer of
durable_instances.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..domain import InstanceRef
from .base import Conn
from .core import INSTANCE_KEY, Runner, instance_params

PURGED_KIND = "purged"


@dataclass(frozen=True)
class Erased:
    """What one purge erased."""

    checkpoint_sequences: list[int]
    start_item: bool
    event_payloads: int
    event_details: int
    search_fields: int


class PurgeStore:
    def __init__(self, runner: Runner) -> None:
        self.r = runner
        d = runner.dialect
        self._checkpoints = d.sql(f"DELETE FROM durable_checkpoints WHERE {INSTANCE_KEY} RETURNING sequence")
        self._start_item = d.sql(f"DELETE FROM durable_instance_start_items WHERE {INSTANCE_KEY} RETURNING size_bytes")
        self._payloads = d.sql(f"UPDATE durable_instance_mailbox SET payload_json = NULL "
                               f"WHERE {INSTANCE_KEY} AND payload_json IS NOT NULL")
        self._details = d.sql(f"UPDATE durable_instance_events SET detail = '' WHERE {INSTANCE_KEY} AND detail <> ''")
        self._fields = d.sql(f"DELETE FROM durable_search_fields WHERE {INSTANCE_KEY}")
        self._purged = d.sql(f"SELECT 1 AS purged FROM durable_instance_events "
                             f"WHERE {INSTANCE_KEY} AND kind = '{PURGED_KIND}' LIMIT 1")

    async def erase_txn(self, conn: Conn, ref: InstanceRef) -> Erased:
        """Deletes the instance's checkpoints, start item and search fields; blanks its event payloads and audit details."""
        params = instance_params(ref)
        sequences = [int(r["sequence"]) for r in await self.r.all(conn, self._checkpoints, params)]
        start_item = bool(await self.r.all(conn, self._start_item, params))
        payloads = await self.r.execute(conn, self._payloads, params)
        details = await self.r.execute(conn, self._details, params)
        fields = await self.r.execute(conn, self._fields, params)
        return Erased(sorted(sequences), start_item, payloads, details, fields)

    async def now_txn(self, conn: Conn) -> datetime:
        return await self.r.now(conn)

    async def was_purged_txn(self, conn: Conn, ref: InstanceRef) -> bool:
        """Whether the instance's audit trail holds a purge's tombstone."""
        return await self.r.one(conn, self._purged, instance_params(ref)) is not None
