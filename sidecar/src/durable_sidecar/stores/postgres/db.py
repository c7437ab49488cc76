"""PostgreSQL access: the connection pool and transactions with transient-error retry."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import psycopg.sql
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...errors import FailedPrecondition, Unavailable
from ..base import MAINTENANCE_INTERVAL_SECONDS, Conn, Database
from ..checkpoints import latest_checkpoint_query
from ..core import NO_INSTALLATION_ROW, SCHEMA_TOO_OLD, Dialect, Row, Runner
from ..schema import APPLIED_SQL, require_current

log = logging.getLogger(__name__)

# The durable_* tables due by autovacuum's default thresholds (autovacuum_*_threshold 50, scale factors
# 0.1 for analyse and 0.2 for vacuum), only while autovacuum is off.
_DUE_SQL = r"""SELECT relname, n_dead_tup > 50 + 0.2 * n_live_tup AS vacuum
    FROM pg_stat_user_tables
    WHERE current_setting('autovacuum') = 'off' AND schemaname = current_schema() AND relname LIKE 'durable\_%'
      AND (n_mod_since_analyze > 50 + 0.1 * n_live_tup OR n_dead_tup > 50 + 0.2 * n_live_tup)
    ORDER BY relname"""

T = TypeVar("T")
Connection = psycopg.AsyncConnection[DictRow]


class PgConn(Conn):
    """A pooled connection inside an open transaction."""

    __slots__ = ("connection",)

    def __init__(self, connection: Connection) -> None:
        self.connection = connection


def _same(value: Any) -> Any:
    return value


def _names(value: Any) -> tuple[str, ...]:
    return tuple(value)


def _iso(value: datetime) -> str:
    return value.isoformat()


# LATERAL with LIMIT (which keeps PostgreSQL from flattening the subquery back into a plain join): the
# checkpoint is looked up by all four key columns, the instance's last_sequence included. From a plain
# join the planner may read every checkpoint of the instance and filter on the sequence (it did so on
# tables without statistics: 4.3 ms at 6,000 checkpoints against 0.02 ms; the soak's p99 climbed with it).
_NEWEST_CHECKPOINT_JOIN = """LEFT JOIN LATERAL (
        SELECT * FROM durable_checkpoints c
        WHERE c.namespace = i.namespace AND c.workflow_id = i.workflow_id AND c.instance_key = i.instance_key
          AND c.sequence = i.last_sequence
        LIMIT 1) c ON true"""

# timestamptz arrives as datetime and text[] as a list; SELECT … FOR UPDATE locks rows; a cursor's
# time is ISO text, cast back; now() is the transaction's time.
DIALECT = Dialect("postgres", colon_placeholders=False, to_time=_same, to_names=_names, lock_clause=" FOR UPDATE",
                  cursor_time=_iso, cursor_time_in=_same, cursor_time_cast="::timestamptz", time_param=_same,
                  prefix_condition="starts_with({column}, %(prefix)s)",
                  contains_condition="strpos({column}, %(contains)s) > 0", now_sql="now()",
                  ago_sql="now() - make_interval(secs => %(seconds)s)",
                  later_sql="now() + make_interval(secs => %({param})s)", greatest="greatest", list_param=list,
                  in_list="{column} = ANY(%({param})s)", newest_checkpoint_join=_NEWEST_CHECKPOINT_JOIN)
# The newest-checkpoint read as PostgreSQL runs it (tests/sidecar/test_latest_read.py checks its plan).
LATEST = latest_checkpoint_query(DIALECT)


def pg(conn: Conn) -> Connection:
    """The psycopg connection behind a store call's transaction handle."""
    if not isinstance(conn, PgConn):
        raise TypeError(f"a PostgreSQL store was given a {type(conn).__name__}, not a PostgreSQL transaction")
    return conn.connection


async def database_now(conn: Conn) -> datetime:
    """The transaction's database time: the same now() every statement of it uses."""
    cur = await pg(conn).execute("SELECT now() AS now")
    row = await cur.fetchone()
    assert row is not None
    now: datetime = row["now"]
    return now

# SQLSTATE classes and codes worth retrying: connection exceptions, serialization
# failures, deadlocks, insufficient resources, operator intervention, and a write
# refused by a read-only server (a primary demoted under an HA manager).
_TRANSIENT_CLASSES = ("08", "53", "57")
_READ_ONLY = "25006"
_TRANSIENT_CODES = ("40001", "40P01", _READ_ONLY)


