"""CheckpointStore on PostgreSQL: the shared store (stores/checkpoints.py) with the one-statement paths.

The saves call the PL/pgSQL functions of the migrations (durable_save_checkpoint,
durable_save_checkpoints, durable_save_step, durable_save_step_then); a batch is
inserted through unnest, with its instances' advance when asked, and a prune is
one statement.
"""

from __future__ import annotations

import json
from typing import Any

from psycopg import sql
from psycopg.rows import tuple_row

from ...domain import (
    Checkpoint,
    IdempotencyKey,
    KeyRef,
    KeyStatus,
    NewCheckpoint,
    NewClaim,
    PrunePolicy,
    PruneResult,
)
from .. import base, checkpoints, core
from ..base import Conn
from ..checkpoints import CHECKPOINT_META as _META
from ..core import instance_params as _key
from ..instances import instance_of
from ..states import EncodedState
from .db import DIALECT, RUNNER, pg
from .instances import ADVANCE, advance_params, ahead_claim_params, claimed_key_of, prefixed

_SAVE_STEP = sql.SQL(
    """SELECT * FROM {function}(
           %(ns)s, %(wf)s, %(key)s, %(step)s, %(enc)s::smallint, %(state)s::bytea, %(sha)s,
           %(size)s::bigint, %(exec)s, %(node)s, %(expected)s::bigint, %(lease)s::integer,
           %(default_lease)s::integer, %(base)s::bigint, %(digest)s, %(k_scope)s, %(k_key)s,
           %(k_attempt)s::bigint, %(k_result)s::bytea{then})""")
_SAVE_STEP_ONLY = _SAVE_STEP.format(function=sql.Identifier("durable_save_step"), then=sql.SQL(""))
_SAVE_STEP_THEN = _SAVE_STEP.format(function=sql.Identifier("durable_save_step_then"), then=sql.SQL(""",
           %(c_scope)s, %(c_key)s, %(c_fp)s, %(c_holder)s, %(c_lease)s::integer, %(c_ttl)s::integer,
           %(complete_instance)s"""))


def _checkpoint(row: Any, *, with_state: bool) -> Checkpoint:
    return checkpoints.checkpoint_of(DIALECT, row, with_state=with_state)



