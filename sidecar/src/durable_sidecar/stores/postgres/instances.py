"""InstanceStore on PostgreSQL: the shared store (stores/instances.py) with the one-statement paths.

A start (instance, start item, STARTED event and the next Guard's key), a
finish with its event, a batch lock and advance through unnest, and a claim of
resumable instances that skips rows another claim holds (FOR UPDATE SKIP LOCKED):
one round trip each.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from ...domain import IdempotencyKey, Instance, InstanceRef, InstanceStatus, KeyStatus, NewClaim, ResumeReason
from .. import base, core, instances
from ..base import Conn
from ..core import INSTANCE_COLUMNS as _COLUMNS
from ..core import INSTANCE_KEY as _KEY
from ..core import Dialect, Row
from ..core import instance_params as _key
from ..instances import FINISH_SET, RESUMABLE_WHERE, RESUME_REASON
from ..states import EncodedState
from .db import DIALECT, RUNNER, pg

# Advancing instances from arrays (a batch's CheckpointAdvance, one element each), beside statements of their own.
ADVANCE = """UPDATE durable_instances AS i
        SET last_sequence = a.seq, last_step = a.step, checkpoint_count = i.checkpoint_count + a.added,
            lease_owner = a.owner, lease_expires_at = now() + make_interval(secs => a.lease),
            updated_at = now()
        FROM unnest(%(a_wfs)b::text[], %(a_keys)b::text[], %(a_seqs)b::bigint[], %(a_steps)b::text[],
                    %(a_added)b::int[], %(a_owners)b::text[], %(a_leases)b::int[])
             AS a(wf, key, seq, step, added, owner, lease)
        WHERE i.namespace = %(ns)s AND i.workflow_id = a.wf AND i.instance_key = a.key"""


def advance_params(advances: list[base.CheckpointAdvance]) -> dict[str, object]:
    """ADVANCE's arrays (its %(ns)s aside)."""
    return {"a_wfs": [a.ref.workflow_id for a in advances], "a_keys": [a.ref.instance_key for a in advances],
            "a_seqs": [a.sequence for a in advances], "a_steps": [a.step_name for a in advances],
            "a_added": [a.added for a in advances], "a_owners": [a.owner for a in advances],
            "a_leases": [a.lease_seconds for a in advances]}


# A statement that also claims the next Guard's key (a Save's claim_next, a start's claim_on_start)
# returns the key it inserted under these names, NULL when it inserted none.
CLAIMED_COLUMNS = """status AS c_status, fingerprint AS c_fingerprint, attempt AS c_attempt, holder AS c_holder,
    lease_expires_at AS c_lease_expires_at, expires_at AS c_expires_at, created_at AS c_created_at,
    updated_at AS c_updated_at"""


def prefixed(row: Row, prefix: str) -> dict[str, Any]:
    """The columns a statement returned under a prefix (a function's i_*), by their own names."""
    return {name[len(prefix):]: row[name] for name in row.keys() if name.startswith(prefix)}


def ahead_claim_params(claim: NewClaim | None) -> dict[str, Any]:
    """claim_params under c_* names (beside an instance's own ns/wf/key), all None without a claim."""
    if claim is None:
        return dict.fromkeys(("c_scope", "c_key", "c_fp", "c_holder", "c_lease", "c_ttl"))
    return {"c_scope": claim.ref.scope, "c_key": claim.ref.key, "c_fp": claim.fingerprint, "c_holder": claim.holder,
            "c_lease": claim.lease_seconds, "c_ttl": claim.ttl_seconds}


def claimed_key_of(d: Dialect, claim: NewClaim | None, row: Row) -> IdempotencyKey | None:
    """The key a statement's claim inserted (in progress, attempt 1), from its c_* columns; None: none inserted."""
    if claim is None or row["c_status"] is None:
        return None
    return IdempotencyKey(
        namespace=claim.ref.namespace, scope=claim.ref.scope, key=claim.ref.key, status=KeyStatus(row["c_status"]),
        fingerprint=row["c_fingerprint"], attempt=row["c_attempt"], holder=row["c_holder"],
        lease_expires_at=d.time_or_none(row["c_lease_expires_at"]), result_json=None, error_message="",
        expires_at=d.time(row["c_expires_at"]), created_at=d.time(row["c_created_at"]),
        updated_at=d.time(row["c_updated_at"]))


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
            RETURNING {claimed})""").format(claimed=sql.SQL(CLAIMED_COLUMNS)),
    claimed=sql.SQL(", claimed.*"), join=sql.SQL(" LEFT JOIN claimed ON true"))
_START_NEW_ONLY = _START_NEW.format(columns=sql.SQL(_COLUMNS), claim=sql.SQL(""), claimed=sql.SQL(""), join=sql.SQL(""))


class InstanceStore(instances.InstanceStore):
    """The shared instance store, with PostgreSQL's one-statement paths."""

    one_statement_start = True
    one_statement_finish = True

    def __init__(self) -> None:
        super().__init__(RUNNER)

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
            cur = await pg(conn).execute(_START_NEW_AND_CLAIM, {**params, **ahead_claim_params(claim)})
        row = await cur.fetchone()
        if row is None:
            return None
        return base.StartedNew(self.record(row), row["current_version"], claimed_key_of(DIALECT, claim, row))

    async def finish_running_txn(self, conn: Conn, ref: InstanceRef, *, status: InstanceStatus, actor: str,
                                 error_message: str = "", result_json: bytes | None = None) -> Instance | None:
        # 'running' is also the stored status of a suspended instance (suspended_at set): both are not final.
        # The event's foreign key is checked at the end of the statement, as in start_new_txn.
        cur = await pg(conn).execute(
            f"""WITH done AS (
                    UPDATE durable_instances
                    SET status = %(status)s, error_message = %(error)s, result_json = %(result)s,
                        {FINISH_SET.format(now="now()")}
                    WHERE {_KEY} AND status = 'running'
                    RETURNING {_COLUMNS}),
                event AS (
                    INSERT INTO durable_instance_events (namespace, workflow_id, instance_key, kind, actor, detail)
                    SELECT namespace, workflow_id, instance_key, %(status)s, %(actor)s, %(error)s FROM done)
                SELECT * FROM done""",
            {**_key(ref), "status": status.value, "error": error_message, "result": result_json, "actor": actor},
        )
        row = await cur.fetchone()
        return self.record(row) if row else None

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
        found = [self.record(row) for row in await cur.fetchall()]
        return {i.ref: i for i in found}

    async def record_checkpoints_txn(self, conn: Conn, advances: list[base.CheckpointAdvance]) -> None:
        if not advances:
            return
        await pg(conn).execute(ADVANCE, {"ns": core.one_namespace([a.ref for a in advances]),
                                         **advance_params(advances)})

    async def claim_resumable_txn(self, conn: Conn, namespace: str, *, workflow_ids: list[str], limit: int,
                                  lease_seconds: int,
                                  token_prefix: str) -> list[tuple[Instance, ResumeReason, str]]:
        """Locks stalled and due instances with SKIP LOCKED and leases them to fresh claim tokens."""
        cur = await pg(conn).execute(
            f"""WITH candidates AS (
                   SELECT namespace, workflow_id, instance_key, {RESUME_REASON}
                   FROM durable_instances
                   WHERE namespace = %(ns)s AND {RESUMABLE_WHERE.format(now="now()")}
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
            inst = self.record(row)
            out.append((inst, ResumeReason(row["reason"]), inst.lease_owner))
        return out
