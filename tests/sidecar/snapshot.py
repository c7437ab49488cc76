"""A checksum of every durable_* table's rows, to show that a refused request changed nothing."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sqlite3
from typing import Any

import psycopg

from tests.sidecar.storage import columns, is_sqlite, sqlite_path

Snapshot = dict[str, tuple[int, str]]


def _digest(rows: list[tuple[Any, ...]]) -> tuple[int, str]:
    text = "\n".join(sorted(repr(tuple(bytes(v) if isinstance(v, memoryview) else v for v in r)) for r in rows))
    return len(rows), hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Snapshotter:
    """Reads every durable_* table over one open connection (cheap enough to run around every request)."""

    def __init__(self, url: str, namespace: str = "") -> None:
        self.url = url
        self.namespace = namespace
        self.tables = columns(url)
        self._sqlite: sqlite3.Connection | None = None
        self._pg: psycopg.Connection[tuple[Any, ...]] | None = None

    def _rows(self, query: str, *params: object) -> list[tuple[Any, ...]]:
        if is_sqlite(self.url):
            if self._sqlite is None:
                self._sqlite = sqlite3.connect(sqlite_path(self.url), timeout=30, isolation_level=None)
            return [tuple(r) for r in self._sqlite.execute(query.replace("%s", "?"), params).fetchall()]
        if self._pg is None:
            self._pg = psycopg.connect(self.url, autocommit=True)
        return self._pg.execute(query, params).fetchall()  # type: ignore[arg-type]

    def take(self) -> Snapshot:
        """{table: (row count, SHA-256 of its sorted rows)}; rows of the namespace only where a table has one."""
        out: Snapshot = {}
        for table, cols in self.tables.items():
            if self.namespace and "namespace" in cols:
                rows = self._rows(f'SELECT * FROM "{table}" WHERE namespace = %s', self.namespace)
            else:
                rows = self._rows(f'SELECT * FROM "{table}"')
            out[table] = _digest(rows)
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self._sqlite is not None:
                self._sqlite.close()
            if self._pg is not None:
                self._pg.close()


def snapshot_sync(url: str, namespace: str = "") -> Snapshot:
    snap = Snapshotter(url, namespace)
    try:
        return snap.take()
    finally:
        snap.close()


async def snapshot(url: str, namespace: str = "") -> Snapshot:
    return await asyncio.to_thread(snapshot_sync, url, namespace)
