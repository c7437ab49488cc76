"""Forward-only migrations of the embedded database: each file in one BEGIN IMMEDIATE transaction, with checksums.

The SQLite write lock that BEGIN IMMEDIATE takes plays the part of
PostgreSQL's advisory lock: the applied set is read again under it before each
file, so processes migrating one file at the same time apply every file once.
"""

from __future__ import annotations

import logging
import sqlite3
import time

from ..schema import Migration, pending

log = logging.getLogger(__name__)

_TABLE = """CREATE TABLE IF NOT EXISTS durable_schema_migrations (
                version    INTEGER PRIMARY KEY,
                name       TEXT    NOT NULL,
                checksum   TEXT    NOT NULL,
                applied_at INTEGER NOT NULL
            ) STRICT"""


def statements(script: str) -> list[str]:
    """The SQL statements of a script, split where SQLite itself says a statement is complete."""
    out: list[str] = []
    start = 0
    for i, ch in enumerate(script):
        if ch == ";" and sqlite3.complete_statement(script[start:i + 1]):
            out.append(script[start:i + 1].strip())
            start = i + 1
    rest = "\n".join(line.split("--", 1)[0] for line in script[start:].splitlines())
    if rest.strip():
        out.append(script[start:].strip())  # executing it reports what is incomplete
    return out


def apply(conn: sqlite3.Connection, migrations: list[Migration]) -> list[str]:
    """Applies pending migrations on an autocommit connection; returns the names applied."""
    applied_now: list[str] = []
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(_TABLE)
            done = {row[0]: (row[1], row[2]) for row in
                    conn.execute("SELECT version, name, checksum FROM durable_schema_migrations").fetchall()}
            todo = pending(done, migrations)
            if not todo:
                conn.execute("COMMIT")
                return applied_now
            m = todo[0]
            for statement in statements(m.sql):
                conn.execute(statement)
            conn.execute("INSERT INTO durable_schema_migrations (version, name, checksum, applied_at) "
                         "VALUES (?, ?, ?, ?)", (m.version, m.name, m.checksum, time.time_ns() // 1000))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        log.info("migration applied", extra={"migration": m.name})
        applied_now.append(m.name)
