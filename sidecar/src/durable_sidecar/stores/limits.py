"""LimitStore: the rows of flow control (issue 43), written once for both backends.

durable_limits holds one row per (namespace, kind, limit name, key): every
call on a key locks it first (FOR UPDATE on PostgreSQL; the embedded database
runs one transaction at a time), so sidecar replicas racing on one key take
turns. durable_limit_entries holds each instance's place at a key. The
instances themselves (parking, waking) are written by the instance store, the
one writer of durable_instances; the rules are services/limits.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..domain import InstanceRef, InstanceStatus, Page
from .base import Conn
from .core import Row, Runner
from .paging import cut_page, decode_cursor

KINDS = ("concurrency", "rate", "debounce")
LIMIT_KEY = ("namespace = %(ns)s AND kind = %(kind)s AND limit_name = %(name)s AND limit_key = %(lkey)s")
ENTRY_COLUMNS = ("e.id, e.workflow_id, e.instance_key, e.state, e.owner, e.sequence, e.at, e.created_at, "
                 "i.status, i.suspended_at, i.lease_owner, i.lease_expires_at, i.wake_at, i.last_sequence")
# Entries a list shows per key.
LIST_ENTRIES_MAX = 100


@dataclass(frozen=True)
class LimitId:
    """One key of one limit: what a call names and its row is locked by."""

    namespace: str
    kind: str
    name: str
    key: str

    def params(self) -> dict[str, Any]:
        return {"ns": self.namespace, "kind": self.kind, "name": self.name, "lkey": self.key}


@dataclass(frozen=True)
class LimitRow:
    limit: LimitId
    capacity: int | None
    next_at: datetime | None
    burst_started_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True)
class Entry:
    """An instance's place at a key, with what its instance row says now (for judging a holder)."""

    id: int
    workflow_id: str
    instance_key: str
    state: str
    owner: str
    sequence: int
    at: datetime | None
    created_at: datetime
    # The instance now (None when its row is gone).
    status: InstanceStatus | None
    suspended: bool
    lease_owner: str
    lease_expires_at: datetime | None
    wake_at: datetime | None
    last_sequence: int

    def ref(self, namespace: str) -> InstanceRef:
        return InstanceRef(namespace, self.workflow_id, self.instance_key)


@dataclass(frozen=True)
class KeyState:
    """A key as ListLimitKeys shows it."""

    row: LimitRow
    entries: list[Entry]
    counts: dict[str, int]  # entries by state


