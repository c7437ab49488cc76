"""IdempotencyStore on PostgreSQL: the shared store (stores/idempotency.py) with the one-statement claim and
completion of the hot path, and a batch delete of expired keys that skips the rows a claim holds."""

from __future__ import annotations

from datetime import datetime

from ...domain import IdempotencyKey, KeyRef, NewClaim
from .. import base, idempotency
from ..base import Conn
from ..idempotency import INSTANCE_FINISHED
from ..idempotency import KEY_COLUMNS as _COLUMNS
from ..idempotency import KEY_WHERE as _KEY
from ..idempotency import claim_params as _claim
from ..idempotency import key_params as _key
from .db import RUNNER, pg


class IdempotencyStore(idempotency.IdempotencyStore):
    def __init__(self) -> None:
        super().__init__(RUNNER)
        # A claim naming a finished instance inserts nothing: with no key either, the locked path refuses it.
        self._claim_single = f"""WITH inserted AS (
                    INSERT INTO durable_idempotency_keys
                        (namespace, scope, key, status, fingerprint, attempt, holder, lease_expires_at, expires_at)
                    SELECT %(ns)s, %(scope)s, %(key)s, 'in_progress', %(fp)s, 1, %(holder)s,
                           {self.lease_until}, {self.new_expiry}
                    WHERE NOT EXISTS (SELECT 1 FROM durable_instances WHERE {INSTANCE_FINISHED})
                    ON CONFLICT DO NOTHING
                    RETURNING {_COLUMNS})
                SELECT *, true AS inserted, now() AS db_now FROM inserted
                UNION ALL
                SELECT {_COLUMNS}, false, now() FROM durable_idempotency_keys
                WHERE {_KEY} AND NOT EXISTS (SELECT 1 FROM inserted)"""

    async def claim_single_txn(self, conn: Conn, claim: NewClaim) -> base.SingleClaim | None:
        # A row a concurrent claim inserted after this statement's snapshot is in neither
        # half: no row, and the caller takes the locked path.
        instance = claim.instance
        cur = await pg(conn).execute(self._claim_single, {  # fixed text
            **_claim(claim), "instance_workflow": instance.workflow_id if instance else None,
            "instance_key": instance.instance_key if instance else None})
        row = await cur.fetchone()
        return base.SingleClaim(self.record(row), bool(row["inserted"]), row["db_now"]) if row else None

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
        return (self.record(row), row["db_now"]) if row else None

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
