"""OperationStore: bulk operations by filter (durable_operations) and the instances they take, written once for
both backends.

An operation takes instances in (workflow_id, instance_key) order after its
cursor. A batch's actions and the cursor's advance commit together, and the
advance checks that the operation is still this sidecar's (its owner): a batch
of a sidecar that lost the operation rolls back whole, so no instance is acted
on twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..domain import Instance, InstanceFilter, InstanceRef, Page
from ..domain_operations import BulkAction, Operation, OperationStatus
from .base import Conn
from .core import INSTANCE_COLUMNS, Dialect, Row, Runner
from .instance_listing import STALLED_WHERE, instance_filter, status_condition
from .instances import instance_of
from .paging import cut_page, decode_cursor

OPERATION_COLUMNS = ("id, namespace, action, status, selector_json, actor, reason, to_version, replay_from_step, "
                     "matched_at_start, acted, skipped, "
                     "last_workflow_id, last_instance_key, last_skip, owner, created_at, updated_at, finished_at")


def selection(d: Dialect, namespace: str, flt: InstanceFilter, now: Any) -> tuple[list[str], dict[str, Any]]:
    """The conditions of a bulk operation's filter: ListInstances' conditions, with its statuses and stalled_only."""
    where, params = instance_filter(d, namespace, flt, now)
    if flt.statuses:
        where.append(status_condition(flt.statuses))  # enum literals only
    if flt.stalled_only:
        where.append(STALLED_WHERE.format(now=d.now_sql))  # fixed text
    return where, params


class OperationStore:
    def __init__(self, runner: Runner) -> None:
        self.r = runner
        d = runner.dialect
        now, later = d.now_sql, d.later_sql.format(param="lease")
        self._insert = d.sql(
            f"""INSERT INTO durable_operations (namespace, action, status, selector_json, actor, reason, to_version,
                                                replay_from_step, matched_at_start, created_at, updated_at)
                VALUES (%(ns)s, %(action)s, 'running', %(selector)s, %(actor)s, %(reason)s, %(to_version)s,
                        %(from_step)s, %(matched)s, {now}, {now})
                RETURNING {OPERATION_COLUMNS}""")
        self._get = d.sql(f"SELECT {OPERATION_COLUMNS} FROM durable_operations WHERE namespace = %(ns)s AND id = %(id)s"
                          f"{d.lock(True)}")
        self._list = d.sql(f"SELECT {OPERATION_COLUMNS} FROM durable_operations WHERE namespace = %(ns)s "
                           f"AND id < %(before)s ORDER BY id DESC LIMIT %(limit)s")
        self._status = d.sql(
            f"""UPDATE durable_operations
                SET status = %(status)s, updated_at = {now},
                    finished_at = CASE WHEN %(status)s IN ('cancelled', 'completed') THEN {now} ELSE finished_at END,
                    owner = CASE WHEN %(status)s = 'running' THEN owner ELSE '' END
                WHERE namespace = %(ns)s AND id = %(id)s
                RETURNING {OPERATION_COLUMNS}""")
        self._next = d.sql(
            f"""SELECT id FROM durable_operations
                WHERE status = 'running' AND (owner = '' OR lease_expires_at IS NULL OR lease_expires_at < {now})
                ORDER BY id LIMIT 1{d.lock(True)}""")
        self._take = d.sql(
            f"""UPDATE durable_operations SET owner = %(owner)s, lease_expires_at = {later}, updated_at = {now}
                WHERE id = %(id)s AND status = 'running'
                  AND (owner = '' OR lease_expires_at IS NULL OR lease_expires_at < {now})
                RETURNING {OPERATION_COLUMNS}""")
        self._mine = d.sql(f"SELECT {OPERATION_COLUMNS} FROM durable_operations WHERE id = %(id)s{d.lock(True)}")
        self._advance = d.sql(
            f"""UPDATE durable_operations
                SET last_workflow_id = %(wf)s, last_instance_key = %(key)s, acted = acted + %(acted)s,
                    skipped = skipped + %(skipped)s,
                    last_skip = CASE WHEN %(skip)s = '' THEN last_skip ELSE %(skip)s END,
                    lease_expires_at = {later}, updated_at = {now},
                    status = CASE WHEN %(done)s = 1 THEN 'completed' ELSE status END,
                    finished_at = CASE WHEN %(done)s = 1 THEN {now} ELSE finished_at END,
                    owner = CASE WHEN %(done)s = 1 THEN '' ELSE owner END
                WHERE id = %(id)s AND owner = %(owner)s AND status = 'running'""")

        self._newest_step = d.sql(
            """SELECT max(sequence) AS seq FROM durable_checkpoints
               WHERE namespace = %(ns)s AND workflow_id = %(wf)s AND instance_key = %(key)s AND step_name = %(step)s""")

    def _operation(self, row: Row) -> Operation:
        d = self.r.dialect
        return Operation(
            id=int(row["id"]), namespace=row["namespace"], action=BulkAction(row["action"]),
            status=OperationStatus(row["status"]), selector_json=row["selector_json"], actor=row["actor"],
            reason=row["reason"], to_version=int(row["to_version"]), replay_from_step=row["replay_from_step"],
            matched_at_start=int(row["matched_at_start"]), acted=int(row["acted"]),
            skipped=int(row["skipped"]), last_workflow_id=row["last_workflow_id"],
            last_instance_key=row["last_instance_key"], last_skip=row["last_skip"], owner=row["owner"],
            created_at=d.time(row["created_at"]), updated_at=d.time(row["updated_at"]),
            finished_at=d.time_or_none(row["finished_at"]))

    # --- the instances an operation takes ------------------------------------------------------------------

    async def newest_step_txn(self, conn: Conn, ref: InstanceRef, step: str) -> int:
        """The sequence of the instance's newest checkpoint of this step; 0 when it has none."""
        row = await self.r.one(conn, self._newest_step, {"ns": ref.namespace, "wf": ref.workflow_id,
                                                         "key": ref.instance_key, "step": step})
        return int(row["seq"]) if row and row["seq"] is not None else 0

    async def count_txn(self, conn: Conn, namespace: str, flt: InstanceFilter) -> int:
        d = self.r.dialect
        where, params = selection(d, namespace, flt, (await self.r.with_now(conn)).get("now"))
        row = await self.r.one(conn, d.sql(f"SELECT count(*) AS n FROM durable_instances WHERE {' AND '.join(where)}"),
                               params)
        return int(row["n"]) if row else 0

    async def next_instances_txn(self, conn: Conn, namespace: str, flt: InstanceFilter, *,
                                 after: tuple[str, str] | None, limit: int,
                                 existed_at: datetime | None = None) -> list[Instance]:
        """The next matching instances after the cursor, in (workflow_id, instance_key) order; with existed_at,
        only those created by then (an operation never takes an instance made after it started, a fork say)."""
        d = self.r.dialect
        where, params = selection(d, namespace, flt, (await self.r.with_now(conn)).get("now"))
        if existed_at is not None:
            where.append("created_at <= %(existed_at)s")
            params["existed_at"] = d.time_param(existed_at)
        if after is not None:
            where.append("(workflow_id, instance_key) > (%(after_wf)s, %(after_key)s)")
            params.update(after_wf=after[0], after_key=after[1])
        params["limit"] = limit
        rows = await self.r.all(conn, d.sql(
            f"SELECT {INSTANCE_COLUMNS} FROM durable_instances WHERE {' AND '.join(where)} "
            "ORDER BY workflow_id, instance_key LIMIT %(limit)s"), params)
        return [instance_of(d, row) for row in rows]

    # --- operations ----------------------------------------------------------------------------------------

    async def insert_txn(self, conn: Conn, namespace: str, *, action: BulkAction, selector_json: str, actor: str,
                         reason: str, to_version: int, replay_from_step: str, matched: int) -> Operation:
        row = await self.r.one(conn, self._insert, await self.r.with_now(
            conn, ns=namespace, action=action.value, selector=selector_json, actor=actor, reason=reason,
            to_version=to_version, from_step=replay_from_step, matched=matched))
        assert row is not None
        return self._operation(row)

    async def get_txn(self, conn: Conn, namespace: str, op_id: int) -> Operation | None:
        """The operation, locked until the transaction ends."""
        row = await self.r.one(conn, self._get, {"ns": namespace, "id": op_id})
        return self._operation(row) if row else None

    async def list_txn(self, conn: Conn, namespace: str, page: Page) -> tuple[list[Operation], str]:
        before = 2**62
        if page.token:
            (value,) = decode_cursor(page.token, 1)
            before = value if isinstance(value, int) else 0
        rows = await self.r.all(conn, self._list, {"ns": namespace, "before": before, "limit": page.size + 1})
        return cut_page([self._operation(r) for r in rows], page.size, lambda o: [o.id])

    async def set_status_txn(self, conn: Conn, namespace: str, op_id: int, status: OperationStatus) -> Operation:
        row = await self.r.one(conn, self._status, await self.r.with_now(conn, ns=namespace, id=op_id,
                                                                          status=status.value))
        assert row is not None
        return self._operation(row)

    async def take_next_txn(self, conn: Conn, *, owner: str, lease_seconds: int) -> Operation | None:
        """The oldest running operation nobody holds (or whose holder's lease lapsed), now held by `owner`."""
        found = await self.r.one(conn, self._next, await self.r.with_now(conn))
        if found is None:
            return None
        row = await self.r.one(conn, self._take, await self.r.with_now(conn, owner=owner, id=int(found["id"]),
                                                                        lease=lease_seconds))
        return self._operation(row) if row else None

    async def lock_txn(self, conn: Conn, op_id: int) -> Operation | None:
        """The operation by id (any namespace: the loop's), locked until the transaction ends."""
        row = await self.r.one(conn, self._mine, {"id": op_id})
        return self._operation(row) if row else None

    async def advance_txn(self, conn: Conn, op: Operation, *, last: tuple[str, str], acted: int, skipped: int,
                          last_skip: str, done: bool, lease_seconds: int) -> bool:
        """Moves the operation's cursor and counts and renews its lease; False when `op.owner` no longer holds it."""
        return await self.r.execute(conn, self._advance, await self.r.with_now(
            conn, id=op.id, owner=op.owner, wf=last[0], key=last[1], acted=acted, skipped=skipped, skip=last_skip,
            done=int(done), lease=lease_seconds)) == 1

