"""InstanceStore: rows of durable_instances and their audit events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import sql

from ...domain import (
    Instance,
    InstanceEvent,
    InstanceFilter,
    InstanceRef,
    InstanceStatus,
    MoveCandidate,
    MoveSelector,
    NewClaim,
    Page,
    ResumeReason,
    StatusCounts,
)
from .. import base, core
from ..base import Conn
from ..core import INSTANCE_COLUMNS as _COLUMNS
from ..core import INSTANCE_KEY as _KEY
from ..core import instance_cursor
from ..core import instance_params as _key
from ..paging import cut_page, decode_cursor
from ..states import EncodedState, decode_state
from .db import DIALECT, pg


def _instance(row: Any) -> Instance:
    return core.instance_of(DIALECT, row)



# start_new_txn's statement; {claim} and {claimed} add the next Guard's key (a start's claim_on_start).
_START_NEW = sql.SQL(
    """WITH bound AS (
            SELECT coalesce((SELECT current_version FROM durable_workflows
                             WHERE namespace = %(ns)s AND workflow_id = %(wf)s), 0) AS version),
        created AS (
            INSERT INTO durable_instances
                (namespace, workflow_id, instance_key, bound_version, version_label, lease_owner,
                 lease_expires_at, lease_seconds, created_by_execution_id)
            SELECT %(ns)s, %(wf)s, %(key)s, bound.version, %(label)s, %(exec)s,
                   now() + make_interval(secs => %(until)s), %(lease)s, %(exec)s
            FROM bound
            ON CONFLICT DO NOTHING
            RETURNING {columns}),
        item AS (
            INSERT INTO durable_instance_start_items
                (namespace, workflow_id, instance_key, encoding, item, size_bytes)
            SELECT namespace, workflow_id, instance_key, %(enc)s, %(item)s::bytea, %(size)s
            FROM created WHERE %(item)s::bytea IS NOT NULL),
        started AS (
            INSERT INTO durable_instance_events (namespace, workflow_id, instance_key, kind, actor, detail)
            SELECT namespace, workflow_id, instance_key, 'started', %(exec)s,
                   CASE WHEN bound_version > 0 THEN 'bound to version ' || bound_version ELSE '' END
            FROM created){claim}
        SELECT created.*, bound.version AS current_version{claimed} FROM created CROSS JOIN bound{join}""")
_START_NEW_AND_CLAIM = _START_NEW.format(
    columns=sql.SQL(_COLUMNS),
    # As IdempotencyStore.insert_txn, only when the instance was created: a key lives its ttl, and never
    # ends before its lease. A key that exists is left alone (claimed: NULL).
    claim=sql.SQL(""",
        claimed AS (
            INSERT INTO durable_idempotency_keys
                (namespace, scope, key, status, fingerprint, attempt, holder, lease_expires_at, expires_at)
            SELECT namespace, %(c_scope)s, %(c_key)s, 'in_progress', %(c_fp)s, 1, %(c_holder)s,
                   now() + make_interval(secs => %(c_lease)s),
                   greatest(now() + make_interval(secs => %(c_ttl)s), now() + make_interval(secs => %(c_lease)s))
            FROM created
            ON CONFLICT DO NOTHING
            RETURNING {claimed})""").format(claimed=sql.SQL(core.CLAIMED_COLUMNS)),
    claimed=sql.SQL(", claimed.*"), join=sql.SQL(" LEFT JOIN claimed ON true"))
_START_NEW_ONLY = _START_NEW.format(columns=sql.SQL(_COLUMNS), claim=sql.SQL(""), claimed=sql.SQL(""), join=sql.SQL(""))


class InstanceStore(base.InstanceStore):
    """Reads and writes instances; every method runs inside the caller's transaction."""

    one_statement_start = True

    async def create_txn(
        self,
        conn: Conn,
        ref: InstanceRef,
        *,
        execution_id: str,
        lease_seconds: int,
        bound_version: int,
        version_label: str,
        hold_seconds: int = 0,
    ) -> Instance | None:
        """Inserts a new running instance leased to execution_id; None when the key exists."""
        cur = await pg(conn).execute(
            f"""INSERT INTO durable_instances
                    (namespace, workflow_id, instance_key, bound_version, version_label, lease_owner,
                     lease_expires_at, lease_seconds, created_by_execution_id)
                VALUES (%(ns)s, %(wf)s, %(key)s, %(version)s, %(label)s, %(exec)s,
                        now() + make_interval(secs => %(until)s), %(lease)s, %(exec)s)
                ON CONFLICT DO NOTHING
                RETURNING {_COLUMNS}""",
            {**_key(ref), "version": bound_version, "label": version_label, "exec": execution_id,
             "lease": lease_seconds, "until": lease_seconds + hold_seconds},
        )
        row = await cur.fetchone()
        return _instance(row) if row else None

    async def start_new_txn(self, conn: Conn, ref: InstanceRef, *, execution_id: str, lease_seconds: int,
                            version_label: str, start_item: EncodedState | None,
                            start_item_bytes: int, claim: NewClaim | None = None,
                            hold_seconds: int = 0) -> base.StartedNew | None:
        """One statement: the instance (bound to the current version), its start item and its STARTED event;
        with claim, the next Guard's key when it is new (as IdempotencyStore.insert_txn inserts it).

        The child rows' foreign keys are checked at the end of the statement, when the instance exists.
        """
        params = {**_key(ref), "label": version_label, "exec": execution_id, "lease": lease_seconds,
                  "until": lease_seconds + hold_seconds,
                  "enc": start_item.encoding if start_item else 0, "item": start_item.data if start_item else None,
                  "size": start_item_bytes}
        if claim is None:
            cur = await pg(conn).execute(_START_NEW_ONLY, params)
        else:
            cur = await pg(conn).execute(_START_NEW_AND_CLAIM, {**params, **core.ahead_claim_params(claim)})
        row = await cur.fetchone()
        if row is None:
            return None
        return base.StartedNew(_instance(row), row["current_version"], core.claimed_key_of(DIALECT, claim, row))

    async def get_txn(self, conn: Conn, ref: InstanceRef, *, for_update: bool = False) -> Instance | None:
        lock = " FOR UPDATE" if for_update else ""
        cur = await pg(conn).execute(f"SELECT {_COLUMNS} FROM durable_instances WHERE {_KEY}{lock}", _key(ref))
        row = await cur.fetchone()
        return _instance(row) if row else None

    async def lease_state_txn(self, conn: Conn, ref: InstanceRef) -> tuple[bool, bool]:
        """(lease alive, wake-up in the future) judged by database time."""
        cur = await pg(conn).execute(
            f"""SELECT coalesce(lease_expires_at > now(), false) AS lease_alive,
                       coalesce(wake_at > now(), false) AS wake_pending
                FROM durable_instances WHERE {_KEY}""",
            _key(ref),
        )
        row = await cur.fetchone()
        if row is None:
            return False, False
        return bool(row["lease_alive"]), bool(row["wake_pending"])

    async def take_lease_txn(
        self, conn: Conn, ref: InstanceRef, *, owner: str, lease_seconds: int, count_resume: bool,
        hold_seconds: int = 0,
    ) -> Instance:
        cur = await pg(conn).execute(
            f"""UPDATE durable_instances
                SET lease_owner = %(owner)s, lease_expires_at = now() + make_interval(secs => %(until)s),
                    lease_seconds = %(lease)s, wake_at = NULL, resume_count = resume_count + %(inc)s, updated_at = now()
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_key(ref), "owner": owner, "lease": lease_seconds, "until": lease_seconds + hold_seconds,
             "inc": 1 if count_resume else 0},
        )
        row = await cur.fetchone()
        assert row is not None, "caller locked the row"
        return _instance(row)

    async def ever_held_txn(self, conn: Conn, ref: InstanceRef, execution_id: str) -> bool:
        cur = await pg(conn).execute(
            f"""SELECT EXISTS (SELECT 1 FROM durable_instance_events
                               WHERE {_KEY} AND kind IN ('started', 'resumed') AND actor = %(exec)s) AS held""",
            {**_key(ref), "exec": execution_id},
        )
        row = await cur.fetchone()
        return bool(row and row["held"])

    async def put_start_item_txn(self, conn: Conn, ref: InstanceRef, encoded: EncodedState, *,
                                 size_bytes: int) -> None:
        await pg(conn).execute(
            """INSERT INTO durable_instance_start_items (namespace, workflow_id, instance_key, encoding, item, size_bytes)
               VALUES (%(ns)s, %(wf)s, %(key)s, %(enc)s, %(item)s, %(size)s)""",
            {**_key(ref), "enc": encoded.encoding, "item": encoded.data, "size": size_bytes},
        )

    async def start_item_txn(self, conn: Conn, ref: InstanceRef) -> bytes | None:
        cur = await pg(conn).execute(f"SELECT encoding, item FROM durable_instance_start_items WHERE {_KEY}", _key(ref))
        row = await cur.fetchone()
        return decode_state(bytes(row["item"]), row["encoding"]) if row else None

    async def lock_many_txn(self, conn: Conn, refs: list[InstanceRef]) -> dict[InstanceRef, Instance]:
        if not refs:
            return {}
        namespace = core.one_namespace(refs)
        unique = sorted({(r.workflow_id, r.instance_key) for r in refs})
        # FOR UPDATE locks rows as the sort hands them over: always in key order.
        cur = await pg(conn).execute(
            f"""SELECT {_COLUMNS} FROM durable_instances
                WHERE namespace = %(ns)s
                  AND (workflow_id, instance_key) IN (SELECT * FROM unnest(%(wfs)b::text[], %(keys)b::text[]))
                ORDER BY workflow_id, instance_key
                FOR UPDATE""",
            {"ns": namespace, "wfs": [w for w, _ in unique], "keys": [k for _, k in unique]},
        )
        found = [_instance(row) for row in await cur.fetchall()]
        return {i.ref: i for i in found}

    async def record_checkpoints_txn(self, conn: Conn, advances: list[base.CheckpointAdvance]) -> None:
        if not advances:
            return
        await pg(conn).execute(
            """UPDATE durable_instances AS i
                SET last_sequence = a.seq, last_step = a.step, checkpoint_count = i.checkpoint_count + a.added,
                    lease_owner = a.owner, lease_expires_at = now() + make_interval(secs => a.lease),
                    updated_at = now()
                FROM unnest(%(wfs)b::text[], %(keys)b::text[], %(seqs)b::bigint[], %(steps)b::text[],
                            %(added)b::int[], %(owners)b::text[], %(leases)b::int[])
                     AS a(wf, key, seq, step, added, owner, lease)
                WHERE i.namespace = %(ns)s AND i.workflow_id = a.wf AND i.instance_key = a.key""",
            {"ns": core.one_namespace([a.ref for a in advances]),
             "wfs": [a.ref.workflow_id for a in advances], "keys": [a.ref.instance_key for a in advances],
             "seqs": [a.sequence for a in advances], "steps": [a.step_name for a in advances],
             "added": [a.added for a in advances], "owners": [a.owner for a in advances],
             "leases": [a.lease_seconds for a in advances]},
        )

    async def finish_txn(
        self,
        conn: Conn,
        ref: InstanceRef,
        *,
        status: InstanceStatus,
        error_message: str = "",
        result_json: bytes | None = None,
    ) -> Instance:
        cur = await pg(conn).execute(
            f"""UPDATE durable_instances
                SET status = %(status)s, error_message = %(error)s, result_json = %(result)s,
                    lease_owner = '', lease_expires_at = NULL, wake_at = NULL,
                    finished_at = now(), updated_at = now()
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_key(ref), "status": status.value, "error": error_message, "result": result_json},
        )
        row = await cur.fetchone()
        assert row is not None, "caller locked the row"
        return _instance(row)

    one_statement_finish = True

    async def finish_running_txn(self, conn: Conn, ref: InstanceRef, *, status: InstanceStatus, actor: str,
                                 error_message: str = "", result_json: bytes | None = None) -> Instance | None:
        # 'running' is also the stored status of a suspended instance (suspended_at set): both are not final.
        # The event's foreign key is checked at the end of the statement, as in start_new_txn.
        cur = await pg(conn).execute(
            f"""WITH done AS (
                    UPDATE durable_instances
                    SET status = %(status)s, error_message = %(error)s, result_json = %(result)s,
                        lease_owner = '', lease_expires_at = NULL, wake_at = NULL,
                        finished_at = now(), updated_at = now()
                    WHERE {_KEY} AND status = 'running'
                    RETURNING {_COLUMNS}),
                event AS (
                    INSERT INTO durable_instance_events (namespace, workflow_id, instance_key, kind, actor, detail)
                    SELECT namespace, workflow_id, instance_key, %(status)s, %(actor)s, %(error)s FROM done)
                SELECT * FROM done""",
            {**_key(ref), "status": status.value, "error": error_message, "result": result_json, "actor": actor},
        )
        row = await cur.fetchone()
        return _instance(row) if row else None

    async def schedule_wake_txn(
        self, conn: Conn, ref: InstanceRef, *, wake_at: datetime | None, delay_seconds: int | None
    ) -> Instance:
        cur = await pg(conn).execute(
            f"""UPDATE durable_instances
                SET wake_at = coalesce(%(at)s, now() + make_interval(secs => %(delay)s)),
                    lease_owner = '', lease_expires_at = NULL, updated_at = now()
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_key(ref), "at": wake_at, "delay": delay_seconds},
        )
        row = await cur.fetchone()
        assert row is not None, "caller locked the row"
        return _instance(row)

    async def claim_resumable_txn(
        self,
        conn: Conn,
        namespace: str,
        *,
        workflow_ids: list[str],
        limit: int,
        lease_seconds: int,
        token_prefix: str,
    ) -> list[tuple[Instance, ResumeReason, str]]:
        """Locks stalled and due instances with SKIP LOCKED and leases them to fresh claim tokens."""
        cur = await pg(conn).execute(
            """WITH candidates AS (
                   SELECT namespace, workflow_id, instance_key,
                          CASE WHEN wake_at IS NULL THEN 'stalled' ELSE 'wake_up' END AS reason
                   FROM durable_instances
                   WHERE namespace = %(ns)s AND status = 'running' AND suspended_at IS NULL
                     AND ((wake_at IS NULL AND awaited_event = '' AND lease_expires_at < now()) OR wake_at <= now())
                     AND (cardinality(%(wfs)s::text[]) = 0 OR workflow_id = ANY(%(wfs)s::text[]))
                   ORDER BY coalesce(wake_at, lease_expires_at)
                   LIMIT %(limit)s
                   FOR UPDATE SKIP LOCKED)
               UPDATE durable_instances i
               SET lease_owner = %(prefix)s || md5(random()::text || clock_timestamp()::text || i.instance_key),
                   lease_expires_at = now() + make_interval(secs => %(lease)s),
                   wake_at = NULL, updated_at = now()
               FROM candidates c
               WHERE i.namespace = c.namespace AND i.workflow_id = c.workflow_id AND i.instance_key = c.instance_key
               RETURNING c.reason, """
            + ", ".join(f"i.{c.strip()}" for c in _COLUMNS.split(",")),
            {"ns": namespace, "wfs": workflow_ids, "limit": limit, "lease": lease_seconds, "prefix": token_prefix},
        )
        out = []
        for row in await cur.fetchall():
            inst = _instance(row)
            out.append((inst, ResumeReason(row["reason"]), inst.lease_owner))
        return out

    async def list_txn(
        self, conn: Conn, namespace: str, flt: InstanceFilter, page: Page
    ) -> tuple[list[Instance], str]:
        query, params = core.list_instances_query(DIALECT, namespace, flt, page, now=None)
        cur = await pg(conn).execute(query, params)
        rows = [_instance(r) for r in await cur.fetchall()]
        return cut_page(rows, page.size, lambda i: instance_cursor(DIALECT, i))

    async def select_for_move_txn(self, conn: Conn, namespace: str, selector: MoveSelector, *,
                                  lock: bool) -> list[MoveCandidate]:
        """Instances matching every criterion of the selector, by key, with their last checkpoint's node.

        With lock, the rows stay locked (in key order, like batched checkpoint
        saves, so the two cannot deadlock) until the transaction ends.
        """
        where = [sql.SQL("i.namespace = %(ns)s"), sql.SQL("i.workflow_id = %(wf)s")]
        params: dict[str, Any] = {"ns": namespace, "wf": selector.workflow_id}
        if selector.instance_keys:
            where.append(sql.SQL("i.instance_key = ANY(%(keys)s)"))
            params["keys"] = list(selector.instance_keys)
        if selector.statuses:
            where.append(sql.SQL("i.status = ANY(%(statuses)s)"))
            params["statuses"] = [s.value for s in selector.statuses]
        if selector.from_version:
            where.append(sql.SQL("i.bound_version = %(from_v)s"))
            params["from_v"] = selector.from_version
        query = sql.SQL(
            """SELECT i.instance_key, i.bound_version, i.last_step, coalesce(c.node_name, '') AS last_node
               FROM durable_instances i
               LEFT JOIN LATERAL (
                   -- each instance's newest checkpoint by its whole key (see checkpoints.py: LATEST)
                   SELECT c.node_name FROM durable_checkpoints c
                   WHERE c.namespace = i.namespace AND c.workflow_id = i.workflow_id
                     AND c.instance_key = i.instance_key AND c.sequence = i.last_sequence
                   LIMIT 1) c ON true
               WHERE {where}
               ORDER BY i.instance_key{lock}"""
        ).format(where=sql.SQL(" AND ").join(where), lock=sql.SQL(" FOR UPDATE OF i" if lock else ""))
        cur = await pg(conn).execute(query, params)
        return [MoveCandidate(r["instance_key"], r["bound_version"], r["last_step"], r["last_node"])
                for r in await cur.fetchall()]

    async def existing_keys_txn(self, conn: Conn, namespace: str, workflow_id: str, keys: list[str]) -> set[str]:
        cur = await pg(conn).execute(
            """SELECT instance_key FROM durable_instances
               WHERE namespace = %(ns)s AND workflow_id = %(wf)s AND instance_key = ANY(%(keys)s)""",
            {"ns": namespace, "wf": workflow_id, "keys": keys},
        )
        return {r["instance_key"] for r in await cur.fetchall()}

    async def rebind_txn(self, conn: Conn, namespace: str, workflow_id: str, keys: list[str], *,
                         to_version: int) -> int:
        """Binds the (locked) instances to another version; returns how many rows changed."""
        cur = await pg(conn).execute(
            """UPDATE durable_instances SET bound_version = %(to)s, updated_at = now()
               WHERE namespace = %(ns)s AND workflow_id = %(wf)s AND instance_key = ANY(%(keys)s)""",
            {"ns": namespace, "wf": workflow_id, "keys": keys, "to": to_version},
        )
        return cur.rowcount

    async def events_txn(self, conn: Conn, ref: InstanceRef, page: Page) -> tuple[list[InstanceEvent], str]:
        params: dict[str, Any] = {**_key(ref), "limit": page.size + 1, "after": 0}
        if page.token:
            (after,) = decode_cursor(page.token, 1)
            params["after"] = after if isinstance(after, int) else 0
        cur = await pg(conn).execute(
            f"""SELECT id, kind, actor, detail, created_at FROM durable_instance_events
                WHERE {_KEY} AND id > %(after)s ORDER BY id LIMIT %(limit)s""",
            params,
        )
        rows = [core.event_of(DIALECT, r) for r in await cur.fetchall()]
        return cut_page(rows, page.size, lambda e: [e.id])

    async def count_txn(self, conn: Conn, namespace: str, flt: InstanceFilter) -> StatusCounts:
        query, params = core.count_instances_query(DIALECT, namespace, flt, now=None)
        cur = await pg(conn).execute(query, params)
        return core.status_counts(await cur.fetchall())

    async def add_event_txn(self, conn: Conn, ref: InstanceRef, kind: str, *, actor: str = "", detail: str = "") -> None:
        await pg(conn).execute(
            """INSERT INTO durable_instance_events (namespace, workflow_id, instance_key, kind, actor, detail)
               VALUES (%(ns)s, %(wf)s, %(key)s, %(kind)s, %(actor)s, %(detail)s)""",
            {**_key(ref), "kind": kind, "actor": actor, "detail": detail},
        )
