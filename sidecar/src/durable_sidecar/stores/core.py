"""The dialect-neutral store core: column lists, key conditions, parameters and row mappers, written once.

Each backend gives a `Dialect` (placeholders, how it stores times and name
lists, its row-locking clause) and keeps only the SQL that really differs.
SQL here is written with psycopg's `%(name)s` placeholders; `Dialect.sql`
turns it into the backend's form once, at import.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ..domain import (
    ChangeKind,
    ChangeLogEntry,
    Checkpoint,
    IdempotencyKey,
    Instance,
    InstanceEvent,
    InstanceFilter,
    InstanceRef,
    InstanceStatus,
    KeyRef,
    KeyStatus,
    NewClaim,
    Page,
    RetryPolicy,
    StatusCounts,
    Version,
)
from .base import Conn
from .paging import decode_cursor
from .states import decode_state

SCHEMA_TOO_OLD = ("the database schema is older than this sidecar: run `durable-sidecar migrate` "
                  "(or start with DURABLE_AUTO_MIGRATE=true)")
NO_INSTALLATION_ROW = "durable_installation has no row: the database was changed by hand"


class Row(Protocol):
    """A result row by column name: psycopg's dict row and sqlite3.Row both are."""

    def __getitem__(self, key: str, /) -> Any: ...

    def keys(self) -> Any: ...


_NAMED = re.compile(r"%\((\w+)\)s")


@dataclass(frozen=True)
class Dialect:
    """What differs between the backends below the SQL text itself."""

    name: str
    # Named placeholders: PostgreSQL (psycopg) keeps %(name)s, SQLite wants :name.
    colon_placeholders: bool
    # A stored time as a datetime (timestamptz arrives as one; SQLite stores integer microseconds).
    to_time: Callable[[Any], datetime]
    # A stored list of names (text[] on PostgreSQL, a JSON array on SQLite).
    to_names: Callable[[Any], tuple[str, ...]]
    # The clause that keeps a read row locked to the end of the transaction ('' where transactions run alone).
    lock_clause: str
    # A time as a page cursor holds it, and that cursor's value checked back into a query parameter.
    cursor_time: Callable[[datetime], Any]
    cursor_time_in: Callable[[Any], Any]
    # The cast that turns a page cursor's time parameter back into a stored time in SQL ('' where none is needed).
    cursor_time_cast: str
    # A time as a query parameter (a datetime for timestamptz, integer microseconds on SQLite).
    time_param: Callable[[datetime], Any]
    # SQL for "{column} starts with the %(prefix)s parameter".
    prefix_condition: str
    # The transaction's database time in SQL: now() on PostgreSQL, the %(now)s parameter on SQLite.
    now_sql: str
    # SQL for "database time %(seconds)s seconds ago", and for "%({param})s seconds from now".
    ago_sql: str
    later_sql: str
    # The SQL function that gives the larger of two values (greatest on PostgreSQL, max on SQLite).
    greatest: str
    # A list of names or integers as one query parameter (an array on PostgreSQL, a JSON array on SQLite).
    list_param: Callable[[list[Any]], Any]
    # SQL for "{column} is one of the %({param})s list parameter".
    in_list: str
    # The join of an instance `i`'s newest checkpoint as `c`, by all four key columns (see latest_checkpoint_query).
    newest_checkpoint_join: str

    def sql(self, text: str) -> str:
        return _NAMED.sub(r":\1", text) if self.colon_placeholders else text

    def time(self, value: Any) -> datetime:
        return self.to_time(value)

    def time_or_none(self, value: Any) -> datetime | None:
        return None if value is None else self.to_time(value)

    def lock(self, for_update: bool, *, of: str = "") -> str:
        """The locking clause, of the table alias `of` only when given (a lock must skip an outer join's side)."""
        if not for_update or not self.lock_clause:
            return ""
        return f"{self.lock_clause} OF {of}" if of else self.lock_clause