class LimitStore:
    """durable_limits and durable_limit_entries."""

    def __init__(self, runner: Runner) -> None:
        self.r = runner
        d = runner.dialect
        self._ensure = d.sql(f"""INSERT INTO durable_limits (namespace, kind, limit_name, limit_key, updated_at)
            VALUES (%(ns)s, %(kind)s, %(name)s, %(lkey)s, {d.now_sql}) ON CONFLICT DO NOTHING""")
        # The transaction's database time comes with the lock (one round trip for both).
        self._lock = d.sql(f"""SELECT capacity, next_at, burst_started_at, updated_at, {d.now_sql} AS now
            FROM durable_limits WHERE {LIMIT_KEY}{d.lock(True)}""")
        self._set = d.sql(f"""UPDATE durable_limits SET capacity = %(cap)s, next_at = %(next)s, burst_started_at = %(burst)s,
            updated_at = %(now)s WHERE {LIMIT_KEY}""")
        entries_from = ("FROM durable_limit_entries e LEFT JOIN durable_instances i ON i.namespace = e.namespace "
                        "AND i.workflow_id = e.workflow_id AND i.instance_key = e.instance_key")
        where_key = ("e.namespace = %(ns)s AND e.kind = %(kind)s AND e.limit_name = %(name)s "
                     "AND e.limit_key = %(lkey)s")
        self._entries = d.sql(f"SELECT {ENTRY_COLUMNS} {entries_from} WHERE {where_key} ORDER BY e.id")
        self._entries_some = d.sql(f"SELECT {ENTRY_COLUMNS} {entries_from} WHERE {where_key} "
                                   "ORDER BY e.id LIMIT %(limit)s")
        self._entry_of = d.sql(f"""SELECT {ENTRY_COLUMNS} {entries_from}
            WHERE {where_key} AND e.workflow_id = %(wf)s AND e.instance_key = %(key)s""")
        self._insert = d.sql("""INSERT INTO durable_limit_entries
                (namespace, kind, limit_name, limit_key, workflow_id, instance_key, state, owner, sequence, at,
                 created_at)
            VALUES (%(ns)s, %(kind)s, %(name)s, %(lkey)s, %(wf)s, %(key)s, %(state)s, %(owner)s, %(seq)s, %(at)s,
                    %(now)s)
            RETURNING id""")
        self._update = d.sql("""UPDATE durable_limit_entries SET state = %(state)s, owner = %(owner)s,
            sequence = %(seq)s, at = %(at)s WHERE id = %(id)s""")
        self._delete = d.sql("DELETE FROM durable_limit_entries WHERE id = %(id)s")
        self._keys_of = d.sql("""SELECT DISTINCT limit_key FROM durable_limit_entries
            WHERE namespace = %(ns)s AND kind = %(kind)s AND limit_name = %(name)s AND workflow_id = %(wf)s
              AND instance_key = %(key)s""")
        self._instance_keys = d.sql("""SELECT DISTINCT limit_name, limit_key FROM durable_limit_entries
            WHERE namespace = %(ns)s AND workflow_id = %(wf)s AND instance_key = %(key)s AND kind = %(kind)s""")
        self._waiting_keys = d.sql("""SELECT DISTINCT namespace, kind, limit_name, limit_key
            FROM durable_limit_entries WHERE state = 'waiting' LIMIT %(limit)s""")
        self._prune = d.sql("""DELETE FROM durable_limits WHERE updated_at < %(before)s
            AND (next_at IS NULL OR next_at < %(before)s)
            AND NOT EXISTS (SELECT 1 FROM durable_limit_entries e WHERE e.namespace = durable_limits.namespace
                AND e.kind = durable_limits.kind AND e.limit_name = durable_limits.limit_name
                AND e.limit_key = durable_limits.limit_key)""")
        self._prune_finished = d.sql("""DELETE FROM durable_limit_entries WHERE id IN (
            SELECT e.id FROM durable_limit_entries e LEFT JOIN durable_instances i ON i.namespace = e.namespace
                AND i.workflow_id = e.workflow_id AND i.instance_key = e.instance_key
            WHERE (i.status IS NULL OR i.status <> 'running') AND e.created_at < %(before)s LIMIT %(limit)s)""")
        self._counts = d.sql(f"""SELECT state, count(*) AS n FROM durable_limit_entries
            WHERE {LIMIT_KEY} GROUP BY state""")
        self._gauges = d.sql("""SELECT kind, limit_name, state, count(*) AS n FROM durable_limit_entries
            GROUP BY kind, limit_name, state""")

    def _row(self, limit: LimitId, row: Row) -> LimitRow:
        d = self.r.dialect
        return LimitRow(limit, row["capacity"], d.time_or_none(row["next_at"]), d.time_or_none(row["burst_started_at"]),
                        d.time(row["updated_at"]))

    def _entry(self, row: Row) -> Entry:
        d = self.r.dialect
        status = row["status"]
        return Entry(id=row["id"], workflow_id=row["workflow_id"], instance_key=row["instance_key"],
                     state=row["state"], owner=row["owner"], sequence=row["sequence"], at=d.time_or_none(row["at"]),
                     created_at=d.time(row["created_at"]),
                     status=InstanceStatus(status) if status is not None else None,
                     suspended=row["suspended_at"] is not None, lease_owner=row["lease_owner"] or "",
                     lease_expires_at=d.time_or_none(row["lease_expires_at"]), wake_at=d.time_or_none(row["wake_at"]),
                     last_sequence=row["last_sequence"] or 0)

    async def now_txn(self, conn: Conn) -> datetime:
        return await self.r.now(conn)

    async def lock_txn(self, conn: Conn, limit: LimitId) -> tuple[LimitRow, datetime]:
        """The key's row, made when missing, locked to the end of the transaction; and the transaction's
        database time."""
        params = await self.r.with_now(conn, **limit.params())
        row = await self.r.one(conn, self._lock, params)
        if row is None:  # a new key: made (or made meanwhile by a racing call), then locked
            await self.r.execute(conn, self._ensure, params)
            row = await self.r.one(conn, self._lock, params)
            assert row is not None, "made just above"
        return self._row(limit, row), self.r.dialect.time(row["now"])

    async def set_txn(self, conn: Conn, limit: LimitId, *, now: datetime, capacity: int | None,
                      next_at: datetime | None, burst_started_at: datetime | None) -> None:
        await self.r.execute(conn, self._set, {**limit.params(), "now": self.r.at(now), "cap": capacity,
                                               "next": self.r.at(next_at), "burst": self.r.at(burst_started_at)})

    async def entries_txn(self, conn: Conn, limit: LimitId) -> list[Entry]:
        """The key's entries, oldest first."""
        return [self._entry(r) for r in await self.r.all(conn, self._entries, limit.params())]

    async def entry_of_txn(self, conn: Conn, limit: LimitId, ref: InstanceRef) -> Entry | None:
        row = await self.r.one(conn, self._entry_of, {**limit.params(), "wf": ref.workflow_id,
                                                      "key": ref.instance_key})
        return self._entry(row) if row else None

    async def entry_refs_txn(self, conn: Conn, limit: LimitId, refs: list[InstanceRef]) -> set[tuple[str, str]]:
        """Which of these instances have an entry at the key: (workflow id, instance key) pairs."""
        pairs = ", ".join(f"(%(w{i})s, %(k{i})s)" for i in range(len(refs)))
        params: dict[str, Any] = {**limit.params()}
        for i, ref in enumerate(refs):
            params[f"w{i}"], params[f"k{i}"] = ref.workflow_id, ref.instance_key
        rows = await self.r.all(conn, self.r.dialect.sql(
            f"""SELECT workflow_id, instance_key FROM durable_limit_entries WHERE {LIMIT_KEY}
                AND (workflow_id, instance_key) IN ({pairs})"""), params)
        return {(r["workflow_id"], r["instance_key"]) for r in rows}

    async def insert_txn(self, conn: Conn, limit: LimitId, ref: InstanceRef, *, state: str, owner: str,
                         sequence: int, at: datetime | None, now: datetime) -> int:
        row = await self.r.one(conn, self._insert, {
            **limit.params(), "wf": ref.workflow_id, "key": ref.instance_key, "state": state, "owner": owner,
            "seq": sequence, "at": self.r.at(at), "now": self.r.at(now)})
        assert row is not None
        return int(row["id"])

    async def update_txn(self, conn: Conn, entry_id: int, *, state: str, owner: str, sequence: int,
                         at: datetime | None) -> None:
        await self.r.execute(conn, self._update, {"id": entry_id, "state": state, "owner": owner, "seq": sequence,
                                                  "at": self.r.at(at)})

    async def delete_txn(self, conn: Conn, entry_id: int) -> None:
        await self.r.execute(conn, self._delete, {"id": entry_id})

    async def keys_of_txn(self, conn: Conn, ref: InstanceRef, kind: str, name: str) -> list[str]:
        """The keys of a limit the instance has entries at."""
        rows = await self.r.all(conn, self._keys_of, {"ns": ref.namespace, "kind": kind, "name": name,
                                                      "wf": ref.workflow_id, "key": ref.instance_key})
        return [r["limit_key"] for r in rows]

    async def instance_keys_txn(self, conn: Conn, ref: InstanceRef, kind: str) -> list[LimitId]:
        """Every key of a kind the instance has entries at, of any limit (its instance index), in lock order."""
        rows = await self.r.all(conn, self._instance_keys, {"ns": ref.namespace, "wf": ref.workflow_id,
                                                           "key": ref.instance_key, "kind": kind})
        return sorted((LimitId(ref.namespace, kind, r["limit_name"], r["limit_key"]) for r in rows),
                      key=lambda limit: (limit.name, limit.key))

    async def waiting_keys_txn(self, conn: Conn, *, limit: int) -> list[LimitId]:
        """Keys that have waiters (the sweep hands freed places to them)."""
        rows = await self.r.all(conn, self._waiting_keys, {"limit": limit})
        return [LimitId(r["namespace"], r["kind"], r["limit_name"], r["limit_key"]) for r in rows]

    async def prune_txn(self, conn: Conn, *, before: datetime, limit: int) -> int:
        """Drops entries of instances that finished (or are gone) before `before`, then idle keys; how many rows."""
        n = await self.r.execute(conn, self._prune_finished, {"before": self.r.at(before), "limit": limit})
        return n + await self.r.execute(conn, self._prune, {"before": self.r.at(before)})

    async def gauges_txn(self, conn: Conn) -> list[tuple[str, str, str, int]]:
        """(kind, limit name, entry state, how many) across namespaces."""
        return [(r["kind"], r["limit_name"], r["state"], int(r["n"])) for r in await self.r.all(conn, self._gauges, {})]

    async def list_txn(self, conn: Conn, namespace: str, *, kind: str, name: str,
                       page: Page) -> tuple[list[KeyState], str]:
        """Keys by kind, name and key, with their first entries."""
        d = self.r.dialect
        params: dict[str, Any] = {"ns": namespace, "limit": page.size + 1, "kind_f": kind, "name_f": name,
                                  "a_kind": "", "a_name": "", "a_key": ""}
        if page.token:
            values = decode_cursor(page.token, 3)
            if all(isinstance(v, str) for v in values):
                params["a_kind"], params["a_name"], params["a_key"] = values
        rows = await self.r.all(conn, d.sql(
            """SELECT kind, limit_name, limit_key, capacity, next_at, burst_started_at, updated_at FROM durable_limits
               WHERE namespace = %(ns)s AND (%(kind_f)s = '' OR kind = %(kind_f)s)
                 AND (%(name_f)s = '' OR limit_name = %(name_f)s)
                 AND (kind > %(a_kind)s OR (kind = %(a_kind)s AND (limit_name > %(a_name)s
                      OR (limit_name = %(a_name)s AND limit_key > %(a_key)s))))
               ORDER BY kind, limit_name, limit_key LIMIT %(limit)s"""), params)
        out = []
        for r in rows:
            limit = LimitId(namespace, r["kind"], r["limit_name"], r["limit_key"])
            entries = [self._entry(e) for e in await self.r.all(conn, self._entries_some,
                                                                {**limit.params(), "limit": LIST_ENTRIES_MAX})]
            counts = {c["state"]: int(c["n"]) for c in await self.r.all(conn, self._counts, limit.params())}
            out.append(KeyState(self._row(limit, r), entries, counts))
        return cut_page(out, page.size, lambda k: [k.row.limit.kind, k.row.limit.name, k.row.limit.key])
