"""CheckpointStore on SQLite: append-only rows of durable_checkpoints, compressed above a threshold."""

from __future__ import annotations

from ...domain import Checkpoint, InstanceRef, Page, PrunePolicy, PruneResult
from .. import base, core
from ..base import Conn
from ..core import CHECKPOINT_META as _META
from ..core import checkpoint_columns
from ..core import instance_params as _key
from ..paging import after_sequence, cut_page
from .db import DIALECT, Row, lite

_KEY = DIALECT.sql(core.INSTANCE_KEY)
LATEST = core.latest_checkpoint_query(DIALECT)


def _checkpoint(row: Row, *, with_state: bool) -> Checkpoint:
    return core.checkpoint_of(DIALECT, row, with_state=with_state)



class CheckpointStore(base.CheckpointStore):
    async def insert_many_txn(self, conn: Conn, rows: list[base.NewCheckpointRow]) -> list[Checkpoint]:
        # In process, a statement per row costs no round trip; the file is written at COMMIT.
        c = lite(conn)
        out = []
        for r in rows:
            row = await c.one(
                f"""INSERT INTO durable_checkpoints
                        (namespace, workflow_id, instance_key, sequence, step_name, encoding, state, sha256,
                         size_bytes, stored_bytes, execution_id, node_name, created_at)
                    VALUES (:ns, :wf, :key, :seq, :step, :enc, :state, :sha, :size, :stored, :exec, :node, :now)
                    RETURNING {_META}""",
                {**_key(r.ref), "seq": r.sequence, "step": r.step_name, "enc": r.encoded.encoding,
                 "state": r.encoded.data, "sha": r.sha256, "size": r.size_bytes, "stored": len(r.encoded.data),
                 "exec": r.execution_id, "node": r.node_name, "now": c.now_us},
            )
            assert row is not None
            out.append(_checkpoint(row, with_state=False))
        return out

    async def latest_txn(self, conn: Conn, ref: InstanceRef, *,
                         state_below: int) -> tuple[bool, Checkpoint | None]:
        return core.latest_of(DIALECT, await lite(conn).one(LATEST, {**_key(ref), "state_below": state_below}))

    async def get_txn(self, conn: Conn, ref: InstanceRef, sequence: int, *,
                      with_state: bool) -> Checkpoint | None:
        cols = checkpoint_columns(with_state)
        row = await lite(conn).one(f"SELECT {cols} FROM durable_checkpoints WHERE {_KEY} AND sequence = :seq",
                                   {**_key(ref), "seq": sequence})
        return _checkpoint(row, with_state=with_state) if row else None

    async def list_txn(self, conn: Conn, ref: InstanceRef, page: Page, *,
                       with_state: bool) -> tuple[list[Checkpoint], str]:
        after = after_sequence(page.token)
        cols = checkpoint_columns(with_state)
        found = await lite(conn).all(
            f"""SELECT {cols} FROM durable_checkpoints WHERE {_KEY} AND sequence > :after
                ORDER BY sequence LIMIT :limit""",
            {**_key(ref), "after": after, "limit": page.size + 1},
        )
        rows = [_checkpoint(r, with_state=with_state) for r in found]
        return cut_page(rows, page.size, lambda c: [c.sequence])

    async def prune_txn(self, conn: Conn, namespace: str, policy: PrunePolicy) -> PruneResult:
        """Counts the victims per instance, deletes them and lowers each instance's counter (one transaction)."""
        c = lite(conn)
        where = ["c.namespace = :ns", "c.sequence < i.last_sequence"]
        params: dict[str, object] = {"ns": namespace}
        if policy.workflow_id:
            where.append("c.workflow_id = :wf")
            params["wf"] = policy.workflow_id
        if policy.instance_key:
            where.append("c.instance_key = :key")
            params["key"] = policy.instance_key
        if policy.keep_last:
            where.append("c.sequence <= i.last_sequence - :keep")
            params["keep"] = policy.keep_last
        if policy.older_than_seconds:
            where.append("c.created_at < :cutoff")
            params["cutoff"] = c.after(-policy.older_than_seconds)
        joined = f"""durable_instances i
                     WHERE i.namespace = c.namespace AND i.workflow_id = c.workflow_id
                       AND i.instance_key = c.instance_key AND {" AND ".join(where)}"""
        per = await c.all(
            f"""SELECT c.workflow_id, c.instance_key, count(*) AS n
                FROM durable_checkpoints c, {joined}
                GROUP BY c.workflow_id, c.instance_key""",
            params,
        )
        result = PruneResult(deleted_count=sum(int(r["n"]) for r in per), instance_count=len(per))
        if policy.dry_run or not per:
            return result
        await c.run(f"DELETE FROM durable_checkpoints AS c WHERE EXISTS (SELECT 1 FROM {joined})", params)
        await c.run_many(
            """UPDATE durable_instances SET checkpoint_count = checkpoint_count - :n
               WHERE namespace = :ns AND workflow_id = :wf AND instance_key = :key""",
            [{"ns": namespace, "wf": r["workflow_id"], "key": r["instance_key"], "n": r["n"]} for r in per],
        )
        return result
