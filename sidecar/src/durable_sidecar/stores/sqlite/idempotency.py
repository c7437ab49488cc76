"""IdempotencyStore on SQLite: the shared store (stores/idempotency.py), with its own batch delete of expired keys."""

from __future__ import annotations

from ...domain import KeyRef
from .. import idempotency
from ..base import Conn
from .db import RUNNER, lite


class IdempotencyStore(idempotency.IdempotencyStore):
    def __init__(self) -> None:
        super().__init__(RUNNER)

    async def reap_expired_txn(self, conn: Conn, *, limit: int) -> list[KeyRef]:
        """Deletes up to `limit` expired keys that are not in progress, oldest first (one writer: nothing to skip)."""
        c = lite(conn)
        rows = await c.all(
            """DELETE FROM durable_idempotency_keys
               WHERE rowid IN (SELECT rowid FROM durable_idempotency_keys
                               WHERE status <> 'in_progress' AND expires_at <= :now
                               ORDER BY expires_at LIMIT :limit)
               RETURNING namespace, scope, key""",
            {"now": c.now_us, "limit": limit},
        )
        return [KeyRef(r["namespace"], r["scope"], r["key"]) for r in rows]
