"""Forward-only migrations of PostgreSQL: numbered .sql files applied under an advisory lock, with checksums."""

from __future__ import annotations

import logging

import psycopg

from ...errors import Unavailable
from ..schema import Migration, load_migrations, pending
from .db import redact

log = logging.getLogger(__name__)

# Arbitrary constant: every sidecar replica serialises migrations on this lock.
_LOCK_ID = 0x6475726162  # "durab"


async def migrate(url: str, migrations: list[Migration] | None = None) -> list[str]:
    """Applies pending migrations; returns the names applied. A changed applied file is an error."""
    migrations = load_migrations("postgres") if migrations is None else migrations
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
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
    return applied_now
