"""The dialect-neutral store core: the Dialect, the Runner, and what several stores share.

Each backend gives a `Dialect` (placeholders, how it stores times and name
lists, its row-locking clause, database time in SQL) and a `Runner` (how a
statement runs on its connection, in its db.py); each store (instances.py,
checkpoints.py, idempotency.py, versions.py, waits.py) is one class over a
Runner, with its own column lists and row mappers. SQL is written with
psycopg's `%(name)s` placeholders; `Dialect.sql` turns it into the backend's
form once, when a store is built.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ..domain import InstanceRef
from .base import Conn
from .paging import decode_cursor

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
    # SQL for "{column} contains the %(contains)s parameter" (case sensitive).
    contains_condition: str
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

    def lock(self, for_update: bool, *, of: str = "", share: bool = False) -> str:
        """The locking clause, of the table alias `of` only when given (a lock must skip an outer join's side);
        `share`: a shared lock (FOR SHARE), which blocks an UPDATE of the row but not another reader's lock."""
        if not for_update or not self.lock_clause:
            return ""
        clause = " FOR SHARE" if share else self.lock_clause
        return f"{clause} OF {of}" if of else clause


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


def time_cursor(d: Dialect, token: str) -> tuple[Any, Any, Any]:
    """A newest-first cursor (created_at, then two key columns) read back from a page token."""
    created, first, second = decode_cursor(token, 3)
    return d.cursor_time_in(created), first, second


def blob(value: Any) -> bytes | None:
    return bytes(value) if value is not None else None


def one_namespace(refs: list[InstanceRef]) -> str:
    """The namespace of a batch; every RPC works in exactly one (its token's)."""
    namespaces = {r.namespace for r in refs}
    if len(namespaces) != 1:
        raise ValueError(f"a batch spans {len(namespaces)} namespaces; each call has exactly one")
    return namespaces.pop()


# --- an instance's row, as the instance, checkpoint and wait stores find it ----------------------------------

INSTANCE_COLUMNS = """namespace, workflow_id, instance_key, status, bound_version, version_label, lease_owner,
    lease_expires_at, wake_at, last_sequence, last_step, checkpoint_count, resume_count, error_message,
    result_json, created_by_execution_id, created_at, updated_at, finished_at, lease_seconds, awaited_event,
    wake_reason, wait_outcome, wait_sequence, wait_event_id, retry_max_resumes, retry_initial_ms, retry_max_ms,
    retry_multiplier, retry_jitter, attempt, attempt_sequence, last_error, suspended_at"""
INSTANCE_KEY = "namespace = %(ns)s AND workflow_id = %(wf)s AND instance_key = %(key)s"


def instance_params(ref: InstanceRef) -> dict[str, Any]:
    return {"ns": ref.namespace, "wf": ref.workflow_id, "key": ref.instance_key}


# --- leases ended early (a session ended, or its process released them) -----------------------------------

def lease_end_sql(d: Dialect, table: str, status: str, owner_column: str) -> tuple[str, str]:
    """(by session, by owners): the live leases of `table` whose owner ran in session %(id)s, or is one of the
    %(owners)s list in namespace %(ns)s, lapse now. Each returns a row per lease ended."""
    now = d.now_sql
    head = (f"UPDATE {table} SET lease_expires_at = {now}, updated_at = {now} "
            f"WHERE status = '{status}' AND lease_expires_at > {now} AND ")
    by_session = (f"(namespace, {owner_column}) IN (SELECT namespace, owner FROM durable_session_owners "
                  "WHERE session_id = %(id)s)")
    by_owners = f"namespace = %(ns)s AND {d.in_list.format(column=owner_column, param='owners')}"
    return (d.sql(f"{head}{by_session} RETURNING namespace"), d.sql(f"{head}{by_owners} RETURNING namespace"))
