"""IdempotencyStore on SQLite: rows of durable_idempotency_keys; every time is database time (this process's clock)."""

from __future__ import annotations

import json
from datetime import datetime

from ...domain import IdempotencyKey, KeyFilter, KeyRef, KeyStatus, NewClaim, Page
from ...errors import InvalidArgument
from .. import base
from ..base import Conn, decode_cursor, encode_cursor
from .db import Row, SqliteConn, from_micros, from_micros_or_none, lite, to_micros

_COLUMNS = """namespace, scope, key, status, fingerprint, attempt, holder, lease_expires_at, result_json,
    error_message, expires_at, created_at, updated_at"""

_KEY = "namespace = :ns AND scope = :scope AND key = :key"


def _key(ref: KeyRef) -> dict[str, object]:
    return {"ns": ref.namespace, "scope": ref.scope, "key": ref.key}


def _claim(c: SqliteConn, claim: NewClaim) -> dict[str, object]:
    # A key lives `ttl` after its latest acquisition, and never ends before the
    # lease it was just given: a running holder's key cannot expire under it.
    return {**_key(claim.ref), "fp": claim.fingerprint, "holder": claim.holder,
            "lease_until": c.after(claim.lease_seconds),
            "new_expiry": max(c.after(claim.ttl_seconds), c.after(claim.lease_seconds)), "now": c.now_us}


def _record(row: Row) -> IdempotencyKey:
    return IdempotencyKey(
        namespace=row["namespace"],
        scope=row["scope"],
        key=row["key"],
        status=KeyStatus(row["status"]),
        fingerprint=row["fingerprint"],
        attempt=row["attempt"],
        holder=row["holder"],
        lease_expires_at=from_micros_or_none(row["lease_expires_at"]),
        result_json=bytes(row["result_json"]) if row["result_json"] is not None else None,
        error_message=row["error_message"],
        expires_at=from_micros(row["expires_at"]),
        created_at=from_micros(row["created_at"]),
        updated_at=from_micros(row["updated_at"]),
    )


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
        if not flt.include_expired:
            where.append("(expires_at > :now OR (status = 'in_progress' AND lease_expires_at > :now))")
        if page.token:
            created, scope, key = decode_cursor(page.token, 3)
            if not isinstance(created, int):
                raise InvalidArgument("page_token is not a token this server issued")
            where.append("(created_at, scope, key) < (:c_at, :c_scope, :c_key)")
            params.update({"c_at": created, "c_scope": scope, "c_key": key})
        rows = [_record(r) for r in await c.all(
            f"""SELECT {_COLUMNS} FROM durable_idempotency_keys WHERE {" AND ".join(where)}
                ORDER BY created_at DESC, scope DESC, key DESC LIMIT :limit""",
            params,
        )]
        token = ""
        if len(rows) > page.size:
            rows = rows[: page.size]
            last = rows[-1]
            token = encode_cursor([to_micros(last.created_at), last.scope, last.key])
        return rows, token

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
