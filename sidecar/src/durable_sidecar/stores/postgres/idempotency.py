"""IdempotencyStore: rows of durable_idempotency_keys; every time is database time."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import sql

from ...domain import IdempotencyKey, KeyFilter, KeyRef, NewClaim, Page
from .. import base, core
from ..base import Conn
from ..core import KEY_COLUMNS as _COLUMNS
from ..core import KEY_WHERE as _KEY
from ..core import claim_params as _claim
from ..core import key_cursor
from ..core import key_params as _key
from ..paging import cut_page
from .db import DIALECT, database_now, pg


def _record(row: Any) -> IdempotencyKey:
    return core.key_of(DIALECT, row)


# A key lives `ttl` after its latest acquisition, and never ends before the
# lease it was just given: a running holder's key cannot expire under it.
_NEW_EXPIRY = "greatest(now() + make_interval(secs => %(ttl)s), now() + make_interval(secs => %(lease)s))"


class IdempotencyStore(base.IdempotencyStore):
    """Reads and writes idempotency keys; every method runs inside the caller's transaction."""

    async def now_txn(self, conn: Conn) -> datetime:
        """The transaction's database time: the same now() every statement of it uses."""
        return await database_now(conn)

    async def get_txn(self, conn: Conn, ref: KeyRef, *, for_update: bool = False) -> IdempotencyKey | None:
        lock = " FOR UPDATE" if for_update else ""
        cur = await pg(conn).execute(f"SELECT {_COLUMNS} FROM durable_idempotency_keys WHERE {_KEY}{lock}", _key(ref))
        row = await cur.fetchone()
        return _record(row) if row else None

    async def insert_txn(self, conn: Conn, claim: NewClaim) -> IdempotencyKey | None:
        """Inserts the key in progress with attempt 1; None when it exists (the unique key decides)."""
        cur = await pg(conn).execute(
            f"""INSERT INTO durable_idempotency_keys
                    (namespace, scope, key, status, fingerprint, attempt, holder, lease_expires_at, expires_at)
                VALUES (%(ns)s, %(scope)s, %(key)s, 'in_progress', %(fp)s, 1, %(holder)s,
                        now() + make_interval(secs => %(lease)s), {_NEW_EXPIRY})
                ON CONFLICT DO NOTHING
                RETURNING {_COLUMNS}""",
            _claim(claim),
        )
        row = await cur.fetchone()
        return _record(row) if row else None

    async def claim_single_txn(self, conn: Conn, claim: NewClaim) -> base.SingleClaim | None:
        # A row a concurrent claim inserted after this statement's snapshot is in neither
        # half: no row, and the caller takes the locked path.
        cur = await pg(conn).execute(
            f"""WITH inserted AS (
                    INSERT INTO durable_idempotency_keys
                        (namespace, scope, key, status, fingerprint, attempt, holder, lease_expires_at, expires_at)
                    VALUES (%(ns)s, %(scope)s, %(key)s, 'in_progress', %(fp)s, 1, %(holder)s,
                            now() + make_interval(secs => %(lease)s), {_NEW_EXPIRY})
                    ON CONFLICT DO NOTHING
                    RETURNING {_COLUMNS})
                SELECT *, true AS inserted, now() AS db_now FROM inserted
                UNION ALL
                SELECT {_COLUMNS}, false, now() FROM durable_idempotency_keys
                WHERE {_KEY} AND NOT EXISTS (SELECT 1 FROM inserted)""",
            _claim(claim),
        )
        row = await cur.fetchone()
        return base.SingleClaim(_record(row), bool(row["inserted"]), row["db_now"]) if row else None

    async def acquire_txn(self, conn: Conn, claim: NewClaim, *, new_life: bool) -> IdempotencyKey:
        """Gives the locked key to a new holder with the next attempt number.

        A new life (the key had expired) also takes the claim's fingerprint and
        starts its age again; a take-over keeps both.
        """
        cur = await pg(conn).execute(
            f"""UPDATE durable_idempotency_keys
                SET status = 'in_progress', attempt = attempt + 1, holder = %(holder)s,
                    lease_expires_at = now() + make_interval(secs => %(lease)s),
                    expires_at = CASE WHEN %(fresh)s THEN {_NEW_EXPIRY} ELSE greatest(expires_at, {_NEW_EXPIRY}) END,
                    fingerprint = CASE WHEN %(fresh)s THEN %(fp)s ELSE fingerprint END,
                    created_at = CASE WHEN %(fresh)s THEN now() ELSE created_at END,
                    result_json = NULL, error_message = '', updated_at = now()
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_claim(claim), "fresh": new_life},
        )
        row = await cur.fetchone()
        assert row is not None, "caller locked the row"
        return _record(row)

    async def complete_held_txn(self, conn: Conn, ref: KeyRef, *, attempt: int,
                                result_json: bytes | None) -> tuple[IdempotencyKey, datetime] | None:
        cur = await pg(conn).execute(
            f"""UPDATE durable_idempotency_keys
                SET status = 'completed', result_json = %(result)s, lease_expires_at = NULL, updated_at = now()
                WHERE {_KEY} AND attempt = %(attempt)s AND status = 'in_progress'
                RETURNING {_COLUMNS}, now() AS db_now""",
            {**_key(ref), "result": result_json, "attempt": attempt},
        )
        row = await cur.fetchone()
        return (_record(row), row["db_now"]) if row else None

    async def complete_txn(self, conn: Conn, ref: KeyRef, *, result_json: bytes | None) -> IdempotencyKey:
        cur = await pg(conn).execute(
            f"""UPDATE durable_idempotency_keys
                SET status = 'completed', result_json = %(result)s, lease_expires_at = NULL, updated_at = now()
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_key(ref), "result": result_json},
        )
        row = await cur.fetchone()
        assert row is not None, "caller locked the row"
        return _record(row)

    async def release_txn(self, conn: Conn, ref: KeyRef, *, error_message: str) -> IdempotencyKey:
        cur = await pg(conn).execute(
            f"""UPDATE durable_idempotency_keys
                SET status = 'failed', error_message = %(error)s, lease_expires_at = NULL, updated_at = now()
                WHERE {_KEY}
                RETURNING {_COLUMNS}""",
            {**_key(ref), "error": error_message},
        )
        row = await cur.fetchone()
        assert row is not None, "caller locked the row"
        return _record(row)

    async def list_txn(self, conn: Conn, namespace: str, flt: KeyFilter, page: Page) -> tuple[list[IdempotencyKey], str]:
        where = [sql.SQL("namespace = %(ns)s")]
        params: dict[str, Any] = {"ns": namespace, "limit": page.size + 1}
        if flt.scope:
            where.append(sql.SQL("scope = %(scope)s"))
            params["scope"] = flt.scope
        if flt.statuses:
            where.append(sql.SQL("status = ANY(%(statuses)s)"))
            params["statuses"] = [s.value for s in flt.statuses]
        if flt.stuck_only:
            where.append(sql.SQL("status = 'in_progress' AND lease_expires_at <= now()"))
        if flt.key_prefix:
            where.append(sql.SQL("starts_with(key, %(prefix)s)"))
            params["prefix"] = flt.key_prefix
        if not flt.include_expired:
            where.append(sql.SQL("(expires_at > now() OR (status = 'in_progress' AND lease_expires_at > now()))"))
        if page.token:
            created, scope, key = core.time_cursor(DIALECT, page.token)
            where.append(sql.SQL("(created_at, scope, key) < (%(c_at)s::timestamptz, %(c_scope)s, %(c_key)s)"))
            params.update({"c_at": created, "c_scope": scope, "c_key": key})
        query = sql.SQL(
            "SELECT {cols} FROM durable_idempotency_keys WHERE {where} "
            "ORDER BY created_at DESC, scope DESC, key DESC LIMIT %(limit)s"
        ).format(cols=sql.SQL(_COLUMNS), where=sql.SQL(" AND ").join(where))
        cur = await pg(conn).execute(query, params)
        rows = [_record(r) for r in await cur.fetchall()]
        return cut_page(rows, page.size, lambda k: key_cursor(DIALECT, k))

    async def reap_expired_txn(self, conn: Conn, *, limit: int) -> list[KeyRef]:
        """Deletes up to `limit` expired keys that are not in progress, skipping rows a claim has locked."""
        cur = await pg(conn).execute(
            """WITH victims AS (
                   SELECT namespace, scope, key FROM durable_idempotency_keys
                   WHERE status <> 'in_progress' AND expires_at <= now()
                   ORDER BY expires_at
                   LIMIT %(limit)s
                   FOR UPDATE SKIP LOCKED)
               DELETE FROM durable_idempotency_keys k
               USING victims v
               WHERE k.namespace = v.namespace AND k.scope = v.scope AND k.key = v.key
                 AND k.status <> 'in_progress' AND k.expires_at <= now()
               RETURNING k.namespace, k.scope, k.key""",
            {"limit": limit},
        )
        return [KeyRef(r["namespace"], r["scope"], r["key"]) for r in await cur.fetchall()]
