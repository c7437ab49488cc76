"""IdempotencyStore on SQLite: rows of durable_idempotency_keys; every time is database time (this process's clock)."""

from __future__ import annotations

import json
from datetime import datetime

from ...domain import IdempotencyKey, KeyFilter, KeyRef, NewClaim, Page
from .. import base, core
from ..base import Conn
from ..core import KEY_COLUMNS as _COLUMNS
from ..core import key_cursor
from ..core import key_params as _key
from ..paging import cut_page
from .db import DIALECT, Row, SqliteConn, lite

_KEY = DIALECT.sql(core.KEY_WHERE)


def _record(row: Row) -> IdempotencyKey:
    return core.key_of(DIALECT, row)



def _claim(c: SqliteConn, claim: NewClaim) -> dict[str, object]:
    # A key lives `ttl` after its latest acquisition, and never ends before the
    # lease it was just given: a running holder's key cannot expire under it.
    return {**_key(claim.ref), "fp": claim.fingerprint, "holder": claim.holder,
            "lease_until": c.after(claim.lease_seconds),
            "new_expiry": max(c.after(claim.ttl_seconds), c.after(claim.lease_seconds)), "now": c.now_us}


class IdempotencyStore(base.IdempotencyStore):
    """Reads and writes idempotency keys; every method runs inside the caller's transaction."""

    async def now_txn(self, conn: Conn) -> datetime:
        return lite(conn).now

    async def get_txn(self, conn: Conn, ref: KeyRef, *, for_update: bool = False) -> IdempotencyKey | None:
        row = await lite(conn).one(f"SELECT {_COLUMNS} FROM durable_idempotency_keys WHERE {_KEY}", _key(ref))
        return _record(row) if row else None

    async def insert_txn(self, conn: Conn, claim: NewClaim) -> IdempotencyKey | None:
        c = lite(conn)
        row = await c.one(
            f"""INSERT INTO durable_idempotency_keys
                    (namespace, scope, key, status, fingerprint, attempt, holder, lease_expires_at, expires_at,
                     created_at, updated_at)
                VALUES (:ns, :scope, :key, 'in_progress', :fp, 1, :holder, :lease_until, :new_expiry, :now, :now)
                ON CONFLICT DO NOTHING
                RETURNING {_COLUMNS}""",
            _claim(c, claim),
        )
        return _record(row) if row else None

    async def acquire_txn(self, conn: Conn, claim: NewClaim, *, new_life: bool) -> IdempotencyKey:
        c = lite(conn)
        row = await c.one(
            f"""UPDATE durable_idempotency_keys
                SET status = 'in_progress', attempt = attempt + 1, holder = :holder,
                    lease_expires_at = :lease_until,
                    expires_at = CASE WHEN :fresh THEN :new_expiry ELSE max(expires_at, :new_expiry) END,
                    fingerprint = CASE WHEN :fresh THEN :fp ELSE fingerprint END,
                    created_at = CASE WHEN :fresh THEN :now ELSE created_at END,
                    result_json = NULL, error_message = '', updated_at = :now
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_claim(c, claim), "fresh": new_life},
        )
        assert row is not None, "caller locked the row"
        return _record(row)

    async def complete_txn(self, conn: Conn, ref: KeyRef, *, result_json: bytes | None) -> IdempotencyKey:
        c = lite(conn)
        row = await c.one(
            f"""UPDATE durable_idempotency_keys
                SET status = 'completed', result_json = :result, lease_expires_at = NULL, updated_at = :now
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_key(ref), "result": result_json, "now": c.now_us},
        )
        assert row is not None, "caller locked the row"
        return _record(row)

    async def release_txn(self, conn: Conn, ref: KeyRef, *, error_message: str) -> IdempotencyKey:
        c = lite(conn)
        row = await c.one(
            f"""UPDATE durable_idempotency_keys
                SET status = 'failed', error_message = :error, lease_expires_at = NULL, updated_at = :now
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_key(ref), "error": error_message, "now": c.now_us},
        )
        assert row is not None, "caller locked the row"
        return _record(row)

    async def list_txn(self, conn: Conn, namespace: str, flt: KeyFilter,
                       page: Page) -> tuple[list[IdempotencyKey], str]:
        c = lite(conn)
        where = ["namespace = :ns"]
        params: dict[str, object] = {"ns": namespace, "limit": page.size + 1, "now": c.now_us}
        if flt.scope:
            where.append("scope = :scope")
            params["scope"] = flt.scope
        if flt.statuses:
            where.append("status IN (SELECT value FROM json_each(:statuses))")
            params["statuses"] = json.dumps([s.value for s in flt.statuses])
        if flt.stuck_only:
            where.append("status = 'in_progress' AND lease_expires_at <= :now")
        if flt.key_prefix:
            where.append("substr(key, 1, length(:prefix)) = :prefix")
            params["prefix"] = flt.key_prefix
        if not flt.include_expired:
            where.append("(expires_at > :now OR (status = 'in_progress' AND lease_expires_at > :now))")
        if page.token:
            created, scope, key = core.time_cursor(DIALECT, page.token)
            where.append("(created_at, scope, key) < (:c_at, :c_scope, :c_key)")
            params.update({"c_at": created, "c_scope": scope, "c_key": key})
        rows = [_record(r) for r in await c.all(
            f"""SELECT {_COLUMNS} FROM durable_idempotency_keys WHERE {" AND ".join(where)}
                ORDER BY created_at DESC, scope DESC, key DESC LIMIT :limit""",
            params,
        )]
        return cut_page(rows, page.size, lambda k: key_cursor(DIALECT, k))

    async def reap_expired_txn(self, conn: Conn, *, limit: int) -> list[KeyRef]:
        """Deletes up to `limit` expired keys that are not in progress, oldest first."""
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