# psycopg_pool retries a failed reconnect with exponential backoff (1 s, 2 s, 4 s,
# ...) for up to `reconnect_timeout` (5 minutes by default), so after a long
# outage the pool could idle for many seconds after PostgreSQL is back. With a
# short reconnect_timeout (a documented option) each background attempt gives
# up quickly, and the pool starts a fresh, immediate attempt whenever a caller
# waits for a connection (the health monitor's ping is one every few seconds):
# the sidecar is serving again within a fraction of a second of PostgreSQL
# accepting connections, with no patch of the pool's private classes.
_RECONNECT_TIMEOUT_SECONDS = 0.2
# At start-up, how often a new connection attempt begins while none succeeded.
_START_ATTEMPT_SECONDS = 0.5


async def _durable_commits(conn: psycopg.AsyncConnection[DictRow]) -> None:
    """A new pool connection commits synchronously even where the server's default is synchronous_commit=off.

    An acknowledged write must survive a crash of PostgreSQL. Any other setting (local, remote_write, on,
    remote_apply, as the server or its replication set it) is kept.
    """
    # One round trip: set_config(…, false) is SET for the session, and runs only where the setting is off.
    await conn.execute("SELECT set_config('synchronous_commit', 'on', false)"
                       " WHERE current_setting('synchronous_commit') = 'off'")


async def _reconnect_failed(pool: AsyncConnectionPool[Connection]) -> None:
    # Expected during an outage; the next caller starts a new attempt.
    log.debug("a reconnection attempt gave up; the next request starts another", extra={"pool": pool.name})


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, psycopg.OperationalError) and not isinstance(exc, psycopg.errors.QueryCanceled):
        sqlstate = getattr(exc, "sqlstate", None)
        return sqlstate is None or sqlstate.startswith(_TRANSIENT_CLASSES) or sqlstate in _TRANSIENT_CODES
    if isinstance(exc, psycopg.Error):
        sqlstate = exc.sqlstate or ""
        return sqlstate.startswith(_TRANSIENT_CLASSES) or sqlstate in _TRANSIENT_CODES
    return False


class PgRunner(Runner):
    """The shared SQL of the stores written once (stores/*.py), run through psycopg."""

    dialect = DIALECT

    async def all(self, conn: Conn, query: str, params: dict[str, Any], *, binary: bool = False) -> list[Row]:
        cur = await pg(conn).execute(query, params, binary=binary)  # built from fixed SQL text only
        return list(await cur.fetchall()) if cur.description else []

    async def execute(self, conn: Conn, query: str, params: dict[str, Any]) -> int:
        cur = await pg(conn).execute(query, params)  # built from fixed SQL text only
        return cur.rowcount

    async def many(self, conn: Conn, query: str, params: list[dict[str, Any]]) -> None:
        async with pg(conn).cursor() as cur:
            await cur.executemany(query, params)  # built from fixed SQL text only

    async def now(self, conn: Conn) -> datetime:
        return await database_now(conn)

    def at(self, value: datetime | None) -> Any:
        return value


RUNNER = PgRunner()