class Runner(ABC):
    """How one backend executes the shared SQL of the stores written once (instances.py, checkpoints.py, …)."""

    dialect: Dialect

    @abstractmethod
    async def all(self, conn: Conn, query: str, params: dict[str, Any], *, binary: bool = False) -> list[Row]:
        """Rows of one statement (query already in the backend's placeholder form).

        binary: the backend may send the rows in its binary format (PostgreSQL: a bytea at its size, not in hex).
        """

    @abstractmethod
    async def execute(self, conn: Conn, query: str, params: dict[str, Any]) -> int:
        """One statement without result rows; how many rows it changed."""

    @abstractmethod
    async def now(self, conn: Conn) -> datetime:
        """The transaction's database time."""

    @abstractmethod
    def at(self, value: datetime | None) -> Any:
        """A time as a query parameter."""

    @abstractmethod
    async def many(self, conn: Conn, query: str, params: list[dict[str, Any]]) -> None:
        """One statement without result rows, once per parameter set."""

    async def with_now(self, conn: Conn, **params: Any) -> dict[str, Any]:
        """The parameters, with the transaction's database time where the dialect's SQL names it (%(now)s)."""
        if "%(now)s" in self.dialect.now_sql:
            params["now"] = self.at(await self.now(conn))
        return params

    async def one(self, conn: Conn, query: str, params: dict[str, Any], *, binary: bool = False) -> Row | None:
        rows = await self.all(conn, query, params, binary=binary)
        return rows[0] if rows else None


def optional(row: Row, column: str) -> Any:
    """A column the query may not have selected (None then)."""
    return row[column] if column in row.keys() else None


def blob(value: Any) -> bytes | None:
    return bytes(value) if value is not None else None


def one_namespace(refs: list[InstanceRef]) -> str:
    """The namespace of a batch; every RPC works in exactly one (its token's)."""
    namespaces = {r.namespace for r in refs}
    if len(namespaces) != 1:
        raise ValueError(f"a batch spans {len(namespaces)} namespaces; each call has exactly one")
    return namespaces.pop()


# --- instances ------------------------------------------------------------------------------------------

INSTANCE_COLUMNS = """namespace, workflow_id, instance_key, status, bound_version, version_label, lease_owner,
    lease_expires_at, wake_at, last_sequence, last_step, checkpoint_count, resume_count, error_message,
    result_json, created_by_execution_id, created_at, updated_at, finished_at, lease_seconds, awaited_event,
    wake_reason, wait_outcome, wait_sequence, wait_event_id, retry_max_resumes, retry_initial_ms, retry_max_ms,
    retry_multiplier, retry_jitter, attempt, attempt_sequence, last_error, suspended_at"""
INSTANCE_KEY = "namespace = %(ns)s AND workflow_id = %(wf)s AND instance_key = %(key)s"


# The status an instance is reported with: a suspended one is stored as 'running' with suspended_at (0008).
STATUS_EXPR = "CASE WHEN status = 'running' AND suspended_at IS NOT NULL THEN 'suspended' ELSE status END"
# Stalled: running, not suspended, not waiting for an event, no wake-up, its lease lapsed before {now}.
STALLED_WHERE = ("status = 'running' AND suspended_at IS NULL AND awaited_event = '' AND wake_at IS NULL "
                 "AND lease_expires_at < {now}")


def status_condition(statuses: tuple[InstanceStatus, ...]) -> str:
    """SQL for 'the reported status is one of these' (fixed literals only: the enum's own values)."""
    parts = []
    for s in statuses:
        if s is InstanceStatus.SUSPENDED:
            parts.append("(status = 'running' AND suspended_at IS NOT NULL)")
        elif s is InstanceStatus.RUNNING:
            parts.append("(status = 'running' AND suspended_at IS NULL)")
        else:
            parts.append(f"status = '{s.value}'")
    return "(" + " OR ".join(parts) + ")"


def instance_filter(d: Dialect, namespace: str, flt: InstanceFilter, now: Any) -> tuple[list[str], dict[str, Any]]:
    """The conditions ListInstances and CountInstances share (all but statuses and stalled_only) and their
    parameters; `now` is the %(now)s parameter where the dialect's now_sql names one (None otherwise)."""
    where = ["namespace = %(ns)s"]
    params: dict[str, Any] = {"ns": namespace}
    if now is not None:
        params["now"] = now
    if flt.workflow_id:
        where.append("workflow_id = %(wf)s")
        params["wf"] = flt.workflow_id
    if flt.bound_version:
        where.append("bound_version = %(bv)s")
        params["bv"] = flt.bound_version
    if flt.key_prefix:
        where.append(d.prefix_condition.format(column="instance_key"))
        params["prefix"] = flt.key_prefix
    if flt.last_step:
        where.append("last_step = %(step)s")
        params["step"] = flt.last_step
    if flt.created_after is not None:
        where.append("created_at >= %(after)s")
        params["after"] = d.time_param(flt.created_after)
    if flt.created_before is not None:
        where.append("created_at < %(before)s")
        params["before"] = d.time_param(flt.created_before)
    return where, params


