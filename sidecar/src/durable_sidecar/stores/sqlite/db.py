"""The embedded database: one SQLite file owned by one sidecar process, one connection, one worker thread.

Every statement runs on a single dedicated thread (so the event loop never
blocks on disk), and transactions run one at a time (an asyncio.Lock, then
BEGIN IMMEDIATE), so a transaction sees and writes the whole file alone: what
PostgreSQL gets from row locks and SKIP LOCKED holds here by construction. The
file is in WAL mode with synchronous=FULL, so a committed (acknowledged) write
survives kill -9 and power loss. Database time is this process's clock, read
once per transaction like PostgreSQL's now().

One process owns the file: `open(owner=True)` takes an exclusive flock on
`<file>.lock` and a second sidecar on the same file fails at once. Operator
commands (the CLI) open it without owning it; SQLite's own file locking
serialises their short transactions with the sidecar's.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import random
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from ...errors import FailedPrecondition, InvalidArgument, Unavailable
from .. import core
from ..base import Conn, Database
from ..checkpoints import latest_checkpoint_query
from ..core import NO_INSTALLATION_ROW, SCHEMA_TOO_OLD, Dialect, Runner
from ..schema import APPLIED_SQL, Migration, load_migrations, require_current
from .migrate import apply

log = logging.getLogger(__name__)

T = TypeVar("T")
Params = Mapping[str, object]
Row = sqlite3.Row

# RETURNING (3.35) and STRICT tables (3.37).
MIN_SQLITE = (3, 37, 0)
# Worth retrying: another process (the CLI) holds the write lock longer than
# the busy timeout, or the disk is full for now.
_TRANSIENT = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_FULL})
# Set while the current task runs a transaction: one opened inside it would wait for itself.
_IN_TRANSACTION: contextvars.ContextVar[bool] = contextvars.ContextVar("durable_sqlite_in_transaction", default=False)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(value: datetime) -> int:
    """A datetime as stored: integer microseconds since the Unix epoch, UTC (naive means UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def _names(value: str) -> tuple[str, ...]:
    return tuple(json.loads(value))


def _micros_cursor(value: object) -> int:
    if not isinstance(value, int):
        raise InvalidArgument("page_token is not a token this server issued")
    return value


# Times are integer microseconds, name lists JSON arrays; transactions run one at a
# time, so a read needs no locking clause to keep its row; database time is the
# transaction's :now parameter (SqliteConn.now_us).
DIALECT = Dialect("sqlite", colon_placeholders=True, to_time=from_micros, to_names=_names, lock_clause="",
                  cursor_time=to_micros, cursor_time_in=_micros_cursor, cursor_time_cast="", time_param=to_micros,
                  prefix_condition="substr({column}, 1, length(%(prefix)s)) = %(prefix)s",
                  contains_condition="instr({column}, %(contains)s) > 0", now_sql="%(now)s",
                  ago_sql="(%(now)s - %(seconds)s * 1000000)", later_sql="(%(now)s + %({param})s * 1000000)",
                  greatest="max", list_param=json.dumps,
                  in_list="{column} IN (SELECT value FROM json_each(%({param})s))",
                  # SQLite's planner looks the checkpoint up by all four key columns from a plain join.
                  newest_checkpoint_join="""LEFT JOIN durable_checkpoints c
      ON c.namespace = i.namespace AND c.workflow_id = i.workflow_id AND c.instance_key = i.instance_key
     AND c.sequence = i.last_sequence""")
# The newest-checkpoint read as SQLite runs it (tests/sidecar/test_latest_read.py checks its plan).
LATEST = latest_checkpoint_query(DIALECT)


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (exc.sqlite_errorcode & 0xFF) in _TRANSIENT


class SqliteConn(Conn):
    """The open transaction; every statement hops to the database's worker thread."""

    __slots__ = ("_db", "_open", "now_us")

    def __init__(self, db: SqliteDatabase, now_us: int) -> None:
        self._db = db
        self._open = True
        self.now_us = now_us  # database time of this transaction

    @property
    def now(self) -> datetime:
        return from_micros(self.now_us)

    def after(self, seconds: float) -> int:
        """Database time `seconds` from now, as stored."""
        return self.now_us + int(seconds * 1_000_000)

    def _connection(self) -> sqlite3.Connection:
        if not self._open:
            raise RuntimeError("the transaction this handle belonged to has ended")
        return self._db.connection

    async def all(self, query: str, params: Params | None = None) -> list[Row]:
        def run() -> list[Row]:
            return self._connection().execute(query, params or {}).fetchall()

        return await self._db.call(run)

    async def one(self, query: str, params: Params | None = None) -> Row | None:
        rows = await self.all(query, params)
        return rows[0] if rows else None

    async def run(self, query: str, params: Params | None = None) -> int:
        """Executes a statement without result rows; returns how many rows it changed."""
        def run() -> int:
            return self._connection().execute(query, params or {}).rowcount

        return await self._db.call(run)

    async def run_many(self, query: str, params: Iterable[Params]) -> None:
        rows = list(params)

        def run() -> None:
            self._connection().executemany(query, rows)

        await self._db.call(run)

    def end(self) -> None:
        self._open = False


def lite(conn: Conn) -> SqliteConn:
    """The SQLite transaction behind a store call's handle."""
    if not isinstance(conn, SqliteConn):
        raise TypeError(f"a SQLite store was given a {type(conn).__name__}, not a SQLite transaction")
    return conn


def _take_file_lock(path: str) -> int:
    """An exclusive flock on `<path>.lock`, held as long as the returned descriptor stays open."""
    try:
        import fcntl
    except ImportError:
        raise FailedPrecondition("the embedded database needs a POSIX system (for its file lock): set "
                                 "DURABLE_DATABASE_URL to a PostgreSQL database") from None
    lock_path = path + ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise FailedPrecondition(
            f"the embedded database {path} is in use by another sidecar process"
            + (f" (pid {holder})" if holder.isdigit() else "")
            + f": one sidecar process owns the file (lock {lock_path}). Stop that process first, or set "
            "DURABLE_DATABASE_URL to a PostgreSQL database to run several sidecars"
        ) from None
    except OSError as exc:
        os.close(fd)
        raise FailedPrecondition(f"cannot lock the embedded database {path} ({lock_path}: {exc.strerror}); "
                                 "it must be on a local file system") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class SqliteRunner(Runner):
    """The shared SQL of the stores written once (stores/*.py), run on the embedded connection."""

    dialect = DIALECT

    async def all(self, conn: Conn, query: str, params: dict[str, Any], *, binary: bool = False) -> list[core.Row]:
        return list(await lite(conn).all(query, params))

    async def execute(self, conn: Conn, query: str, params: dict[str, Any]) -> int:
        return await lite(conn).run(query, params)

    async def many(self, conn: Conn, query: str, params: list[dict[str, Any]]) -> None:
        await lite(conn).run_many(query, params)

    async def now(self, conn: Conn) -> datetime:
        return lite(conn).now

    def at(self, value: datetime | None) -> Any:
        return None if value is None else to_micros(value)


RUNNER = SqliteRunner()


class SqliteDatabase(Database):
    """The sidecar's one connection to its SQLite file."""

    def __init__(self, path: str, *, owner: bool, create: bool, retry_attempts: int,
                 wait_timeout_seconds: float) -> None:
        self.path = path
        self.owner = owner
        self.create = create
        self.retry_attempts = retry_attempts
        self.wait_timeout_seconds = wait_timeout_seconds
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._turn = asyncio.Lock()
        self._waiting = 0

    @property
    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the embedded database is not open")
        return self._conn

    async def call(self, fn: Callable[[], T]) -> T:
        """Runs fn on the worker thread, after everything submitted before it."""
        if self._executor is None:
            raise RuntimeError("the embedded database is not open")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def open(self) -> None:
        if self._executor is not None:
            return
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise FailedPrecondition(
                f"the embedded database needs SQLite {'.'.join(map(str, MIN_SQLITE))} or newer; this Python has "
                f"{sqlite3.sqlite_version}: use a newer Python, or set DURABLE_DATABASE_URL to PostgreSQL")
        if not self.create and not os.path.exists(self.path):
            raise FailedPrecondition(f"there is no embedded database at {self.path}: start the sidecar "
                                     "(durable-sidecar serve) or run durable-sidecar migrate first")
        folder = os.path.dirname(self.path)
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise FailedPrecondition(f"cannot create the data folder {folder}: {exc.strerror}") from None
        if self.owner:
            self._lock_fd = _take_file_lock(self.path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="durable-sqlite")
        try:
            self._conn = await self.call(self._connect)
        except BaseException:
            await self._release()
            raise
        log.info("embedded database open: %s", self.path, extra={"path": self.path, "owner": self.owner})

    def _connect(self) -> sqlite3.Connection:
        try:
            # isolation_level=None: no implicit transactions; every one is an explicit BEGIN IMMEDIATE.
            conn = sqlite3.connect(self.path, timeout=self.wait_timeout_seconds, isolation_level=None)
        except sqlite3.Error as exc:
            raise FailedPrecondition(f"cannot open the embedded database {self.path}: {exc}") from None
        try:
            conn.row_factory = sqlite3.Row
            mode = _journal_mode_wal(conn, self.wait_timeout_seconds)
            if mode is None or str(mode[0]).lower() != "wal":
                raise FailedPrecondition(f"the embedded database {self.path} cannot use WAL journaling "
                                         f"(journal_mode is {mode[0] if mode else 'unknown'})")
            # FULL: the WAL is synced at every commit, so an acknowledged write survives a power cut too.
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            conn.close()
            raise FailedPrecondition(f"cannot use the embedded database {self.path}: {exc}") from None
        except BaseException:
            conn.close()
            raise
        return conn

    async def migrate(self, migrations: list[Migration] | None = None) -> list[str]:
        """Applies pending migrations (under the file's write lock); returns the names applied."""
        todo = load_migrations("sqlite") if migrations is None else migrations
        async with self._turn:
            return await self.call(lambda: apply(self.connection, todo))

    async def close(self) -> None:
        if self._executor is None:
            return
        try:
            # Let a transaction in flight finish (or roll back) first.
            await asyncio.wait_for(self._turn.acquire(), timeout=max(1.0, self.wait_timeout_seconds))
            self._turn.release()
        except TimeoutError:
            log.warning("closing the embedded database while a transaction is still running")
        await self._release()
        log.info("embedded database closed: %s", self.path, extra={"path": self.path})

    async def _release(self) -> None:
        executor, self._executor = self._executor, None
        conn, self._conn = self._conn, None
        if executor is not None:
            if conn is not None:
                await asyncio.get_running_loop().run_in_executor(executor, conn.close)
            executor.shutdown(wait=False)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    async def ping(self) -> bool:
        try:
            def probe() -> None:
                self.connection.execute("SELECT 1").fetchall()

            await asyncio.wait_for(self.call(probe), timeout=2.0)
            return True
        except Exception:  # noqa: BLE001 - readiness only reports
            return False

    def pool_stats(self) -> dict[str, int]:
        return {"pool_size": 1 if self._conn is not None else 0,
                "pool_available": 0 if self._turn.locked() or self._conn is None else 1,
                "requests_waiting": self._waiting}

    async def installation_id(self) -> str:
        async def read(conn: Conn) -> str:
            try:
                row = await lite(conn).one("SELECT id FROM durable_installation")
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    raise
                raise FailedPrecondition(SCHEMA_TOO_OLD) from None
            if row is None:
                raise FailedPrecondition(NO_INSTALLATION_ROW)
            applied = await lite(conn).all(APPLIED_SQL)
            require_current("sqlite", {r["version"]: (r["name"], r["checksum"]) for r in applied}, SCHEMA_TOO_OLD)
            return str(row["id"])

        return await self.transaction(read)

    def _begin(self) -> int:
        conn = self.connection
        if conn.in_transaction:
            # Left open by a caller cancelled between statements: its work is discarded.
            conn.execute("ROLLBACK")
        conn.execute("BEGIN IMMEDIATE")
        return time.time_ns() // 1000

    def _commit(self) -> None:
        self.connection.execute("COMMIT")

    def _rollback(self) -> None:
        conn = self._conn
        if conn is not None and conn.in_transaction:
            conn.execute("ROLLBACK")

    async def transaction(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._once(fn)
            except sqlite3.Error as exc:
                if not is_transient(exc):
                    raise
                if attempt >= self.retry_attempts:
                    log.error("transient database error, giving up", extra={"attempt": attempt, "error": str(exc)})
                    raise Unavailable("the database is unavailable; retry later") from exc
                delay = min(2.0, 0.05 * 2 ** (attempt - 1)) * (0.5 + random.random())
                log.warning("transient database error, retrying",
                            extra={"attempt": attempt, "delay_s": round(delay, 3), "error": str(exc)})
                await asyncio.sleep(delay)

    async def _once(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        if _IN_TRANSACTION.get():
            raise RuntimeError("a transaction was opened inside another on the embedded database, which runs one at "
                               "a time: pass the open Conn to the *_txn store methods instead")
        self._waiting += 1
        try:
            await asyncio.wait_for(self._turn.acquire(), timeout=self.wait_timeout_seconds)
        except TimeoutError:
            log.warning("no turn at the embedded database within the timeout")
            raise Unavailable("the database is unavailable or overloaded (no turn at the embedded database "
                              "within the timeout); retry later") from None
        finally:
            self._waiting -= 1
        try:
            conn = SqliteConn(self, await self.call(self._begin))
            inside = _IN_TRANSACTION.set(True)
            try:
                result = await fn(conn)
                await self.call(self._commit)
            except BaseException:
                conn.end()
                # Shielded: a second cancellation must not skip it (and the worker
                # thread runs it before any later BEGIN in any case).
                await asyncio.shield(self.call(self._rollback))
                raise
            finally:
                _IN_TRANSACTION.reset(inside)
                conn.end()
            return result
        finally:
            self._turn.release()


def _journal_mode_wal(conn: sqlite3.Connection, wait_seconds: float) -> Any:
    """PRAGMA journal_mode = WAL, waiting out another connection that holds the file's lock.

    The first switch of a new file to WAL needs an exclusive lock and SQLite's busy timeout does
    not cover it: several processes opening one new file at once got "database is locked".
    """
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)