class PostgresDatabase(Database):
    """Owns the pools; `transaction` runs a function in one retried transaction.

    The connections are two psycopg pools: one of a single connection that every call takes when it is free
    (the hot one), and the rest. psycopg_pool hands out its idle connections oldest first, so once a burst
    has grown a pool, calls one at a time go round every connection it holds, each to a PostgreSQL backend
    that has slept the longest; measured here, that costs a lone save 0.2–0.3 ms. With the hot connection
    taken first whenever it is free, one caller at a time keeps reusing one warm backend (a stack's order,
    which PgBouncer also uses), and concurrent callers still get the whole size.
    """

    def __init__(self, url: str, *, min_size: int, max_size: int, connect_timeout: float, retry_attempts: int,
                 pool_timeout: float = 5.0) -> None:
        self.url = url
        self.retry_attempts = retry_attempts
        self._connect_timeout = connect_timeout

        def pool(name: str, low: int, high: int) -> AsyncConnectionPool[Connection]:
            return AsyncConnectionPool(
                url,
                min_size=low,
                max_size=high,
                open=False,
                timeout=pool_timeout,
                # Autocommit: a transaction is an explicit BEGIN … COMMIT (transaction()), and a
                # statement outside one commits alone (single(): one round trip).
                kwargs={"row_factory": dict_row, "autocommit": True,
                        "connect_timeout": max(1, int(connect_timeout))},
                connection_class=psycopg.AsyncConnection[DictRow],
                name=name,
                reconnect_timeout=_RECONNECT_TIMEOUT_SECONDS,
                reconnect_failed=_reconnect_failed,
                configure=_durable_commits,
            )

        # min_size and max_size count both pools' connections together.
        self.hot: AsyncConnectionPool[Connection] | None = pool("durable-hot", 1, 1) if max_size > 1 else None
        spare = 1 if self.hot is not None else 0
        self.pool: AsyncConnectionPool[Connection] = pool("durable", max(0, min_size - spare), max_size - spare)
        self.pools = (self.pool,) if self.hot is None else (self.hot, self.pool)

    def _pick(self) -> AsyncConnectionPool[Connection]:
        """The hot connection's pool while its connection is idle, else the other one."""
        hot = self.hot
        # No await between this look and the caller's getconn: no other task can take the connection between.
        if hot is not None and hot.get_stats()["pool_available"]:
            return hot
        return self.pool

    async def open(self) -> None:
        """Opens the pools and fails fast when PostgreSQL cannot be reached within the connect timeout."""
        for pool in self.pools:
            await pool.open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._connect_timeout
        kick = loop.time() + _START_ATTEMPT_SECONDS
        while any(p.get_stats().get("pool_available", 0) < p.min_size for p in self.pools):
            now = loop.time()
            if now >= deadline:
                await self.close()
                raise Unavailable(f"PostgreSQL not reachable at {redact(self.url)} within {self._connect_timeout}s")
            if now >= kick:
                # The first attempts gave up (reconnect_timeout): check() starts a new one, so
                # PostgreSQL starting a moment after the sidecar is still found.
                for pool in self.pools:
                    await pool.check()
                kick = now + _START_ATTEMPT_SECONDS
            await asyncio.sleep(0.02)
        log.info("database pool open", extra={"pool_max": sum(p.max_size for p in self.pools)})
        await self._check_autovacuum()

    async def _check_autovacuum(self) -> None:
        """Warns when PostgreSQL's autovacuum is off: every save updates its instance's row in durable_instances,
        and without vacuum the dead row versions pile up and saves slow down (docs/operations.md)."""
        try:
            async with self._pick().connection(timeout=self._connect_timeout) as conn:
                cur = await conn.execute("SELECT current_setting('autovacuum') AS setting")
                row = await cur.fetchone()
        except psycopg.Error:
            return  # a check only: the first real call reports the database's problem
        if row is not None and row["setting"] == "off":
            log.warning("PostgreSQL's autovacuum is off: the sidecar vacuums and analyses its own tables by "
                        "autovacuum's default rules (every %d s); turn autovacuum on to leave it to PostgreSQL",
                        MAINTENANCE_INTERVAL_SECONDS)

    async def stand_in_for_autovacuum(self) -> list[str]:
        """While `autovacuum` is off, runs on the durable_* tables what autovacuum's default rules would.

        Without ANALYZE a long-lived connection keeps the generic plans it made while a table was a few
        pages: a plan that reaches an instance through the listing index stays, and reads every instance
        of the namespace once the table has grown (saves 1.8 → 3 ms over 16,000 instances; back to 1.8 ms
        after an ANALYZE, which also invalidates those plans). Without VACUUM the row versions every save
        leaves in durable_instances pile up (docs/operations.md). Due means autovacuum's defaults:
        ANALYZE after 50 + 10 % of the rows changed, VACUUM after 50 + 20 % dead.
        """
        try:
            # The spare pool, never the hot connection: a VACUUM may take seconds, and the calls keep theirs.
            async with self.pool.connection(timeout=self._connect_timeout) as conn:
                cur = await conn.execute(_DUE_SQL)
                due = await cur.fetchall()
                done = []
                for row in due:
                    what = ("VACUUM (ANALYZE)" if row["vacuum"] else "ANALYZE")
                    await conn.execute(psycopg.sql.SQL(what + " {}").format(psycopg.sql.Identifier(row["relname"])))
                    done.append(f"{what} {row['relname']}")
                return done
        except psycopg.Error as exc:  # a read-only standby, a lock: the next round tries again
            log.info("maintenance of the sidecar's tables not run", extra={"error": str(exc)})
            return []

    async def close(self) -> None:
        for pool in self.pools:
            await pool.close()
        log.info("database pool closed")

    async def ping(self) -> bool:
        try:
            async with self._pick().connection(timeout=2.0) as conn:
                await conn.execute("SELECT 1")
            return True
        except Exception:  # noqa: BLE001 - readiness only reports
            return False

    def pool_stats(self) -> dict[str, int]:
        """The pools' figures added up (pool_min, pool_max, pool_size, pool_available, requests_waiting, …)."""
        total: dict[str, int] = {}
        for pool in self.pools:
            for name, value in pool.get_stats().items():
                total[name] = total.get(name, 0) + value
        return total

    async def installation_id(self) -> str:
        async def read(conn: Conn) -> str:
            try:
                cur = await pg(conn).execute("SELECT id FROM durable_installation")
            except psycopg.errors.UndefinedTable:
                raise FailedPrecondition(SCHEMA_TOO_OLD) from None
            row = await cur.fetchone()
            if row is None:
                raise FailedPrecondition(NO_INSTALLATION_ROW)
            applied = await pg(conn).execute(APPLIED_SQL)
            require_current("postgres", {r["version"]: (r["name"], r["checksum"]) for r in await applied.fetchall()},
                            SCHEMA_TOO_OLD)
            return str(row["id"])

        return await self.transaction(read)

    async def transaction(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Runs fn inside one transaction; retries the whole transaction on transient errors."""
        return await self._run(fn, in_transaction=True)

    async def single(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Runs fn's one statement in autocommit (one round trip); retried like a transaction."""
        return await self._run(fn, in_transaction=False)

    async def _run(self, fn: Callable[[Conn], Awaitable[T]], *, in_transaction: bool) -> T:
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._pick().connection() as conn:
                    if not in_transaction:
                        return await fn(PgConn(conn))
                    async with conn.transaction():
                        return await fn(PgConn(conn))
            except PoolTimeout:
                # Every connection is busy or PostgreSQL is down: waiting longer
                # would only hold the caller past its deadline.
                log.warning("no database connection within the pool timeout", extra={"attempt": attempt})
                raise Unavailable("the database is unavailable or overloaded (no connection within the pool "
                                  "timeout); retry later") from None
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if isinstance(exc, psycopg.Error) and exc.sqlstate == _READ_ONLY:
                    # The server was demoted but the connection lives on: drop it, or the pool
                    # would hand it out again. New connections honour target_session_attrs=read-write
                    # of a multi-host URL and find the new primary.
                    await self._drop_read_only_connections()
                if attempt >= self.retry_attempts:
                    log.error("transient database error, giving up", extra={"attempt": attempt, "error": str(exc)})
                    raise Unavailable("the database is unavailable; retry later") from exc
                delay = min(2.0, 0.05 * 2 ** (attempt - 1)) * (0.5 + random.random())
                log.warning(
                    "transient database error, retrying",
                    extra={"attempt": attempt, "delay_s": round(delay, 3), "error": str(exc)},
                )
                await asyncio.sleep(delay)

    async def _drop_read_only_connections(self) -> None:
        # check() tests every idle connection and replaces the broken ones; a connection
        # to a standby is not broken, so ask each one whether it can still write.
        for pool in self.pools:
            for _ in range(pool.max_size):
                try:
                    async with pool.connection(timeout=1.0) as conn:
                        cur = await conn.execute("SELECT pg_is_in_recovery() AS standby")
                        row = await cur.fetchone()
                        await conn.rollback()
                        if row is None or not row["standby"]:
                            break
                        await conn.close()  # the pool discards a closed connection
                except Exception:  # noqa: BLE001 - best effort: the retry that follows reports
                    break


def redact(url: str) -> str:
    # Never log a password that may be inside the URL.
    head, at, tail = url.rpartition("@")
    if not at:
        return url
    scheme, _, _ = head.partition("://")
    return f"{scheme}://***@{tail}"
