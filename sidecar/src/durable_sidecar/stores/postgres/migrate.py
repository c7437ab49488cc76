"""Forward-only migrations of PostgreSQL: numbered .sql files applied under an advisory lock, with checksums, then
the PL/pgSQL function sources (sql/<function>.sql) replaced where they changed."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from ...errors import Unavailable
from ..schema import Migration, load_migrations, pending
from .db import redact

log = logging.getLogger(__name__)

# Arbitrary constant: every sidecar replica serialises migrations on this lock.
_LOCK_ID = 0x6475726162  # "durab"
# A function's comment records the SHA-256 of the source it was created from: an unchanged source is not applied again.
_SOURCE_MARK = "durable source sha256 "


@dataclass(frozen=True)
class FunctionSource:
    """One PL/pgSQL function: sql/<name>.sql, a CREATE OR REPLACE FUNCTION of that name."""

    name: str
    sql: str

    @property
    def mark(self) -> str:
        return _SOURCE_MARK + hashlib.sha256(self.sql.encode()).hexdigest()


def load_function_sources() -> list[FunctionSource]:
    """The function sources shipped with the sidecar, by name."""
    folder = resources.files("durable_sidecar.stores.postgres").joinpath("sql")
    return sorted((FunctionSource(entry.name.removesuffix(".sql"), entry.read_text(encoding="utf-8"))
                   for entry in folder.iterdir() if entry.name.endswith(".sql")), key=lambda f: f.name)


async def apply_function_sources(conn: psycopg.AsyncConnection[TupleRow], sources: list[FunctionSource]) -> list[str]:
    """Creates or replaces each function whose source is not the one it was created from; returns their names.

    Runs after the numbered migrations (a source may use what they create), in one transaction: every function
    is replaced, or none. A function the numbered migrations created before it had a source file has no mark,
    so an existing database and a fresh one both end with the bodies of these files.
    """
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT p.proname, coalesce(obj_description(p.oid, 'pg_proc'), '') FROM pg_proc p "
            "WHERE p.proname = ANY(%s) AND pg_function_is_visible(p.oid)",
            ([s.name for s in sources],))
        marks = {str(name): str(mark) for name, mark in await cur.fetchall()}
        changed = [s for s in sources if marks.get(s.name) != s.mark]
        for source in changed:
            await conn.execute(source.sql.encode())
            await conn.execute(sql.SQL("COMMENT ON FUNCTION {} IS {}").format(
                sql.Identifier(source.name), sql.Literal(source.mark)))
    for source in changed:
        log.info("function source applied", extra={"function": source.name})
    return [s.name for s in changed]


async def migrate(url: str, migrations: list[Migration] | None = None,
                  functions: list[FunctionSource] | None = None) -> list[str]:
    """Applies pending migrations, then the changed function sources; returns the migrations applied.

    A changed applied migration is an error. The function sources follow the
    numbered migrations under the same advisory lock (see apply_function_sources),
    once the database has every migration this sidecar ships.
    """
    migrations = load_migrations("postgres") if migrations is None else migrations
    functions = load_function_sources() if functions is None else functions
    applied_now: list[str] = []
    try:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise Unavailable(f"cannot connect to PostgreSQL at {redact(url)}: {str(exc).strip()}") from None
    async with conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_ID,))
        try:
            await conn.execute(
                """CREATE TABLE IF NOT EXISTS durable_schema_migrations (
                       version integer PRIMARY KEY,
                       name text NOT NULL,
                       checksum text NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
            )
            cur = await conn.execute("SELECT version, name, checksum FROM durable_schema_migrations")
            done = {row[0]: (row[1], row[2]) for row in await cur.fetchall()}
            for m in pending(done, migrations):
                async with conn.transaction():
                    await conn.execute(m.sql.encode())
                    await conn.execute(
                        "INSERT INTO durable_schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                        (m.version, m.name, m.checksum),
                    )
                log.info("migration applied", extra={"migration": m.name})
                applied_now.append(m.name)
            # The sources are written for the newest schema: a database held behind it (a partial list of
            # migrations) gets them once it reaches it, and its numbered migrations create the functions first.
            if {m.version for m in load_migrations("postgres")} <= set(done) | {m.version for m in migrations}:
                await apply_function_sources(conn, functions)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
    return applied_now