def list_instances_query(d: Dialect, namespace: str, flt: InstanceFilter, page: Page, *,
                         now: Any) -> tuple[str, dict[str, Any]]:
    """ListInstances' statement in the backend's form and its parameters: newest first, one row more than the
    page (for cut_page), after the page token's (created_at, workflow_id, instance_key)."""
    where, params = instance_filter(d, namespace, flt, now)
    params["limit"] = page.size + 1
    if flt.statuses:
        where.append(status_condition(flt.statuses))  # enum literals only
    if flt.stalled_only:
        where.append(STALLED_WHERE.format(now=d.now_sql))  # fixed text
    if page.token:
        created, wf, key = time_cursor(d, page.token)
        where.append(f"(created_at, workflow_id, instance_key) < (%(c_at)s{d.cursor_time_cast}, %(c_wf)s, %(c_key)s)")
        params.update({"c_at": created, "c_wf": wf, "c_key": key})
    text = (f"SELECT {INSTANCE_COLUMNS} FROM durable_instances WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, workflow_id DESC, instance_key DESC LIMIT %(limit)s")
    return d.sql(text), params


def count_instances_query(d: Dialect, namespace: str, flt: InstanceFilter, *,
                          now: Any) -> tuple[str, dict[str, Any]]:
    """CountInstances' statement in the backend's form and its parameters: rows of (status, n, stalled) for
    status_counts (statuses and stalled_only do not narrow a count)."""
    where, params = instance_filter(d, namespace, flt, now)
    text = (f"SELECT {STATUS_EXPR} AS status, count(*) AS n, "
            f"count(*) FILTER (WHERE {STALLED_WHERE.format(now=d.now_sql)}) AS stalled "
            f"FROM durable_instances WHERE {' AND '.join(where)} GROUP BY 1")
    return d.sql(text), params


def instance_params(ref: InstanceRef) -> dict[str, Any]:
    return {"ns": ref.namespace, "wf": ref.workflow_id, "key": ref.instance_key}


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


def time_cursor(d: Dialect, token: str) -> tuple[Any, Any, Any]:
    """A newest-first cursor (created_at, then two key columns) read back from a page token."""
    created, first, second = decode_cursor(token, 3)
    return d.cursor_time_in(created), first, second


# --- checkpoints ----------------------------------------------------------------------------------------

CHECKPOINT_META = ("workflow_id, instance_key, sequence, step_name, sha256, size_bytes, stored_bytes, execution_id, "
                   "node_name, created_at")
CHECKPOINT_WITH_STATE = CHECKPOINT_META + ", encoding, state"


def checkpoint_columns(with_state: bool) -> str:
    return CHECKPOINT_WITH_STATE if with_state else CHECKPOINT_META


# The newest checkpoint of an instance in one statement: the instance's row tells
# "no such instance" from "no checkpoint yet"; the state comes along only when it is
# smaller than %(state_below)s (larger ones are read from the cache first).
def latest_checkpoint_query(d: Dialect) -> str:
    """The newest-checkpoint read in the backend's form, around its Dialect.newest_checkpoint_join.

    The join must find the row by all four primary-key columns, the instance's last_sequence included:
    a plan that reads the instance's checkpoints by (namespace, workflow_id, instance_key) and filters
    on the sequence afterwards costs time in proportion to the instance's checkpoints.
    """
    columns = ", ".join(f"c.{c.strip()}" for c in CHECKPOINT_META.split(","))
    return d.sql(f"""SELECT {columns},
           c.encoding, CASE WHEN c.size_bytes < %(state_below)s THEN c.state END AS state
    FROM durable_instances i
    {d.newest_checkpoint_join}
    WHERE i.namespace = %(ns)s AND i.workflow_id = %(wf)s AND i.instance_key = %(key)s""")


def latest_of(d: Dialect, row: Row | None) -> tuple[bool, Checkpoint | None]:
    """(the instance exists, its newest checkpoint) from a latest_checkpoint_query row."""
    if row is None:
        return False, None
    if row["sequence"] is None:
        return True, None
    return True, checkpoint_of(d, row, with_state=True)


def checkpoint_of(d: Dialect, row: Row, *, with_state: bool) -> Checkpoint:
    state = None
    if with_state and row["state"] is not None:
        state = decode_state(bytes(row["state"]), row["encoding"])
    return Checkpoint(
        workflow_id=row["workflow_id"],
        instance_key=row["instance_key"],
        sequence=row["sequence"],
        step_name=row["step_name"],
        sha256=row["sha256"],
        size_bytes=row["size_bytes"],
        stored_bytes=row["stored_bytes"],
        execution_id=row["execution_id"],
        node_name=row["node_name"],
        created_at=d.time(row["created_at"]),
        state=state,
    )