class CheckpointStore(checkpoints.CheckpointStore):
    """The shared checkpoint store, with PostgreSQL's one-statement saves, batch insert and prune."""

    one_statement_save = True
    one_statement_step_save = True

    def __init__(self, *, compress_threshold_bytes: int) -> None:
        super().__init__(RUNNER, compress_threshold_bytes=compress_threshold_bytes)

    async def save_single_txn(self, conn: Conn, row: base.NewCheckpointRow, *, expected_sequence: int | None,
                              lease_seconds: int, default_lease_seconds: int) -> base.SingleSave:
        # durable_save_checkpoint() is migration 0006: the whole save in one round trip.
        cur = await pg(conn).execute(
            """SELECT * FROM durable_save_checkpoint(
                   %(ns)s, %(wf)s, %(key)s, %(step)s, %(enc)s::smallint, %(state)s::bytea, %(sha)s,
                   %(size)s::bigint, %(exec)s, %(node)s, %(expected)s::bigint, %(lease)s::integer,
                   %(default_lease)s::integer)""",
            {**_key(row.ref), "step": row.step_name, "enc": row.encoded.encoding, "state": row.encoded.data,
             "sha": row.sha256, "size": row.size_bytes, "exec": row.execution_id, "node": row.node_name,
             "expected": expected_sequence, "lease": lease_seconds, "default_lease": default_lease_seconds},
        )
        found = await cur.fetchone()
        assert found is not None, "the function always returns one row"
        saved = _checkpoint(found, with_state=False) if found["workflow_id"] is not None else None
        return base.SingleSave(found["outcome"], found["last_sequence"], saved)

    async def save_step_txn(self, conn: Conn, row: base.NewCheckpointRow, *, expected_sequence: int | None,
                            lease_seconds: int, default_lease_seconds: int, base_sequence: int, base_digest: str,
                            complete: tuple[KeyRef, int, bytes] | None, claim: NewClaim | None = None,
                            complete_instance: bool = False) -> base.StepSave | None:
        # durable_save_step() is migration 0010: the nodes' step-result save, completing its key, in one round
        # trip; durable_save_step_then() (0012) calls it and, when it wrote, claims the next Guard's key or
        # completes the instance too.
        key_ref, attempt, result = complete if complete is not None else (None, None, None)
        params = {**_key(row.ref), "step": row.step_name, "enc": row.encoded.encoding, "state": row.encoded.data,
                  "sha": row.sha256, "size": row.size_bytes, "exec": row.execution_id, "node": row.node_name,
                  "expected": expected_sequence, "lease": lease_seconds, "default_lease": default_lease_seconds,
                  "base": base_sequence, "digest": base_digest, "k_scope": key_ref.scope if key_ref else None,
                  "k_key": key_ref.key if key_ref else None, "k_attempt": attempt, "k_result": result}
        if claim is None and not complete_instance:
            cur = await pg(conn).execute(_SAVE_STEP_ONLY, params)
        else:
            cur = await pg(conn).execute(_SAVE_STEP_THEN, {**params, **ahead_claim_params(claim),
                                                           "complete_instance": complete_instance})
        found = await cur.fetchone()
        assert found is not None, "the function always returns one row"
        if found["outcome"] != "written":
            return None
        checkpoint = Checkpoint(row.ref.workflow_id, row.ref.instance_key, found["sequence"], row.step_name,
                                row.sha256, row.size_bytes, len(row.encoded.data), row.execution_id, row.node_name,
                                found["created_at"])
        claimed = claimed_key_of(DIALECT, claim, found)
        finished = None
        if complete_instance:
            assert found["i_status"] is not None, "a written save's instance is running: it completes"
            finished = instance_of(DIALECT, prefixed(found, "i_"))
        if key_ref is None:
            return base.StepSave(checkpoint, None, found["created_at"], claimed, finished)
        key = IdempotencyKey(
            namespace=key_ref.namespace, scope=key_ref.scope, key=key_ref.key, status=KeyStatus(found["k_status"]),
            fingerprint=found["k_fingerprint"], attempt=found["k_attempt"], holder=found["k_holder"],
            lease_expires_at=found["k_lease_expires_at"], result_json=core.blob(found["k_result_json"]),
            error_message=found["k_error_message"], expires_at=found["k_expires_at"],
            created_at=found["k_created_at"], updated_at=found["k_updated_at"])
        return base.StepSave(checkpoint, key, key.updated_at, claimed, finished)

    async def save_many_txn(self, conn: Conn, items: list[tuple[NewCheckpoint, EncodedState]], *,
                            default_lease_seconds: int) -> base.BatchSave | None:
        # durable_save_checkpoints() is migration 0009: the whole batch in one round trip. The
        # items go as one JSON text and the states as one bytea (json.dumps and a join, both in C: no
        # per-element array dumping); only what the sidecar does not know comes back (sequences, times).
        namespace = core.one_namespace([new.ref for new, _ in items])
        index: dict[tuple[str, str], int] = {}
        rows = []
        offset = 1
        for n, (new, encoded) in enumerate(items):
            u = index.setdefault((new.ref.workflow_id, new.ref.instance_key), len(index) + 1)
            length = len(encoded.data)
            rows.append({"n": n, "u": u, "step": new.step_name, "enc": encoded.encoding, "sha": new.sha256,
                         "size": len(new.state), "len": length, "o": offset, "exec": new.execution_id,
                         "node": new.node_name, "expected": new.expected_sequence, "lease": new.lease_seconds})
            offset += length
        states = b"".join(encoded.data for _, encoded in items)
        cur = pg(conn).cursor(row_factory=tuple_row)
        await cur.execute(
            "SELECT * FROM durable_save_checkpoints(%s, %s::json, %s::json, %b::bytea, %s::integer)",
            (namespace, json.dumps(list(index), separators=(",", ":")), json.dumps(rows, separators=(",", ":")),
             states, default_lease_seconds),
        )
        del states
        saved: list[tuple[Checkpoint, bool]] = []
        for (outcome, item, last, sequence, src, *stored) in await cur.fetchall():
            if outcome == "written":
                new, encoded = items[item]
                saved.append((Checkpoint(new.ref.workflow_id, new.ref.instance_key, sequence, new.step_name,
                                         new.sha256, len(new.state), len(encoded.data), new.execution_id,
                                         new.node_name, stored[6]), False))
            elif outcome == "pending":
                saved.append((saved[src][0], True))
            elif outcome == "deduplicated":
                new = items[item][0]
                saved.append((Checkpoint(new.ref.workflow_id, new.ref.instance_key, sequence, *stored), True))
            else:
                return base.BatchSave([], outcome, item, last or 0)
        return base.BatchSave(saved)

    async def insert_many_txn(self, conn: Conn, rows: list[base.NewCheckpointRow]) -> list[Checkpoint]:
        if not rows:
            return []
        # One statement for the whole batch: PostgreSQL parses, plans and round-trips once.
        cur = await pg(conn).execute(f"{_INSERT_MANY} RETURNING {_META}", _insert_params(rows))
        return await _inserted(cur, rows)

    async def append_txn(self, conn: Conn, rows: list[base.NewCheckpointRow],
                         advances: list[base.CheckpointAdvance]) -> list[Checkpoint] | None:
        if not rows or not advances:
            return None
        # The insert and the instances' advance (InstanceStore.record_checkpoints_txn) in one round trip; the
        # instances are locked by the caller, and the checkpoints' foreign key is checked at the statement's end.
        cur = await pg(conn).execute(
            f"""WITH inserted AS ({_INSERT_MANY} RETURNING {_META}),
                advanced AS ({ADVANCE})
                SELECT * FROM inserted""",
            {**_insert_params(rows), **advance_params(advances)},
        )
        return await _inserted(cur, rows)

    async def prune_txn(self, conn: Conn, namespace: str, policy: PrunePolicy) -> PruneResult:
        """Deletes by policy in one statement, always keeping each instance's newest checkpoint; updates counters."""
        where, params = checkpoints.prune_conditions(DIALECT, namespace, policy)
        victims = f"""SELECT c.namespace, c.workflow_id, c.instance_key, c.sequence
               FROM durable_checkpoints c
               JOIN durable_instances i USING (namespace, workflow_id, instance_key)
               WHERE {" AND ".join(where)}"""
        if policy.dry_run:
            query = f"SELECT count(*) AS n, count(DISTINCT (workflow_id, instance_key)) AS m FROM ({victims}) v"
        else:
            query = f"""WITH gone AS (
                       DELETE FROM durable_checkpoints d
                       USING ({victims}) v
                       WHERE d.namespace = v.namespace AND d.workflow_id = v.workflow_id
                         AND d.instance_key = v.instance_key AND d.sequence = v.sequence
                       RETURNING d.namespace, d.workflow_id, d.instance_key),
                   per AS (
                       SELECT namespace, workflow_id, instance_key, count(*) AS n FROM gone
                       GROUP BY namespace, workflow_id, instance_key),
                   upd AS (
                       UPDATE durable_instances i SET checkpoint_count = i.checkpoint_count - per.n
                       FROM per
                       WHERE i.namespace = per.namespace AND i.workflow_id = per.workflow_id
                         AND i.instance_key = per.instance_key
                       RETURNING 1)
                   SELECT coalesce(sum(n), 0)::bigint AS n, count(*) AS m FROM per"""
        row = await RUNNER.one(conn, query, params)  # fixed fragments only
        assert row is not None
        return PruneResult(deleted_count=int(row["n"]), instance_count=int(row["m"]))


