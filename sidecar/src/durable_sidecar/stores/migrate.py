"""Forward-only migrations: numbered .sql files applied under an advisory lock, with checksums."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib import resources

import psycopg

from ..errors import FailedPrecondition, Unavailable
from .db import redact

log = logging.getLogger(__name__)

# Arbitrary constant: every sidecar replica serialises migrations on this lock.
_LOCK_ID = 0x6475726162  # "durab"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations() -> list[Migration]:
    out = []
    for entry in resources.files("durable_sidecar.migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            out.append(Migration(int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    out.sort(key=lambda m: m.version)
    versions = [m.version for m in out]
    if versions != list(range(1, len(out) + 1)):
        raise RuntimeError(f"migration numbers must be 1..N without gaps, found {versions}")
    return out


async def migrate(url: str, migrations: list[Migration] | None = None) -> list[str]:
    """Applies pending migrations; returns the names applied. A changed applied file is an error."""
    migrations = load_migrations() if migrations is None else migrations
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
            for m in migrations:
                if m.version in done:
                    name, checksum = done[m.version]
                    if checksum != m.checksum:
                        raise FailedPrecondition(
                            f"migration {name} was changed after it was applied (checksum mismatch); "
                            "migrations are forward-only: add a new numbered file instead"
                        )
                    continue
                async with conn.transaction():
                    await conn.execute(m.sql.encode())
                    await conn.execute(
                        "INSERT INTO durable_schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                        (m.version, m.name, m.checksum),
                    )
                log.info("migration applied", extra={"migration": m.name})
                applied_now.append(m.name)
            unknown = set(done) - {m.version for m in migrations}
            if unknown:
                raise FailedPrecondition(
                    f"the database has migrations this sidecar does not know ({sorted(unknown)}): it is older than the schema"
                )
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
    return applied_now
