"""InstanceStore: rows of durable_instances and their audit events, written once; the one writer of that table.

Both backends run the same SQL text through their Runner; the Dialect says how
database time, a time some seconds later, a list parameter, the row-locking
clause and the newest checkpoint's join are written. PostgreSQL's subclass
(postgres/instances.py) adds the one-statement paths: a start, a finish, a
batch lock and advance, and a claim that skips rows another claim holds.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any, ClassVar

from ..domain import (
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
    RetryPolicy,
    StatusCounts,
)
from .base import CheckpointAdvance, Conn, StartedNew
from .core import INSTANCE_COLUMNS, INSTANCE_KEY, Dialect, Row, Runner, blob, instance_params, lease_end_sql
from .instance_listing import count_instances_query, list_instances_query, sorted_cursor, status_counts
from .paging import cut_page, decode_cursor
from .states import EncodedState, decode_state

# Running, not suspended, and either stalled (its lease lapsed before {now}, not waiting for an event) or due.
RESUMABLE_WHERE = ("status = 'running' AND suspended_at IS NULL "
                   "AND ((wake_at IS NULL AND awaited_event = '' AND lease_expires_at < {now}) OR wake_at <= {now})")
RESUME_REASON = "CASE WHEN wake_at IS NULL THEN 'stalled' ELSE 'wake_up' END AS reason"
# What moving an instance to a final status sets besides status, error_message and result_json.
FINISH_SET = "lease_owner = '', lease_expires_at = NULL, wake_at = NULL, finished_at = {now}, updated_at = {now}"

# Instance columns a wait, retry, redrive or purge may set (update_txn), and which of them hold times.
SETTABLE = frozenset({
    "status", "error_message", "finished_at", "lease_owner", "lease_expires_at", "wake_at", "wake_reason",
    "awaited_event", "wait_outcome", "wait_sequence", "wait_event_id", "retry_max_resumes", "retry_initial_ms",
    "retry_max_ms", "retry_multiplier", "retry_jitter", "attempt", "attempt_sequence", "last_error", "suspended_at",
    "result_json", "checkpoint_count", "last_sequence", "last_step",
})
_TIMES = frozenset({"finished_at", "lease_expires_at", "wake_at", "suspended_at"})


# --- rows and queries --------------------------------------------------------------------------------

def retry_policy_of(row: Row) -> RetryPolicy | None:
    """The instance's stored retry policy; None when it has none (the sidecar's default applies)."""
    if row["retry_max_resumes"] is None:
        return None
    return RetryPolicy(max_automatic_resumes=row["retry_max_resumes"], initial_backoff_ms=row["retry_initial_ms"],
                       max_backoff_ms=row["retry_max_ms"], backoff_multiplier=float(row["retry_multiplier"]),
                       jitter=float(row["retry_jitter"]))


def instance_of(d: Dialect, row: Row) -> Instance:
    status = InstanceStatus(row["status"])
    suspended_at = d.time_or_none(row["suspended_at"])
    if status is InstanceStatus.RUNNING and suspended_at is not None:
        status = InstanceStatus.SUSPENDED
    progressed = row["last_sequence"] != row["attempt_sequence"]
    pending_wait = row["wait_outcome"] if row["wait_sequence"] == row["last_sequence"] else ""
    return Instance(
        namespace=row["namespace"],
        workflow_id=row["workflow_id"],
        instance_key=row["instance_key"],
        status=status,
        bound_version=row["bound_version"],
        version_label=row["version_label"],
        lease_owner=row["lease_owner"],
        lease_expires_at=d.time_or_none(row["lease_expires_at"]),
        wake_at=d.time_or_none(row["wake_at"]),
        last_sequence=row["last_sequence"],
        last_step=row["last_step"],
        checkpoint_count=row["checkpoint_count"],
        resume_count=row["resume_count"],
        error_message=row["error_message"],
        result_json=blob(row["result_json"]),
        created_by_execution_id=row["created_by_execution_id"],
        created_at=d.time(row["created_at"]),
        updated_at=d.time(row["updated_at"]),
        finished_at=d.time_or_none(row["finished_at"]),
        lease_seconds=row["lease_seconds"],
        awaited_event=row["awaited_event"],
        wake_reason=row["wake_reason"],
        wait_outcome=pending_wait,
        wait_event_id=row["wait_event_id"] if pending_wait == "event" else None,
        retry_policy=retry_policy_of(row),
        # Automatic resumes count only while the instance makes no progress.
        attempt=0 if progressed else row["attempt"],
        last_error=row["last_error"],
        suspended_at=suspended_at if status is InstanceStatus.SUSPENDED else None,
    )


def instance_cursor(d: Dialect, i: Instance) -> list[Any]:
    return [d.cursor_time(i.created_at), i.workflow_id, i.instance_key]


def event_of(d: Dialect, row: Row) -> InstanceEvent:
    return InstanceEvent(id=row["id"], kind=row["kind"], actor=row["actor"], detail=row["detail"],
                         created_at=d.time(row["created_at"]))


class InstanceStore:
    """Reads and writes instances over one backend's Runner; every method runs inside the caller's transaction."""

    # Whether start_new_txn does its work (one statement); else the services take the general path at once.
    one_statement_start: ClassVar[bool] = False
    # Whether finish_running_txn does its work (one statement); else the services take the locked path at once.
    one_statement_finish: ClassVar[bool] = False

    def __init__(self, runner: Runner) -> None:
        self.r = runner
        # Leases ended early: their session ended, or their process released them (stores/sessions.py).
        self._lease_ends = lease_end_sql(runner.dialect, "durable_instances", "running", "lease_owner")
        # A live lease renewed for its own length (its process says the execution runs: a long call).
        renewed_until = runner.dialect.later_sql.format(param="_").replace("%(_)s", "lease_seconds")
        self._renew_running = runner.dialect.sql(
            f"""UPDATE durable_instances SET lease_expires_at = {renewed_until}, updated_at = {runner.dialect.now_sql}
                WHERE status = 'running' AND lease_expires_at > {runner.dialect.now_sql} AND namespace = %(ns)s
                  AND {runner.dialect.in_list.format(column="lease_owner", param="owners")}
                RETURNING namespace""")
        d = runner.dialect
        now, key, cols = d.now_sql, INSTANCE_KEY, INSTANCE_COLUMNS
        self._create = d.sql(
            f"""INSERT INTO durable_instances
                    (namespace, workflow_id, instance_key, bound_version, version_label, lease_owner,
                     lease_expires_at, lease_seconds, created_by_execution_id, created_at, updated_at)
                VALUES (%(ns)s, %(wf)s, %(key)s, %(version)s, %(label)s, %(exec)s,
                        {d.later_sql.format(param="until")}, %(lease)s, %(exec)s, {now}, {now})
                ON CONFLICT DO NOTHING
                RETURNING {cols}""")
        self._get = {lock: d.sql(f"SELECT {cols} FROM durable_instances WHERE {key}{d.lock(lock)}")
                     for lock in (False, True)}
        self._lease_state = d.sql(
            f"""SELECT coalesce(lease_expires_at > {now}, false) AS lease_alive,
                       coalesce(wake_at > {now}, false) AS wake_pending
                FROM durable_instances WHERE {key}""")
        self._take_lease = d.sql(
            f"""UPDATE durable_instances
                SET lease_owner = %(owner)s, lease_expires_at = {d.later_sql.format(param="until")},
                    lease_seconds = %(lease)s, wake_at = NULL, resume_count = resume_count + %(inc)s,
                    updated_at = {now}
                WHERE {key}
                RETURNING {cols}""")
        self._ever_held = d.sql(
            f"""SELECT EXISTS (SELECT 1 FROM durable_instance_events
                               WHERE {key} AND kind IN ('started', 'resumed') AND actor = %(exec)s) AS held""")
        self._put_start_item = d.sql(
            f"""INSERT INTO durable_instance_start_items
                    (namespace, workflow_id, instance_key, encoding, item, size_bytes, created_at, from_signal)
                VALUES (%(ns)s, %(wf)s, %(key)s, %(enc)s, %(item)s, %(size)s, {now}, %(signal)s)""")
        self._start_item = d.sql(f"SELECT encoding, item, from_signal FROM durable_instance_start_items WHERE {key}")
        self._deliver_start_item = d.sql(
            f"""UPDATE durable_instance_start_items
                SET encoding = %(enc)s, item = %(item)s, size_bytes = %(size)s, from_signal = 0
                WHERE {key} AND from_signal = 1""")
        self._advance = d.sql(
            f"""UPDATE durable_instances
                SET last_sequence = %(seq)s, last_step = %(step)s, checkpoint_count = checkpoint_count + %(added)s,
                    lease_owner = %(owner)s, lease_expires_at = {d.later_sql.format(param="lease")},
                    updated_at = {now}
                WHERE {key}""")
        self._finish = d.sql(
            f"""UPDATE durable_instances
                SET status = %(status)s, error_message = %(error)s, result_json = %(result)s,
                    {FINISH_SET.format(now=now)}
                WHERE {key}
                RETURNING {cols}""")
        self._schedule_wake = d.sql(
            f"""UPDATE durable_instances
                SET wake_at = coalesce(%(at)s, {d.later_sql.format(param="delay")}),
                    lease_owner = '', lease_expires_at = NULL, updated_at = {now}
                WHERE {key}
                RETURNING {cols}""")
        self._resumable = d.sql(
            f"""SELECT workflow_id, instance_key, {RESUME_REASON}
                FROM durable_instances
                WHERE namespace = %(ns)s AND {RESUMABLE_WHERE.format(now=now)}
                  AND (%(any_wf)s OR {d.in_list.format(column="workflow_id", param="wfs")})
                ORDER BY coalesce(wake_at, lease_expires_at)
                LIMIT %(limit)s""")
        # The next wake-up still ahead among the instances a resume stream watches (the index on wake_at).
        self._next_wake = d.sql(
            f"""SELECT wake_at FROM durable_instances
                WHERE namespace = %(ns)s AND status = 'running' AND wake_at IS NOT NULL AND suspended_at IS NULL
                  AND wake_at > {now} AND (%(any_wf)s OR {d.in_list.format(column="workflow_id", param="wfs")})
                ORDER BY wake_at
                LIMIT 1""")
        self._lease_to = d.sql(
            f"""UPDATE durable_instances
                SET lease_owner = %(owner)s, lease_expires_at = {d.later_sql.format(param="lease")},
                    wake_at = NULL, updated_at = {now}
                WHERE {key}
                RETURNING {cols}""")
        self._existing = d.sql(
            "SELECT instance_key FROM durable_instances WHERE namespace = %(ns)s AND workflow_id = %(wf)s AND "
            + d.in_list.format(column="instance_key", param="keys"))
        self._rebind = d.sql(
            f"UPDATE durable_instances SET bound_version = %(to)s, updated_at = {now} "
            "WHERE namespace = %(ns)s AND workflow_id = %(wf)s AND "
            + d.in_list.format(column="instance_key", param="keys"))
        self._events = d.sql(
            f"""SELECT id, kind, actor, detail, created_at FROM durable_instance_events
                WHERE {key} AND id > %(after)s ORDER BY id LIMIT %(limit)s""")
        self._add_event = d.sql(
            f"""INSERT INTO durable_instance_events (namespace, workflow_id, instance_key, kind, actor, detail,
                                                     created_at)
                VALUES (%(ns)s, %(wf)s, %(key)s, %(kind)s, %(actor)s, %(detail)s, {now})""")

    def record(self, row: Row) -> Instance:
        return instance_of(self.r.dialect, row)

    async def _changed(self, conn: Conn, query: str, params: dict[str, Any]) -> Instance:
        """The (locked) instance a statement with RETURNING changed."""
        row = await self.r.one(conn, query, await self.r.with_now(conn, **params))
        assert row is not None, "caller locked the row"
        return self.record(row)

    async def create_txn(self, conn: Conn, ref: InstanceRef, *, execution_id: str, lease_seconds: int,
                         bound_version: int, version_label: str, hold_seconds: int = 0) -> Instance | None:
        """Inserts a new running instance leased to execution_id; None when the key exists.

        lease_seconds is the instance's lease length; this lease lasts it plus hold_seconds.
        """
        row = await self.r.one(conn, self._create, await self.r.with_now(
            conn, **instance_params(ref), version=bound_version, label=version_label, exec=execution_id,
            lease=lease_seconds, until=lease_seconds + hold_seconds))
        return self.record(row) if row else None

    async def start_new_txn(self, conn: Conn, ref: InstanceRef, *, execution_id: str, lease_seconds: int,
                            version_label: str, start_item: EncodedState | None,
                            start_item_bytes: int, claim: NewClaim | None = None,
                            hold_seconds: int = 0) -> StartedNew | None:
        """Creates the instance bound to its workflow's current version, with its start item and STARTED event,
        in one statement (run it with Database.single).

        With claim (a start's claim_on_start, validated), the same statement inserts that key in progress
        with attempt 1 when it does not exist (StartedNew.claimed); an existing key is left alone and
        claimed stays None: the caller claims it the usual way.

        None when the key exists, and from a backend without such a statement:
        the caller then takes the general path (create_txn and friends).
        """
        return None

    async def get_txn(self, conn: Conn, ref: InstanceRef, *, for_update: bool = False) -> Instance | None:
        """The instance; with for_update its row stays locked until the transaction ends."""
        row = await self.r.one(conn, self._get[for_update], instance_params(ref))
        return self.record(row) if row else None

    async def lease_state_txn(self, conn: Conn, ref: InstanceRef) -> tuple[bool, bool]:
        """(lease alive, wake-up in the future) judged by database time."""
        row = await self.r.one(conn, self._lease_state, await self.r.with_now(conn, **instance_params(ref)))
        if row is None:
            return False, False
        return bool(row["lease_alive"]), bool(row["wake_pending"])

    async def take_lease_txn(self, conn: Conn, ref: InstanceRef, *, owner: str, lease_seconds: int,
                             count_resume: bool, hold_seconds: int = 0) -> Instance:
        """Leases the (locked) instance to owner and clears any wake-up; lease_seconds becomes its lease length,
        and this lease lasts it plus hold_seconds."""
        return await self._changed(conn, self._take_lease, {
            **instance_params(ref), "owner": owner, "lease": lease_seconds, "until": lease_seconds + hold_seconds,
            "inc": 1 if count_resume else 0})

    async def ever_held_txn(self, conn: Conn, ref: InstanceRef, execution_id: str) -> bool:
        """Whether the execution ever held the instance's lease (it started or resumed the instance)."""
        row = await self.r.one(conn, self._ever_held, {**instance_params(ref), "exec": execution_id})
        return bool(row and row["held"])

    async def put_start_item_txn(self, conn: Conn, ref: InstanceRef, encoded: EncodedState, *,
                                 size_bytes: int, from_signal: bool = False) -> None:
        """Stores the start item of the instance just created: a delivery's (never changed), or one a
        signal-with-start wrote (from_signal), which the delivery replaces when it comes."""
        await self.r.execute(conn, self._put_start_item, await self.r.with_now(
            conn, **instance_params(ref), enc=encoded.encoding, item=encoded.data, size=size_bytes,
            signal=int(from_signal)))

    async def start_item_txn(self, conn: Conn, ref: InstanceRef) -> bytes | None:
        """The instance's start item, decoded; None when it has none."""
        found = await self.start_item_with_source_txn(conn, ref)
        return found[0] if found is not None else None

    async def start_item_with_source_txn(self, conn: Conn, ref: InstanceRef) -> tuple[bytes, bool] | None:
        """(the start item decoded, whether a signal-with-start wrote it); None when the instance has none."""
        row = await self.r.one(conn, self._start_item, instance_params(ref))
        return (decode_state(bytes(row["item"]), row["encoding"]), bool(row["from_signal"])) if row else None

    async def deliver_start_item_txn(self, conn: Conn, ref: InstanceRef, encoded: EncodedState, *,
                                     size_bytes: int) -> bool:
        """Replaces a start item a signal-with-start wrote with the delivery it stood in for; False when the
        instance's start item is a delivery's already."""
        return await self.r.execute(conn, self._deliver_start_item, {
            **instance_params(ref), "enc": encoded.encoding, "item": encoded.data, "size": size_bytes}) > 0

    async def lock_many_txn(self, conn: Conn, refs: list[InstanceRef]) -> dict[InstanceRef, Instance]:
        """The existing instances among refs (one namespace), locked until the transaction ends.

        Locks are taken in (workflow_id, instance_key) order, so concurrent
        batches over overlapping instances cannot deadlock each other.
        """
        out = {}
        for ref in sorted(set(refs), key=lambda r: (r.workflow_id, r.instance_key)):
            inst = await self.get_txn(conn, ref, for_update=True)
            if inst is not None:
                out[ref] = inst
        return out

    async def record_checkpoints_txn(self, conn: Conn, advances: list[CheckpointAdvance]) -> None:
        """Advances each (locked) instance to its newest sequence and renews the lease for the saving execution.

        The renewal lasts each advance's lease_seconds; the instance's recorded lease length is not changed.
        """
        if not advances:
            return
        common = await self.r.with_now(conn)
        await self.r.many(conn, self._advance, [
            {**common, **instance_params(a.ref), "seq": a.sequence, "step": a.step_name, "added": a.added,
             "owner": a.owner, "lease": a.lease_seconds} for a in advances])

    async def finish_txn(self, conn: Conn, ref: InstanceRef, *, status: InstanceStatus, error_message: str = "",
                         result_json: bytes | None = None) -> Instance:
        """Moves the (locked) instance to a final status, dropping its lease and wake-up."""
        return await self._changed(conn, self._finish, {
            **instance_params(ref), "status": status.value, "error": error_message, "result": result_json})

    async def finish_running_txn(self, conn: Conn, ref: InstanceRef, *, status: InstanceStatus, actor: str,
                                 error_message: str = "", result_json: bytes | None = None) -> Instance | None:
        """finish_txn and its event (kind = the status, detail = error_message) in one statement (Database.single),
        for an instance that is not final yet (running or suspended).

        None when there is no such instance, and from a backend without such a statement:
        the caller then takes the locked path, which says why.
        """
        return None

    async def schedule_wake_txn(self, conn: Conn, ref: InstanceRef, *, wake_at: datetime | None,
                                delay_seconds: int | None) -> Instance:
        """Parks the (locked) instance until wake_at (or now + delay): lease released."""
        return await self._changed(conn, self._schedule_wake, {
            **instance_params(ref), "at": self.r.at(wake_at), "delay": delay_seconds})

    async def claim_resumable_txn(self, conn: Conn, namespace: str, *, workflow_ids: list[str], limit: int,
                                  lease_seconds: int,
                                  token_prefix: str) -> list[tuple[Instance, ResumeReason, str]]:
        """Leases up to `limit` stalled and due instances, oldest first, to fresh claim tokens.

        Written for a transaction that has the database to itself (the embedded one); PostgreSQL's
        subclass skips the rows another transaction is claiming, so none is handed out twice.
        """
        d = self.r.dialect
        candidates = await self.r.all(conn, self._resumable, await self.r.with_now(
            conn, ns=namespace, any_wf=not workflow_ids, wfs=d.list_param(workflow_ids), limit=limit))
        out = []
        for c in candidates:
            ref = InstanceRef(namespace, c["workflow_id"], c["instance_key"])
            inst = await self._changed(conn, self._lease_to, {
                **instance_params(ref), "owner": token_prefix + secrets.token_hex(16), "lease": lease_seconds})
            out.append((inst, ResumeReason(c["reason"]), inst.lease_owner))
        return out

    async def next_wake_txn(self, conn: Conn, namespace: str, *, workflow_ids: list[str]) -> timedelta | None:
        """How long until the next wake-up still ahead among these workflows' running instances (None: none)."""
        d = self.r.dialect
        params = await self.r.with_now(conn, ns=namespace, any_wf=not workflow_ids, wfs=d.list_param(workflow_ids))
        row = await self.r.one(conn, self._next_wake, params)
        if row is None:
            return None
        wake_at = d.time_or_none(row["wake_at"])
        return None if wake_at is None else wake_at - await self.r.now(conn)

    async def list_txn(self, conn: Conn, namespace: str, flt: InstanceFilter,
                       page: Page) -> tuple[list[Instance], str]:
        """Newest first, keyset-paged; returns the rows and the next page token ('' at the end)."""
        d = self.r.dialect
        now = (await self.r.with_now(conn)).get("now")
        query, params = list_instances_query(d, namespace, flt, page, now=now)
        rows = await self.r.all(conn, query, params)
        if flt.sort_field:
            kept, token = cut_page(rows, page.size, sorted_cursor)
            return [self.record(r) for r in kept], token
        return cut_page([self.record(r) for r in rows], page.size, lambda i: instance_cursor(d, i))

    async def select_for_move_txn(self, conn: Conn, namespace: str, selector: MoveSelector, *,
                                  lock: bool) -> list[MoveCandidate]:
        """Instances matching every criterion of the selector, by key, with their last checkpoint's node.

        With lock, the rows stay locked (in key order, like batched checkpoint
        saves, so the two cannot deadlock) until the transaction ends.
        """
        d = self.r.dialect
        where = ["i.namespace = %(ns)s", "i.workflow_id = %(wf)s"]
        params: dict[str, Any] = {"ns": namespace, "wf": selector.workflow_id}
        if selector.instance_keys:
            where.append(d.in_list.format(column="i.instance_key", param="keys"))
            params["keys"] = d.list_param(list(selector.instance_keys))
        if selector.statuses:
            where.append(d.in_list.format(column="i.status", param="statuses"))
            params["statuses"] = d.list_param([s.value for s in selector.statuses])
        if selector.from_version:
            where.append("i.bound_version = %(from_v)s")
            params["from_v"] = selector.from_version
        rows = await self.r.all(conn, d.sql(  # fixed fragments only
            f"""SELECT i.instance_key, i.bound_version, i.last_step, coalesce(c.node_name, '') AS last_node
                FROM durable_instances i
                {d.newest_checkpoint_join}
                WHERE {" AND ".join(where)}
                ORDER BY i.instance_key{d.lock(lock, of="i")}"""), params)
        return [MoveCandidate(r["instance_key"], r["bound_version"], r["last_step"], r["last_node"]) for r in rows]

    async def existing_keys_txn(self, conn: Conn, namespace: str, workflow_id: str, keys: list[str]) -> set[str]:
        """Which of the keys exist in the workflow."""
        rows = await self.r.all(conn, self._existing, {"ns": namespace, "wf": workflow_id,
                                                       "keys": self.r.dialect.list_param(keys)})
        return {r["instance_key"] for r in rows}

    async def rebind_txn(self, conn: Conn, namespace: str, workflow_id: str, keys: list[str], *,
                         to_version: int) -> int:
        """Binds the (locked) instances to another version; returns how many rows changed."""
        return await self.r.execute(conn, self._rebind, await self.r.with_now(
            conn, ns=namespace, wf=workflow_id, keys=self.r.dialect.list_param(keys), to=to_version))

    async def update_txn(self, conn: Conn, ref: InstanceRef, *, now: datetime, **columns: Any) -> Instance:
        """Sets the given columns (of SETTABLE) of the (locked) instance, and updated_at to now; returns it."""
        unknown = set(columns) - SETTABLE
        if unknown:
            raise ValueError(f"not a settable instance column: {sorted(unknown)}")
        params: dict[str, Any] = {**instance_params(ref), "now": self.r.at(now)}
        sets = []
        for name, value in columns.items():
            sets.append(f"{name} = %(v_{name})s")
            params[f"v_{name}"] = self.r.at(value) if name in _TIMES else value
        row = await self.r.one(conn, self.r.dialect.sql(  # column names checked against SETTABLE
            f"""UPDATE durable_instances SET {", ".join(sets)}, updated_at = %(now)s
                WHERE {INSTANCE_KEY} RETURNING {INSTANCE_COLUMNS}"""), params)
        assert row is not None, "caller locked the row"
        return self.record(row)

    async def add_event_txn(self, conn: Conn, ref: InstanceRef, kind: str, *, actor: str = "",
                            detail: str = "") -> None:
        """Appends a lifecycle event to the instance's audit trail."""
        await self.r.execute(conn, self._add_event, await self.r.with_now(
            conn, **instance_params(ref), kind=kind, actor=actor, detail=detail))

    async def events_txn(self, conn: Conn, ref: InstanceRef, page: Page) -> tuple[list[InstanceEvent], str]:
        """The instance's audit trail, oldest first (the page token carries the last id)."""
        params: dict[str, Any] = {**instance_params(ref), "limit": page.size + 1, "after": 0}
        if page.token:
            (after,) = decode_cursor(page.token, 1)
            params["after"] = after if isinstance(after, int) else 0
        rows = await self.r.all(conn, self._events, params)
        return cut_page([event_of(self.r.dialect, r) for r in rows], page.size, lambda e: [e.id])

    async def count_txn(self, conn: Conn, namespace: str, flt: InstanceFilter) -> StatusCounts:
        """Instances matching the filter (its statuses and stalled_only ignored), by status."""
        now = (await self.r.with_now(conn)).get("now")
        query, params = count_instances_query(self.r.dialect, namespace, flt, now=now)
        return status_counts(await self.r.all(conn, query, params))

    async def end_leases_of_session_txn(self, conn: Conn, session_id: str) -> int:
        """The live leases owned by executions of this session lapse now (it ended); how many."""
        return len(await self.r.all(conn, self._lease_ends[0], await self.r.with_now(conn, id=session_id)))

    async def renew_leases_of_owners_txn(self, conn: Conn, namespace: str, owners: list[str]) -> int:
        """The live leases these owners hold are renewed for the instance's lease length (never a lapsed one)."""
        if not owners:
            return 0
        params = await self.r.with_now(conn, ns=namespace, owners=self.r.dialect.list_param(owners))
        return len(await self.r.all(conn, self._renew_running, params))

    async def end_leases_of_owners_txn(self, conn: Conn, namespace: str, owners: list[str]) -> int:
        """The live leases these owners hold lapse now (their process says their execution ended); how many."""
        if not owners:
            return 0
        params = await self.r.with_now(conn, ns=namespace, owners=self.r.dialect.list_param(owners))
        return len(await self.r.all(conn, self._lease_ends[1], params))
