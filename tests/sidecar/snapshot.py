"""A checksum of every durable_* table's rows, to show that a refused request changed nothing."""

from __future__ import annotations

import hashlib

from tests.sidecar.storage import columns, fetch_sync


def snapshot_sync(url: str, namespace: str = "") -> dict[str, tuple[int, str]]:
    """{table: (row count, SHA-256 of its sorted rows)}; rows of `namespace` only where a table has one."""
    out: dict[str, tuple[int, str]] = {}
    for table, cols in columns(url).items():
        if namespace and "namespace" in cols:
            rows = fetch_sync(url, f'SELECT * FROM "{table}" WHERE namespace = %s', namespace)
        else:
            rows = fetch_sync(url, f'SELECT * FROM "{table}"')
        text = "\n".join(sorted(repr(tuple(bytes(v) if isinstance(v, memoryview) else v for v in r)) for r in rows))
        out[table] = (len(rows), hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())
    return out


async def snapshot(url: str, namespace: str = "") -> dict[str, tuple[int, str]]:
    import asyncio

    return await asyncio.to_thread(snapshot_sync, url, namespace)
