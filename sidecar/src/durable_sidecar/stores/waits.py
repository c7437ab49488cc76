"""WaitStore: the mailbox of signals, written once; the wait, retry and suspension columns of instances it sets
through the InstanceStore (stores/instances.py), the one writer of durable_instances.

Both backends run the same SQL text (through their Dialect's placeholders);
each gives only a `Runner`: how a statement executes on its connection, the
transaction's database time, and how a time travels as a parameter. Every
method runs inside the caller's transaction, on an instance row the caller has
locked (InstanceStore.get_txn with for_update): that lock, not this module,
makes each event consumed once when several sidecars signal at once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..domain import Instance, InstanceRef, MailboxEvent, NewEvent, Page, RetryPolicy
from .base import Conn
from .core import INSTANCE_KEY, Row, Runner, blob, instance_params
from .instances import InstanceStore
from .paging import cut_page, decode_cursor

EVENT_COLUMNS = ("id, workflow_id, instance_key, event_name, dedupe_id, payload_json, sender, received_at, "
                 "consumed_at")

# Payloads listed by ListEvents up to this size; larger ones are left out of a list.
LIST_PAYLOAD_MAX_BYTES = 64 * 1024


def policy_columns(policy: RetryPolicy) -> dict[str, Any]:
    return {"retry_max_resumes": policy.max_automatic_resumes, "retry_initial_ms": policy.initial_backoff_ms,
            "retry_max_ms": policy.max_backoff_ms, "retry_multiplier": policy.backoff_multiplier,
            "retry_jitter": policy.jitter}


class WaitStore:
    """Mailbox rows (durable_instance_mailbox); the issue-15 columns of durable_instances through the instance store."""

    def __init__(self, runner: Runner, instances: InstanceStore) -> None:
        self.r = runner
        self.instances = instances
        d = runner.dialect
        self._key = d.sql(INSTANCE_KEY)
        self._by_dedupe = d.sql(f"SELECT {EVENT_COLUMNS} FROM durable_instance_mailbox "
                                f"WHERE {INSTANCE_KEY} AND dedupe_id = %(dedupe)s")
        self._by_id = d.sql(f"SELECT {EVENT_COLUMNS} FROM durable_instance_mailbox WHERE {INSTANCE_KEY} AND id = %(id)s")
        self._insert = d.sql(f"""INSERT INTO durable_instance_mailbox
                (namespace, workflow_id, instance_key, event_name, dedupe_id, payload_json, sender, received_at)
            VALUES (%(ns)s, %(wf)s, %(key)s, %(name)s, %(dedupe)s, %(payload)s, %(sender)s, %(now)s)
            ON CONFLICT DO NOTHING
            RETURNING {EVENT_COLUMNS}""")
        self._oldest = d.sql(f"""SELECT {EVENT_COLUMNS} FROM durable_instance_mailbox
            WHERE {INSTANCE_KEY} AND event_name = %(name)s AND consumed_at IS NULL
            ORDER BY id LIMIT 1""")
        # consumed_at IS NULL: a second consumer (there can be none under the instance's lock) changes nothing.
        self._consume = d.sql(f"""UPDATE durable_instance_mailbox
            SET consumed_at = %(now)s, consumed_sequence = %(seq)s, consumed_by = %(by)s
            WHERE {INSTANCE_KEY} AND id = %(id)s AND consumed_at IS NULL
            RETURNING {EVENT_COLUMNS}""")

    def _event(self, row: Row) -> MailboxEvent:
        d = self.r.dialect
        return MailboxEvent(id=row["id"], workflow_id=row["workflow_id"], instance_key=row["instance_key"],
                            event_name=row["event_name"], dedupe_id=row["dedupe_id"],
                            payload_json=blob(row["payload_json"]), sender=row["sender"],
                            received_at=d.time(row["received_at"]), consumed_at=d.time_or_none(row["consumed_at"]))

    async def now_txn(self, conn: Conn) -> datetime:
        return await self.r.now(conn)

    async def by_dedupe_txn(self, conn: Conn, ref: InstanceRef, dedupe_id: str) -> MailboxEvent | None:
        row = await self.r.one(conn, self._by_dedupe, {**instance_params(ref), "dedupe": dedupe_id})
        return self._event(row) if row else None

    async def get_event_txn(self, conn: Conn, ref: InstanceRef, event_id: int) -> MailboxEvent | None:
        row = await self.r.one(conn, self._by_id, {**instance_params(ref), "id": event_id})
        return self._event(row) if row else None

    async def insert_event_txn(self, conn: Conn, new: NewEvent, *, now: datetime) -> MailboxEvent | None:
        """Stores the event; None when its dedupe id is taken (the unique key decides)."""
        row = await self.r.one(conn, self._insert, {
            **instance_params(new.ref), "name": new.event_name, "dedupe": new.dedupe_id, "payload": new.payload_json,
            "sender": new.sender, "now": self.r.at(now)})
        return self._event(row) if row else None

    async def oldest_pending_txn(self, conn: Conn, ref: InstanceRef, event_name: str) -> MailboxEvent | None:
        row = await self.r.one(conn, self._oldest, {**instance_params(ref), "name": event_name})
        return self._event(row) if row else None

    async def consume_txn(self, conn: Conn, ref: InstanceRef, event_id: int, *, sequence: int, consumed_by: str,
                          now: datetime) -> MailboxEvent | None:
        """Marks the event consumed by a wait at the instance's sequence; None when it was consumed already."""
        row = await self.r.one(conn, self._consume, {**instance_params(ref), "id": event_id, "seq": sequence,
                                                     "by": consumed_by, "now": self.r.at(now)})
        return self._event(row) if row else None

    async def list_events_txn(self, conn: Conn, ref: InstanceRef, *, pending_only: bool,
                              page: Page) -> tuple[list[MailboxEvent], str]:
        """Oldest first, paged by id; payloads above LIST_PAYLOAD_MAX_BYTES are left out."""
        params: dict[str, Any] = {**instance_params(ref), "limit": page.size + 1, "after": 0,
                                  "max": LIST_PAYLOAD_MAX_BYTES}
        if page.token:
            (after,) = decode_cursor(page.token, 1)
            params["after"] = after if isinstance(after, int) else 0
        pending = " AND consumed_at IS NULL" if pending_only else ""
        columns = EVENT_COLUMNS.replace("payload_json", "CASE WHEN length(payload_json) <= %(max)s "
                                                        "THEN payload_json END AS payload_json")
        rows = await self.r.all(conn, self.r.dialect.sql(
            f"""SELECT {columns} FROM durable_instance_mailbox
                WHERE {INSTANCE_KEY} AND id > %(after)s{pending} ORDER BY id LIMIT %(limit)s"""), params)
        return cut_page([self._event(r) for r in rows], page.size, lambda e: [e.id])

    async def update_txn(self, conn: Conn, ref: InstanceRef, *, now: datetime, **columns: Any) -> Instance:
        """Sets the given columns of the (locked) instance (and updated_at); returns it.

        The instance store writes durable_instances: this is its update_txn, kept here for the wait rules.
        """
        return await self.instances.update_txn(conn, ref, now=now, **columns)
