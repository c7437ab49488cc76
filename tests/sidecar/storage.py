"""Backend-neutral direct access to a sidecar's database for test setup and checks: PostgreSQL or the embedded SQLite file.

Queries are written once with %s placeholders and portable SQL; `ago()` spells
"database time minus N seconds" for either backend (the embedded database's
time is the sidecar's clock, which the tests share). SQLite is opened beside
the running sidecar: its file lock is advisory, SQLite's own locking keeps
the two apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from typing import Any

import psycopg

SQLITE_SCHEME = "sqlite://"


def is_sqlite(url: str) -> bool:
    return url.startswith(SQLITE_SCHEME)


def sqlite_path(url: str) -> str:
    return "/" + url[len(SQLITE_SCHEME):].lstrip("/")


def ago(url: str, seconds: float) -> str:
    """SQL for database time `seconds` ago."""
    if is_sqlite(url):
        return str(time.time_ns() // 1000 - int(seconds * 1_000_000))
    return f"(now() - make_interval(secs => {float(seconds)}))"


def fetch_sync(url: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    """Runs one statement in its own transaction; returns its rows (none for a statement without)."""
    if is_sqlite(url):
        with contextlib.closing(sqlite3.connect(sqlite_path(url), timeout=30, isolation_level=None)) as conn:
            return [tuple(r) for r in conn.execute(query.replace("%s", "?"), params).fetchall()]
    with psycopg.connect(url, autocommit=True) as pg:
        cur = pg.execute(query, params)
        return cur.fetchall() if cur.description else []


async def fetch(url: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    """fetch_sync off the event loop: the sidecar under test may be serving on this loop."""
    return await asyncio.to_thread(fetch_sync, url, query, *params)


def table_exists(url: str, name: str) -> bool:
    if is_sqlite(url):
        return bool(fetch_sync(url, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = %s", name))
    return fetch_sync(url, "SELECT to_regclass(%s) IS NOT NULL", name) == [(True,)]


def columns(url: str) -> dict[str, list[str]]:
    """Every durable_* table with its column names in order."""
    if is_sqlite(url):
        tables = [r[0] for r in fetch_sync(url, "SELECT name FROM sqlite_master WHERE type = 'table' "
                                                "AND name LIKE 'durable%%' ORDER BY name")]
        return {t: [r[1] for r in fetch_sync(url, f'PRAGMA table_info("{t}")')] for t in tables}
    out: dict[str, list[str]] = {}
    for table, column in fetch_sync(url, "SELECT table_name, column_name FROM information_schema.columns "
                                         "WHERE table_schema = 'public' AND table_name LIKE 'durable%%' "
                                         "ORDER BY table_name, ordinal_position"):
        out.setdefault(table, []).append(column)
    return out


async def expire_instance_lease(url: str, key: str) -> None:
    """Simulates the holder dying: its lease lapses (database time moves past it)."""
    await fetch(url, f"UPDATE durable_instances SET lease_expires_at = {ago(url, 1)} WHERE instance_key = %s", key)


async def count_checkpoints(url: str, key: str) -> int:
    rows = await fetch(url, "SELECT count(*) FROM durable_checkpoints WHERE instance_key = %s", key)
    return int(rows[0][0])
