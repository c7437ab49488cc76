"""IdempotencyStore: rows of durable_idempotency_keys, written once; every time is database time.

Both backends run the same SQL text through their Runner; the Dialect says
how database time, a time some seconds later and the larger of two times are
written. PostgreSQL's subclass (postgres/idempotency.py) overrides only what
truly differs: its one-statement claim and completion, and a batch delete of
expired keys that skips the rows a claim holds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..domain import IdempotencyKey, InstanceStatus, KeyFilter, KeyRef, KeyStatus, NewClaim, Page
from .base import Conn, SingleClaim
from .core import Dialect, Row, Runner, blob, lease_end_sql, time_cursor
from .paging import cut_page

KEY_COLUMNS = """namespace, scope, key, status, fingerprint, attempt, holder, lease_expires_at, result_json,
    error_message, expires_at, created_at, updated_at"""


KEY_WHERE = "namespace = %(ns)s AND scope = %(scope)s AND key = %(key)s"
# A claim's instance that takes no more claims (a completed, failed or cancelled one), by key.
INSTANCE_FINISHED = ("namespace = %(ns)s AND workflow_id = %(instance_workflow)s AND instance_key = %(instance_key)s "
                     "AND status IN ({})".format(", ".join(f"'{s.value}'" for s in InstanceStatus if s.final)))


def key_params(ref: KeyRef) -> dict[str, Any]:
    return {"ns": ref.namespace, "scope": ref.scope, "key": ref.key}


def claim_params(claim: NewClaim) -> dict[str, Any]:
    return {**key_params(claim.ref), "fp": claim.fingerprint, "holder": claim.holder, "lease": claim.lease_seconds,
            "ttl": claim.ttl_seconds}


def key_of(d: Dialect, row: Row) -> IdempotencyKey:
    return IdempotencyKey(
        namespace=row["namespace"],
        scope=row["scope"],
        key=row["key"],
        status=KeyStatus(row["status"]),
        fingerprint=row["fingerprint"],
        attempt=row["attempt"],
        holder=row["holder"],
        lease_expires_at=d.time_or_none(row["lease_expires_at"]),
        result_json=blob(row["result_json"]),
        error_message=row["error_message"],
        expires_at=d.time(row["expires_at"]),
        created_at=d.time(row["created_at"]),
        updated_at=d.time(row["updated_at"]),
    )


def key_cursor(d: Dialect, k: IdempotencyKey) -> list[Any]:
    return [d.cursor_time(k.created_at), k.scope, k.key]


class IdempotencyStore:
    """Reads and writes idempotency keys over one backend's Runner; every method runs in the caller's transaction."""

    def __init__(self, runner: Runner) -> None:
        self.r = runner
        # Leases ended early: their session ended, or their process released them (stores/sessions.py).
        self._lease_ends = lease_end_sql(runner.dialect, "durable_idempotency_keys", "in_progress", "holder")
        d = runner.dialect
        renewed_until = d.later_sql.format(param="seconds")
        self._renew_running = d.sql(
            f"""UPDATE durable_idempotency_keys SET lease_expires_at = {renewed_until}
                WHERE status = 'in_progress' AND lease_expires_at > {d.now_sql}
                  AND lease_expires_at < {renewed_until} AND namespace = %(ns)s
                  AND {d.in_list.format(column="holder", param="owners")}
                RETURNING namespace""")
        now = d.now_sql
        lease_until = d.later_sql.format(param="lease")
        # A key lives `ttl` after its latest acquisition, and never ends before the
        # lease it was just given: a running holder's key cannot expire under it.
        self.new_expiry = f"{d.greatest}({d.later_sql.format(param='ttl')}, {lease_until})"
        self.lease_until = lease_until
        self._instance_finished = d.sql(f"SELECT 1 AS finished FROM durable_instances WHERE {INSTANCE_FINISHED}")
        self._get = {lock: d.sql(f"SELECT {KEY_COLUMNS} FROM durable_idempotency_keys WHERE {KEY_WHERE}"
                                 f"{d.lock(lock)}") for lock in (False, True)}
        self._insert = d.sql(
            f"""INSERT INTO durable_idempotency_keys
                    (namespace, scope, key, status, fingerprint, attempt, holder, lease_expires_at, expires_at,
                     created_at, updated_at)
                VALUES (%(ns)s, %(scope)s, %(key)s, 'in_progress', %(fp)s, 1, %(holder)s, {lease_until},
                        {self.new_expiry}, {now}, {now})
                ON CONFLICT DO NOTHING
                RETURNING {KEY_COLUMNS}""")
        self._acquire = d.sql(
            f"""UPDATE durable_idempotency_keys
                SET status = 'in_progress', attempt = attempt + 1, holder = %(holder)s,
                    lease_expires_at = {lease_until},
                    expires_at = CASE WHEN %(fresh)s THEN {self.new_expiry}
                                      ELSE {d.greatest}(expires_at, {self.new_expiry}) END,
                    fingerprint = CASE WHEN %(fresh)s THEN %(fp)s ELSE fingerprint END,
                    created_at = CASE WHEN %(fresh)s THEN {now} ELSE created_at END,
                    result_json = NULL, error_message = '', updated_at = {now}
                WHERE {KEY_WHERE}
                RETURNING {KEY_COLUMNS}""")
        self._complete = d.sql(
            f"""UPDATE durable_idempotency_keys
                SET status = 'completed', result_json = %(result)s, lease_expires_at = NULL, updated_at = {now}
                WHERE {KEY_WHERE}
                RETURNING {KEY_COLUMNS}""")
        self._reap = d.sql(
            f"""DELETE FROM durable_idempotency_keys
                WHERE (namespace, scope, key) IN (
                    SELECT namespace, scope, key FROM durable_idempotency_keys
                    WHERE status <> 'in_progress' AND expires_at <= {now}
                    ORDER BY expires_at LIMIT %(limit)s)
                RETURNING namespace, scope, key""")
        self._release = d.sql(
            f"""UPDATE durable_idempotency_keys
                SET status = 'failed', error_message = %(error)s, lease_expires_at = NULL, updated_at = {now}
                WHERE {KEY_WHERE}
                RETURNING {KEY_COLUMNS}""")

    def record(self, row: Any) -> IdempotencyKey:
        return key_of(self.r.dialect, row)

    async def now_txn(self, conn: Conn) -> datetime:
        """The transaction's database time: the same now() every statement of it uses."""
        return await self.r.now(conn)

    async def get_txn(self, conn: Conn, ref: KeyRef, *, for_update: bool = False) -> IdempotencyKey | None:
        """The key, expired or not; with for_update its row stays locked until the transaction ends."""
        row = await self.r.one(conn, self._get[for_update], key_params(ref))
        return self.record(row) if row else None

    async def insert_txn(self, conn: Conn, claim: NewClaim) -> IdempotencyKey | None:
        """Inserts the key in progress with attempt 1; None when it exists (the unique key decides).

        It lives `ttl` after its acquisition, and never ends before the lease it was given.
        """
        row = await self.r.one(conn, self._insert, await self.r.with_now(conn, **claim_params(claim)))
        return self.record(row) if row else None

    async def acquire_txn(self, conn: Conn, claim: NewClaim, *, new_life: bool) -> IdempotencyKey:
        """Gives the locked key to a new holder with the next attempt number.

        A new life (the key had expired) also takes the claim's fingerprint and
        starts its age again; a take-over keeps both.
        """
        row = await self.r.one(conn, self._acquire, await self.r.with_now(conn, **claim_params(claim), fresh=new_life))
        assert row is not None, "caller locked the row"
        return self.record(row)

    async def claim_single_txn(self, conn: Conn, claim: NewClaim) -> SingleClaim | None:
        """Inserts the key as insert_txn does or, when it exists, reads it (unlocked), in one statement.

        Run with Database.single. A completed key read this way may be replayed
        (it cannot change before it expires); any other existing key, and None
        (no row seen), goes to the locked path. This default takes two statements
        (fine where statements cost no round trip); PostgreSQL overrides it. A
        claim naming a finished instance inserts nothing: the locked path refuses
        it (PostgreSQL's statement does the same).
        """
        ref = claim.instance
        if ref is not None and await self.r.one(conn, self._instance_finished, {
                "ns": ref.namespace, "instance_workflow": ref.workflow_id, "instance_key": ref.instance_key}) is not None:
            return None
        created = await self.insert_txn(conn, claim)
        if created is not None:
            return SingleClaim(created, True, await self.now_txn(conn))
        found = await self.get_txn(conn, claim.ref)
        return SingleClaim(found, False, await self.now_txn(conn)) if found is not None else None

    async def complete_held_txn(self, conn: Conn, ref: KeyRef, *, attempt: int,
                                result_json: bytes | None) -> tuple[IdempotencyKey, datetime] | None:
        """Completes the key in one statement when attempt holds it in progress: the key and the database time.

        None when it does not: the caller takes the locked path, which knows why.
        This default locks and updates in two statements; PostgreSQL overrides it.
        """
        found = await self.get_txn(conn, ref, for_update=True)
        if found is None or found.attempt != attempt or found.status is not KeyStatus.IN_PROGRESS:
            return None
        return await self.complete_txn(conn, ref, result_json=result_json), await self.now_txn(conn)

    async def complete_txn(self, conn: Conn, ref: KeyRef, *, result_json: bytes | None) -> IdempotencyKey:
        """Marks the locked key completed with its result."""
        row = await self.r.one(conn, self._complete, await self.r.with_now(conn, **key_params(ref), result=result_json))
        assert row is not None, "caller locked the row"
        return self.record(row)

    async def release_txn(self, conn: Conn, ref: KeyRef, *, error_message: str) -> IdempotencyKey:
        """Marks the locked key failed: the next claim acquires it."""
        row = await self.r.one(conn, self._release, await self.r.with_now(conn, **key_params(ref), error=error_message))
        assert row is not None, "caller locked the row"
        return self.record(row)

    async def list_txn(self, conn: Conn, namespace: str, flt: KeyFilter, page: Page) -> tuple[list[IdempotencyKey], str]:
        """Newest first, keyset-paged."""
        d = self.r.dialect
        now = d.now_sql
        where = ["namespace = %(ns)s"]
        params: dict[str, Any] = await self.r.with_now(conn, ns=namespace, limit=page.size + 1)
        if flt.scope:
            where.append("scope = %(scope)s")
            params["scope"] = flt.scope
        if flt.statuses:
            where.append(d.in_list.format(column="status", param="statuses"))
            params["statuses"] = d.list_param([s.value for s in flt.statuses])
        if flt.stuck_only:
            where.append(f"status = 'in_progress' AND lease_expires_at <= {now}")
        if flt.key_prefix:
            where.append(d.prefix_condition.format(column="key"))
            params["prefix"] = flt.key_prefix
        if not flt.include_expired:
            where.append(f"(expires_at > {now} OR (status = 'in_progress' AND lease_expires_at > {now}))")
        if page.token:
            created, scope, key = time_cursor(d, page.token)
            where.append(f"(created_at, scope, key) < (%(c_at)s{d.cursor_time_cast}, %(c_scope)s, %(c_key)s)")
            params.update({"c_at": created, "c_scope": scope, "c_key": key})
        rows = await self.r.all(conn, d.sql(  # fixed fragments only
            f"SELECT {KEY_COLUMNS} FROM durable_idempotency_keys WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, scope DESC, key DESC LIMIT %(limit)s"), params)
        return cut_page([self.record(r) for r in rows], page.size, lambda k: key_cursor(d, k))

    async def reap_expired_txn(self, conn: Conn, *, limit: int) -> list[KeyRef]:
        """Deletes up to `limit` expired keys that are not in progress, oldest first.

        For a transaction that has the database to itself (the embedded one); PostgreSQL's subclass
        skips the rows a claim has locked.
        """
        rows = await self.r.all(conn, self._reap, await self.r.with_now(conn, limit=limit))
        return [KeyRef(r["namespace"], r["scope"], r["key"]) for r in rows]

    async def end_leases_of_session_txn(self, conn: Conn, session_id: str) -> int:
        """The live leases owned by executions of this session lapse now (it ended); how many."""
        return len(await self.r.all(conn, self._lease_ends[0], await self.r.with_now(conn, id=session_id)))

    async def renew_leases_of_owners_txn(self, conn: Conn, namespace: str, owners: list[str], seconds: int) -> int:
        """The live key leases these owners hold last at least `seconds` more (their process says the execution
        runs: a long call after a Claim); never a lapsed lease, never shortened; how many."""
        if not owners:
            return 0
        params = await self.r.with_now(conn, ns=namespace, owners=self.r.dialect.list_param(owners), seconds=seconds)
        return len(await self.r.all(conn, self._renew_running, params))

    async def end_leases_of_owners_txn(self, conn: Conn, namespace: str, owners: list[str]) -> int:
        """The live leases these owners hold lapse now (their process says their execution ended); how many."""
        if not owners:
            return 0
        params = await self.r.with_now(conn, ns=namespace, owners=self.r.dialect.list_param(owners))
        return len(await self.r.all(conn, self._lease_ends[1], params))