# --- idempotency keys -----------------------------------------------------------------------------------

KEY_COLUMNS = """namespace, scope, key, status, fingerprint, attempt, holder, lease_expires_at, result_json,
    error_message, expires_at, created_at, updated_at"""
KEY_WHERE = "namespace = %(ns)s AND scope = %(scope)s AND key = %(key)s"


def key_params(ref: KeyRef) -> dict[str, Any]:
    return {"ns": ref.namespace, "scope": ref.scope, "key": ref.key}


def claim_params(claim: NewClaim) -> dict[str, Any]:
    return {**key_params(claim.ref), "fp": claim.fingerprint, "holder": claim.holder, "lease": claim.lease_seconds,
            "ttl": claim.ttl_seconds}


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


def key_of(d: Dialect, row: Row) -> IdempotencyKey:
    return IdempotencyKey(
        namespace=row["namespace"],
        scope=row["scope"],
        key=row["key"],
        status=KeyStatus(row["status"]),
        fingerprint=row["fingerprint"],
        attempt=row["attempt"],
        holder=row["holder"],
        lease_expires_at=d.time_or_none(row["lease_expires_at"]),
        result_json=blob(row["result_json"]),
        error_message=row["error_message"],
        expires_at=d.time(row["expires_at"]),
        created_at=d.time(row["created_at"]),
        updated_at=d.time(row["updated_at"]),
    )


def key_cursor(d: Dialect, k: IdempotencyKey) -> list[Any]:
    return [d.cursor_time(k.created_at), k.scope, k.key]


# --- versions and the change log ------------------------------------------------------------------------

VERSION_META = """namespace, workflow_id, version, content_hash, n8n_version_id, label, note, node_names, created_by,
    created_at"""
WORKFLOW_WHERE = "namespace = %(ns)s AND workflow_id = %(wf)s"
CHANGE_COLUMNS = "id, kind, workflow_id, instance_key, from_version, to_version, actor, reason, created_at"


def workflow_params(namespace: str, workflow_id: str) -> dict[str, Any]:
    return {"ns": namespace, "wf": workflow_id}


def version_of(d: Dialect, row: Row) -> Version:
    return Version(
        namespace=row["namespace"],
        workflow_id=row["workflow_id"],
        version=row["version"],
        content_hash=row["content_hash"],
        n8n_version_id=row["n8n_version_id"],
        label=row["label"],
        note=row["note"],
        node_names=d.to_names(row["node_names"]),
        created_by=row["created_by"],
        created_at=d.time(row["created_at"]),
        definition_json=blob(optional(row, "definition_json")),
    )


def change_of(d: Dialect, row: Row) -> ChangeLogEntry:
    return ChangeLogEntry(
        id=row["id"],
        kind=ChangeKind(row["kind"]),
        workflow_id=row["workflow_id"],
        instance_key=row["instance_key"],
        from_version=row["from_version"],
        to_version=row["to_version"],
        actor=row["actor"],
        reason=row["reason"],
        created_at=d.time(row["created_at"]),
    )


def event_of(d: Dialect, row: Row) -> InstanceEvent:
    return InstanceEvent(id=row["id"], kind=row["kind"], actor=row["actor"], detail=row["detail"],
                         created_at=d.time(row["created_at"]))


def status_counts(rows: list[Any]) -> StatusCounts:
    """Rows of (status, n, stalled), one per status present, as counts of every status."""
    by_status = dict.fromkeys(InstanceStatus, 0)
    stalled = 0
    for r in rows:
        by_status[InstanceStatus(r["status"])] = int(r["n"])
        stalled += int(r["stalled"] or 0)
    return StatusCounts(by_status, stalled)


def before_page(page: Page, column: str) -> tuple[str, dict[str, Any]]:
    """A newest-first page by an integer column: its condition (' AND column < …', '' on the first page) and
    parameters (the limit asks one row more, for cut_page)."""
    params: dict[str, Any] = {"limit": page.size + 1}
    if not page.token:
        return "", params
    (before,) = decode_cursor(page.token, 1)
    params["before"] = before if isinstance(before, int) else 0
    return f" AND {column} < %(before)s", params


def params(base: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {**base, **extra}
