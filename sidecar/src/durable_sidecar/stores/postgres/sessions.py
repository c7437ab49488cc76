"""SessionStore on PostgreSQL: the shared store (stores/sessions.py) with recording a call's owners in one
statement, the hot path of every n8n execution's first call."""

from __future__ import annotations

from ..base import Conn
from ..idempotency import IdempotencyStore
from ..instances import InstanceStore
from ..sessions import SessionStore as SharedSessionStore
from .db import RUNNER

# The shared store's learn_txn as one statement: the owners' sessions held (shared) to its commit, then the
# owners recorded, and the sessions among them that had ended, which the caller frees in learn_txn's
# transaction. A concurrent end (an UPDATE of durable_sessions) waits for this statement's commit and then
# frees the owners it recorded; an end that committed first is what this statement reads (READ COMMITTED
# re-reads a row it had to wait for), and its owners are the caller's to free. The WHERE on `held` (an
# initplan, run before the first row is inserted) takes the sessions' locks before the owners' rows, in
# learn_txn's order, so the two cannot deadlock over an owner both record.
_LEARN = """WITH held AS (
        SELECT session_id, ended_at IS NOT NULL AS ended, end_reason FROM durable_sessions
        WHERE session_id = ANY(%(ids)s) FOR SHARE),
    recorded AS (
        INSERT INTO durable_session_owners (namespace, owner, session_id, seen_at)
        SELECT o.namespace, o.owner, o.session_id, now()
        FROM unnest(%(nss)s::text[], %(owners)s::text[], %(sids)s::text[]) AS o(namespace, owner, session_id)
        WHERE (SELECT count(*) FROM held) >= 0
        ON CONFLICT (namespace, owner) DO UPDATE SET session_id = excluded.session_id, seen_at = excluded.seen_at)
    SELECT session_id, end_reason FROM held WHERE ended"""


class SessionStore(SharedSessionStore):
    """The shared session store, with PostgreSQL's one-statement recording of owners."""

    one_statement_learn = True

    def __init__(self, instances: InstanceStore, keys: IdempotencyStore) -> None:
        super().__init__(RUNNER, instances, keys)

    async def learn_single(self, conn: Conn, owners: list[tuple[str, str, str]]) -> bool:
        """Records the owners in one statement (autocommit); False when a session of theirs had ended, and the
        caller records them again with learn_txn, which frees their leases in the same transaction."""
        if not owners:
            return True
        rows = await self.r.all(conn, _LEARN, {
            "ids": sorted({sid for _, _, sid in owners}), "nss": [ns for ns, _, _ in owners],
            "owners": [owner for _, owner, _ in owners], "sids": [sid for _, _, sid in owners]})
        return not rows