# The arrays go in binary (%b): in text, every element is scanned and escaped.
_INSERT_MANY = """INSERT INTO durable_checkpoints
        (namespace, workflow_id, instance_key, sequence, step_name, encoding, state, sha256,
         size_bytes, stored_bytes, execution_id, node_name)
    SELECT %(ns)s, * FROM unnest(%(wfs)b::text[], %(keys)b::text[], %(seqs)b::bigint[],
                                 %(steps)b::text[], %(encs)b::smallint[], %(states)b::bytea[],
                                 %(shas)b::text[], %(sizes)b::bigint[], %(stored)b::bigint[],
                                 %(execs)b::text[], %(nodes)b::text[])"""


def _insert_params(rows: list[base.NewCheckpointRow]) -> dict[str, Any]:
    return {"ns": core.one_namespace([r.ref for r in rows]),
            "wfs": [r.ref.workflow_id for r in rows], "keys": [r.ref.instance_key for r in rows],
            "seqs": [r.sequence for r in rows], "steps": [r.step_name for r in rows],
            "encs": [r.encoded.encoding for r in rows], "states": [r.encoded.data for r in rows],
            "shas": [r.sha256 for r in rows], "sizes": [r.size_bytes for r in rows],
            "stored": [len(r.encoded.data) for r in rows], "execs": [r.execution_id for r in rows],
            "nodes": [r.node_name for r in rows]}


async def _inserted(cur: Any, rows: list[base.NewCheckpointRow]) -> list[Checkpoint]:
    # RETURNING order is not promised by SQL: match the rows by their primary key.
    by_key = {(c.workflow_id, c.instance_key, c.sequence): c
              for c in (_checkpoint(row, with_state=False) for row in await cur.fetchall())}
    return [by_key[(r.ref.workflow_id, r.ref.instance_key, r.sequence)] for r in rows]
