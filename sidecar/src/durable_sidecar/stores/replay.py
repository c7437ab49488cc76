"""ReplayStore: what a replay copies from the original instance to its fork, written once for both backends.

Each method runs inside the caller's transaction; the caller has locked the original and created the fork's
row (through the InstanceStore, the one writer of durable_instances).
"""

from __future__ import annotations

from ..domain import InstanceRef
from .base import Conn
from .core import Runner

REPLAYED_KIND = "replayed"

_FROM = "namespace = %(ns)s AND workflow_id = %(wf)s AND instance_key = %(key)s"


class ReplayStore:
    def __init__(self, runner: Runner) -> None:
        self.r = runner
        d = runner.dialect
        now = d.now_sql
        self._start_item = d.sql(
            f"""INSERT INTO durable_instance_start_items
                    (namespace, workflow_id, instance_key, encoding, item, size_bytes, created_at, from_signal)
                SELECT namespace, workflow_id, %(fork)s, encoding, item, size_bytes, {now}, 0
                FROM durable_instance_start_items WHERE {_FROM}""")
        self._checkpoints = d.sql(
            f"""INSERT INTO durable_checkpoints
                    (namespace, workflow_id, instance_key, sequence, step_name, encoding, state, sha256, size_bytes,
                     stored_bytes, execution_id, node_name, created_at, file_count)
                SELECT namespace, workflow_id, %(fork)s, sequence, step_name, encoding, state, sha256, size_bytes,
                       stored_bytes, execution_id, node_name, created_at, file_count
                FROM durable_checkpoints WHERE {_FROM} AND sequence <= %(upto)s""")
        # The files those checkpoints carry (references: each content stays stored once).
        self._files = d.sql(
            f"""INSERT INTO durable_checkpoint_files (namespace, workflow_id, instance_key, sequence, position,
                                                      property, file_name, mime_type, sha256, size_bytes)
                SELECT namespace, workflow_id, %(fork)s, sequence, position, property, file_name, mime_type, sha256,
                       size_bytes
                FROM durable_checkpoint_files WHERE {_FROM} AND sequence <= %(upto)s""")
        self._fields = d.sql(
            f"""INSERT INTO durable_search_fields
                    (namespace, workflow_id, instance_key, name, kind, num_value, text_value)
                SELECT namespace, workflow_id, %(fork)s, name, kind, num_value, text_value
                FROM durable_search_fields WHERE {_FROM}""")
        self._step = d.sql(f"SELECT step_name FROM durable_checkpoints WHERE {_FROM} AND sequence = %(seq)s")
        self._replays = d.sql(f"SELECT count(*) AS n FROM durable_instance_events WHERE {_FROM} "
                              f"AND kind = '{REPLAYED_KIND}'")

    @staticmethod
    def _params(source: InstanceRef, **more: object) -> dict[str, object]:
        return {"ns": source.namespace, "wf": source.workflow_id, "key": source.instance_key, **more}

    async def step_txn(self, conn: Conn, source: InstanceRef, sequence: int) -> str | None:
        """The step name of the original's checkpoint `sequence`; None when it has no such checkpoint."""
        row = await self.r.one(conn, self._step, self._params(source, seq=sequence))
        return str(row["step_name"]) if row else None

    async def replays_txn(self, conn: Conn, source: InstanceRef) -> int:
        """How many replays of the original were made before."""
        row = await self.r.one(conn, self._replays, self._params(source))
        return int(row["n"]) if row else 0

    async def copy_txn(self, conn: Conn, source: InstanceRef, fork: InstanceRef, *, upto: int) -> int:
        """The original's start item, checkpoints 1..upto (with their states and files) and search fields, under
        the fork's key; how many checkpoints."""
        params = self._params(source, fork=fork.instance_key, upto=upto)
        await self.r.execute(conn, self._start_item, await self.r.with_now(conn, **params))
        copied = await self.r.execute(conn, self._checkpoints, params)
        await self.r.execute(conn, self._files, params)
        await self.r.execute(conn, self._fields, params)
        return copied
