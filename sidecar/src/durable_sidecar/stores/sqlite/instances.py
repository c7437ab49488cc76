"""InstanceStore on SQLite: rows of durable_instances and their audit events.

Transactions run one at a time on the embedded database, so "lock the row"
(FOR UPDATE) needs no SQL and a claim never meets a row another claim holds.
"""

from __future__ import annotations

import json
from datetime import datetime

from ...domain import (
    Instance,
    InstanceEvent,
    InstanceFilter,
    InstanceRef,
    InstanceStatus,
    MoveCandidate,
    MoveSelector,
    Page,
    ResumeReason,
    StatusCounts,
)
from .. import base, core
from ..base import Conn
from ..core import INSTANCE_COLUMNS as _COLUMNS
from ..core import instance_cursor
from ..core import instance_params as _key
from ..paging import cut_page, decode_cursor
from ..states import EncodedState, decode_state
from .db import DIALECT, Row, lite, to_micros

_KEY = DIALECT.sql(core.INSTANCE_KEY)


def _instance(row: Row) -> Instance:
    return core.instance_of(DIALECT, row)



def _keys_json(keys: list[str]) -> str:
    return json.dumps(keys)


class InstanceStore(base.InstanceStore):
    """Reads and writes instances; every method runs inside the caller's transaction."""

    async def create_txn(self, conn: Conn, ref: InstanceRef, *, execution_id: str, lease_seconds: int,
                         bound_version: int, version_label: str, hold_seconds: int = 0) -> Instance | None:
        c = lite(conn)
        row = await c.one(
            f"""INSERT INTO durable_instances
                    (namespace, workflow_id, instance_key, bound_version, version_label, lease_owner,
                     lease_expires_at, lease_seconds, created_by_execution_id, created_at, updated_at)
                VALUES (:ns, :wf, :key, :version, :label, :exec, :lease_until, :lease, :exec, :now, :now)
                ON CONFLICT DO NOTHING
                RETURNING {_COLUMNS}""",
            {**_key(ref), "version": bound_version, "label": version_label, "exec": execution_id,
             "lease_until": c.after(lease_seconds + hold_seconds), "lease": lease_seconds, "now": c.now_us},
        )
        return _instance(row) if row else None

    async def get_txn(self, conn: Conn, ref: InstanceRef, *, for_update: bool = False) -> Instance | None:
        row = await lite(conn).one(f"SELECT {_COLUMNS} FROM durable_instances WHERE {_KEY}", _key(ref))
        return _instance(row) if row else None

    async def lease_state_txn(self, conn: Conn, ref: InstanceRef) -> tuple[bool, bool]:
        c = lite(conn)
        row = await c.one(
            f"""SELECT coalesce(lease_expires_at > :now, 0) AS lease_alive,
                       coalesce(wake_at > :now, 0) AS wake_pending
                FROM durable_instances WHERE {_KEY}""",
            {**_key(ref), "now": c.now_us},
        )
        if row is None:
            return False, False
        return bool(row["lease_alive"]), bool(row["wake_pending"])

    async def take_lease_txn(self, conn: Conn, ref: InstanceRef, *, owner: str, lease_seconds: int,
                             count_resume: bool, hold_seconds: int = 0) -> Instance:
        c = lite(conn)
        row = await c.one(
            f"""UPDATE durable_instances
                SET lease_owner = :owner, lease_expires_at = :lease_until, lease_seconds = :lease,
                    wake_at = NULL, resume_count = resume_count + :inc, updated_at = :now
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_key(ref), "owner": owner, "lease_until": c.after(lease_seconds + hold_seconds), "lease": lease_seconds,
             "inc": 1 if count_resume else 0, "now": c.now_us},
        )
        assert row is not None, "caller locked the row"
        return _instance(row)

    async def ever_held_txn(self, conn: Conn, ref: InstanceRef, execution_id: str) -> bool:
        row = await lite(conn).one(
            f"""SELECT EXISTS (SELECT 1 FROM durable_instance_events
                               WHERE {_KEY} AND kind IN ('started', 'resumed') AND actor = :exec) AS held""",
            {**_key(ref), "exec": execution_id},
        )
        return bool(row and row["held"])

    async def put_start_item_txn(self, conn: Conn, ref: InstanceRef, encoded: EncodedState, *,
                                 size_bytes: int) -> None:
        c = lite(conn)
        await c.run(
            """INSERT INTO durable_instance_start_items
                   (namespace, workflow_id, instance_key, encoding, item, size_bytes, created_at)
               VALUES (:ns, :wf, :key, :enc, :item, :size, :now)""",
            {**_key(ref), "enc": encoded.encoding, "item": encoded.data, "size": size_bytes, "now": c.now_us},
        )

    async def start_item_txn(self, conn: Conn, ref: InstanceRef) -> bytes | None:
        row = await lite(conn).one(f"SELECT encoding, item FROM durable_instance_start_items WHERE {_KEY}", _key(ref))
        return decode_state(bytes(row["item"]), row["encoding"]) if row else None

    async def lock_many_txn(self, conn: Conn, refs: list[InstanceRef]) -> dict[InstanceRef, Instance]:
        # The transaction already holds the database's only write lock.
        out = {}
        for ref in sorted(set(refs), key=lambda r: (r.workflow_id, r.instance_key)):
            inst = await self.get_txn(conn, ref)
            if inst is not None:
                out[ref] = inst
        return out

    async def record_checkpoints_txn(self, conn: Conn, advances: list[base.CheckpointAdvance]) -> None:
        c = lite(conn)
        await c.run_many(
            f"""UPDATE durable_instances
                SET last_sequence = :seq, last_step = :step, checkpoint_count = checkpoint_count + :added,
                    lease_owner = :owner, lease_expires_at = :lease_until, updated_at = :now
                WHERE {_KEY}""",
            [{**_key(a.ref), "seq": a.sequence, "step": a.step_name, "added": a.added, "owner": a.owner,
              "lease_until": c.after(a.lease_seconds), "now": c.now_us} for a in advances],
        )

    async def finish_txn(self, conn: Conn, ref: InstanceRef, *, status: InstanceStatus, error_message: str = "",
                         result_json: bytes | None = None) -> Instance:
        c = lite(conn)
        row = await c.one(
            f"""UPDATE durable_instances
                SET status = :status, error_message = :error, result_json = :result,
                    lease_owner = '', lease_expires_at = NULL, wake_at = NULL,
                    finished_at = :now, updated_at = :now
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_key(ref), "status": status.value, "error": error_message, "result": result_json, "now": c.now_us},
        )
        assert row is not None, "caller locked the row"
        return _instance(row)

    async def schedule_wake_txn(self, conn: Conn, ref: InstanceRef, *, wake_at: datetime | None,
                                delay_seconds: int | None) -> Instance:
        c = lite(conn)
        at = to_micros(wake_at) if wake_at is not None else c.after(delay_seconds or 0)
        row = await c.one(
            f"""UPDATE durable_instances
                SET wake_at = :at, lease_owner = '', lease_expires_at = NULL, updated_at = :now
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_key(ref), "at": at, "now": c.now_us},
        )
        assert row is not None, "caller locked the row"
        return _instance(row)

    async def claim_resumable_txn(self, conn: Conn, namespace: str, *, workflow_ids: list[str], limit: int,
                                  lease_seconds: int, token_prefix: str) -> list[tuple[Instance, ResumeReason, str]]:
        """Leases stalled and due instances to fresh claim tokens (the transaction has the file to itself)."""
        c = lite(conn)
        candidates = await c.all(
            """SELECT workflow_id, instance_key,
                      CASE WHEN wake_at IS NULL THEN 'stalled' ELSE 'wake_up' END AS reason
               FROM durable_instances
               WHERE namespace = :ns AND status = 'running' AND suspended_at IS NULL
                 AND ((wake_at IS NULL AND awaited_event = '' AND lease_expires_at < :now) OR wake_at <= :now)
                 AND (:any_wf OR workflow_id IN (SELECT value FROM json_each(:wfs)))
               ORDER BY coalesce(wake_at, lease_expires_at)
               LIMIT :limit""",
            {"ns": namespace, "now": c.now_us, "any_wf": not workflow_ids, "wfs": _keys_json(workflow_ids),
             "limit": limit},
        )
        if not candidates:
            return []
        reasons = {(r["workflow_id"], r["instance_key"]): ResumeReason(r["reason"]) for r in candidates}
        order = {k: i for i, k in enumerate(reasons)}
        rows = await c.all(
            f"""UPDATE durable_instances
                SET lease_owner = :prefix || lower(hex(randomblob(16))), lease_expires_at = :lease_until,
                    wake_at = NULL, updated_at = :now
                WHERE namespace = :ns AND (workflow_id, instance_key) IN
                      (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:keys))
                RETURNING {_COLUMNS}""",
            {"ns": namespace, "prefix": token_prefix, "lease_until": c.after(lease_seconds), "now": c.now_us,
             "keys": json.dumps([list(k) for k in reasons])},
        )
        out = []
        for row in sorted(rows, key=lambda r: order[(r["workflow_id"], r["instance_key"])]):
            inst = _instance(row)
            out.append((inst, reasons[(inst.workflow_id, inst.instance_key)], inst.lease_owner))
        return out

    async def list_txn(self, conn: Conn, namespace: str, flt: InstanceFilter,
                       page: Page) -> tuple[list[Instance], str]:
        c = lite(conn)
        query, params = core.list_instances_query(DIALECT, namespace, flt, page, now=c.now_us)
        rows = [_instance(r) for r in await c.all(query, params)]
        return cut_page(rows, page.size, lambda i: instance_cursor(DIALECT, i))

    async def select_for_move_txn(self, conn: Conn, namespace: str, selector: MoveSelector, *,
                                  lock: bool) -> list[MoveCandidate]:
        where = ["i.namespace = :ns", "i.workflow_id = :wf"]
        params: dict[str, object] = {"ns": namespace, "wf": selector.workflow_id}
        if selector.instance_keys:
            where.append("i.instance_key IN (SELECT value FROM json_each(:keys))")
            params["keys"] = _keys_json(list(selector.instance_keys))
        if selector.statuses:
            where.append("i.status IN (SELECT value FROM json_each(:statuses))")
            params["statuses"] = json.dumps([s.value for s in selector.statuses])
        if selector.from_version:
            where.append("i.bound_version = :from_v")
            params["from_v"] = selector.from_version
        rows = await lite(conn).all(
            f"""SELECT i.instance_key, i.bound_version, i.last_step, coalesce(c.node_name, '') AS last_node
                FROM durable_instances i
                LEFT JOIN durable_checkpoints c
                  ON c.namespace = i.namespace AND c.workflow_id = i.workflow_id
                 AND c.instance_key = i.instance_key AND c.sequence = i.last_sequence
                WHERE {" AND ".join(where)}
                ORDER BY i.instance_key""",
            params,
        )
        return [MoveCandidate(r["instance_key"], r["bound_version"], r["last_step"], r["last_node"]) for r in rows]

    async def existing_keys_txn(self, conn: Conn, namespace: str, workflow_id: str, keys: list[str]) -> set[str]:
        rows = await lite(conn).all(
            """SELECT instance_key FROM durable_instances
               WHERE namespace = :ns AND workflow_id = :wf AND instance_key IN (SELECT value FROM json_each(:keys))""",
            {"ns": namespace, "wf": workflow_id, "keys": _keys_json(keys)},
        )
        return {r["instance_key"] for r in rows}

    async def rebind_txn(self, conn: Conn, namespace: str, workflow_id: str, keys: list[str], *,
                         to_version: int) -> int:
        c = lite(conn)
        return await c.run(
            """UPDATE durable_instances SET bound_version = :to, updated_at = :now
               WHERE namespace = :ns AND workflow_id = :wf AND instance_key IN (SELECT value FROM json_each(:keys))""",
            {"ns": namespace, "wf": workflow_id, "keys": _keys_json(keys), "to": to_version, "now": c.now_us},
        )

    async def events_txn(self, conn: Conn, ref: InstanceRef, page: Page) -> tuple[list[InstanceEvent], str]:
        params: dict[str, object] = {**_key(ref), "limit": page.size + 1, "after": 0}
        if page.token:
            (after,) = decode_cursor(page.token, 1)
            params["after"] = after if isinstance(after, int) else 0
        rows = await lite(conn).all(
            f"""SELECT id, kind, actor, detail, created_at FROM durable_instance_events
                WHERE {_KEY} AND id > :after ORDER BY id LIMIT :limit""",
            params,
        )
        return cut_page([core.event_of(DIALECT, r) for r in rows], page.size, lambda e: [e.id])

    async def count_txn(self, conn: Conn, namespace: str, flt: InstanceFilter) -> StatusCounts:
        c = lite(conn)
        query, params = core.count_instances_query(DIALECT, namespace, flt, now=c.now_us)
        rows = await c.all(query, params)
        return core.status_counts(list(rows))

    async def add_event_txn(self, conn: Conn, ref: InstanceRef, kind: str, *, actor: str = "",
                            detail: str = "") -> None:
        c = lite(conn)
        await c.run(
            """INSERT INTO durable_instance_events (namespace, workflow_id, instance_key, kind, actor, detail, created_at)
               VALUES (:ns, :wf, :key, :kind, :actor, :detail, :now)""",
            {**_key(ref), "kind": kind, "actor": actor, "detail": detail, "now": c.now_us},
        )
