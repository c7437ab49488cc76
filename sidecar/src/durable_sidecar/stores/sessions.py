"""SessionStore: the sessions of n8n processes and the lease owners each runs; ends their leases when one ends.

Written once over a backend's `Runner`, as waits.py and versions.py are. Every
time is database time; ending a session is one conditional UPDATE
(`ended_at IS NULL`), so when several sidecar replicas sweep at once each
session is ended, and its leases freed, by exactly one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .base import Conn
from .core import Row, Runner
from .idempotency import IdempotencyStore
from .instances import InstanceStore

SESSION_COLUMNS = ("session_id, namespace, host, pid, mode, client, started_at, last_heartbeat_at, alive_until, "
                   "ended_at, end_reason, leases_freed")


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    namespace: str
    host: str
    pid: int
    mode: str
    client: str
    started_at: datetime
    last_heartbeat_at: datetime
    alive_until: datetime
    ended_at: datetime | None
    end_reason: str
    leases_freed: int


@dataclass(frozen=True)
class Ended:
    """A session this call ended, with the leases it freed (instances and keys)."""

    session_id: str
    namespace: str
    instances_freed: int
    keys_freed: int


@dataclass(frozen=True)
class Learned:
    """What recording owners found: the leases it freed (their session had ended) and those sessions' end reasons."""

    freed: int
    ended: dict[str, str]


class SessionStore:
    """durable_sessions and durable_session_owners; frees the leases of durable_instances and keys it owned."""

    # Whether learn_single records owners in one statement (PostgreSQL); else learn_txn in a transaction.
    one_statement_learn = False

    def __init__(self, runner: Runner, instances: InstanceStore, keys: IdempotencyStore) -> None:
        self.r = runner
        # The writers of the leases a session's end frees (each table has one writer).
        self.instances = instances
        self.keys = keys
        d = runner.dialect
        now = d.now_sql
        later = d.later_sql.format(param="grace")
        self._open = d.sql(f"""INSERT INTO durable_sessions
                (session_id, namespace, host, pid, mode, client, started_at, last_heartbeat_at, alive_until)
            VALUES (%(id)s, %(ns)s, %(host)s, %(pid)s, %(mode)s, %(client)s, {now}, {now}, {later})
            RETURNING {SESSION_COLUMNS}""")
        self._beat = d.sql(f"""UPDATE durable_sessions SET last_heartbeat_at = {now}, alive_until = {later}
            WHERE session_id = %(id)s AND namespace = %(ns)s AND ended_at IS NULL
            RETURNING session_id""")
        cut = d.later_sql.format(param="cut")
        self._shorten = d.sql(f"""UPDATE durable_sessions
            SET alive_until = CASE WHEN alive_until < {cut} THEN alive_until ELSE {cut} END
            WHERE session_id = %(id)s AND namespace = %(ns)s AND ended_at IS NULL""")
        self._get = d.sql(f"SELECT {SESSION_COLUMNS} FROM durable_sessions WHERE session_id = %(id)s")
        self._end = d.sql(f"""UPDATE durable_sessions SET ended_at = {now}, end_reason = %(reason)s
            WHERE session_id = %(id)s AND namespace = %(ns)s AND ended_at IS NULL
            RETURNING session_id, namespace""")
        self._lapsed = d.sql(f"""UPDATE durable_sessions SET ended_at = {now}, end_reason = 'expired'
            WHERE session_id IN (SELECT session_id FROM durable_sessions
                                 WHERE ended_at IS NULL AND alive_until < {now} ORDER BY alive_until LIMIT %(limit)s)
              AND ended_at IS NULL AND alive_until < {now}
            RETURNING session_id, namespace""")
        self._count = d.sql("UPDATE durable_sessions SET leases_freed = %(n)s WHERE session_id = %(id)s")
        # The sessions an owner is recorded against, held (shared) to the end of the recording transaction: a
        # concurrent end of one of them (an UPDATE) waits for it, then frees the owners it recorded; or it ended
        # first, and the recording sees that and frees them itself.
        self._hold = d.sql(f"""SELECT session_id, ended_at IS NOT NULL AS ended, end_reason FROM durable_sessions
            WHERE {d.in_list.format(column='session_id', param='ids')}{d.lock(True, share=True)}""")
        self._learn = d.sql(f"""INSERT INTO durable_session_owners (namespace, owner, session_id, seen_at)
            VALUES (%(ns)s, %(owner)s, %(id)s, {now})
            ON CONFLICT (namespace, owner) DO UPDATE SET session_id = excluded.session_id, seen_at = excluded.seen_at""")
        self._ended_since = d.sql(f"""SELECT {SESSION_COLUMNS} FROM durable_sessions
            WHERE ended_at IS NOT NULL AND ended_at >= %(since)s ORDER BY ended_at""")
        self._list = d.sql(f"""SELECT {SESSION_COLUMNS} FROM durable_sessions WHERE namespace = %(ns)s
            ORDER BY ended_at IS NOT NULL, coalesce(ended_at, started_at) DESC LIMIT %(limit)s""")
        self._holders = d.sql(f"""SELECT o.owner, {', '.join('s.' + c.strip() for c in SESSION_COLUMNS.split(','))}
            FROM durable_session_owners o JOIN durable_sessions s ON s.session_id = o.session_id
            WHERE o.namespace = %(ns)s AND {d.in_list.format(column='o.owner', param='owners')}""")
        self._alive = d.sql("SELECT count(*) AS n FROM durable_sessions WHERE ended_at IS NULL")
        ago = d.ago_sql
        self._prune_sessions = d.sql(f"DELETE FROM durable_sessions WHERE ended_at IS NOT NULL AND ended_at < {ago}")
        self._prune_owners = d.sql(f"""DELETE FROM durable_session_owners WHERE seen_at < {ago}
            OR session_id NOT IN (SELECT session_id FROM durable_sessions)""")

    def _session(self, row: Row) -> SessionRow:
        d = self.r.dialect
        return SessionRow(row["session_id"], row["namespace"], row["host"], row["pid"], row["mode"], row["client"],
                          d.time(row["started_at"]), d.time(row["last_heartbeat_at"]), d.time(row["alive_until"]),
                          d.time_or_none(row["ended_at"]), row["end_reason"], row["leases_freed"])

    async def now_txn(self, conn: Conn) -> datetime:
        return await self.r.now(conn)

    async def open_txn(self, conn: Conn, *, session_id: str, namespace: str, host: str, pid: int, mode: str,
                       client: str, grace_seconds: float) -> SessionRow:
        row = await self.r.one(conn, self._open, await self.r.with_now(
            conn, id=session_id, ns=namespace, host=host, pid=pid, mode=mode, client=client, grace=grace_seconds))
        assert row is not None, "INSERT ... RETURNING returns its row"
        return self._session(row)

    async def heartbeat_txn(self, conn: Conn, namespace: str, session_id: str, grace_seconds: float) -> bool:
        """True when the session is alive (and now lives another grace period); False when ended or unknown."""
        row = await self.r.one(conn, self._beat, await self.r.with_now(conn, id=session_id, ns=namespace,
                                                                        grace=grace_seconds))
        return row is not None

    async def shorten_txn(self, conn: Conn, namespace: str, session_id: str, seconds: float) -> None:
        """A live session lives at most `seconds` more unless a heartbeat comes (its process's connection closed)."""
        await self.r.all(conn, self._shorten, await self.r.with_now(conn, id=session_id, ns=namespace, cut=seconds))

    async def renew_txn(self, conn: Conn, namespace: str, owners: list[str], *, key_seconds: int) -> int:
        """The live leases of these owners (executions n8n says still run) are renewed: an instance's for its own
        length, a key's for at least `key_seconds`; how many."""
        return (await self.instances.renew_leases_of_owners_txn(conn, namespace, owners)
                + await self.keys.renew_leases_of_owners_txn(conn, namespace, owners, key_seconds))

    async def release_txn(self, conn: Conn, namespace: str, owners: list[str]) -> int:
        """The instance and key leases these owners hold lapse now; how many."""
        return (await self.instances.end_leases_of_owners_txn(conn, namespace, owners)
                + await self.keys.end_leases_of_owners_txn(conn, namespace, owners))

    async def get_txn(self, conn: Conn, session_id: str) -> SessionRow | None:
        row = await self.r.one(conn, self._get, {"id": session_id})
        return self._session(row) if row else None

    async def close_txn(self, conn: Conn, namespace: str, session_id: str) -> Ended | None:
        """Ends a live session (reason 'closed') and frees its leases; None when it was not live."""
        row = await self.r.one(conn, self._end, await self.r.with_now(conn, id=session_id, ns=namespace,
                                                                       reason="closed"))
        return await self._free(conn, row["session_id"], row["namespace"]) if row else None

    async def expire_txn(self, conn: Conn, *, limit: int) -> list[Ended]:
        """Ends the sessions whose alive_until has passed (reason 'expired') and frees their leases."""
        rows = await self.r.all(conn, self._lapsed, await self.r.with_now(conn, limit=limit))
        return [await self._free(conn, row["session_id"], row["namespace"]) for row in rows]

    async def _free(self, conn: Conn, session_id: str, namespace: str) -> Ended:
        instances = await self.instances.end_leases_of_session_txn(conn, session_id)
        keys = await self.keys.end_leases_of_session_txn(conn, session_id)
        if instances or keys:
            await self.r.all(conn, self._count, {"id": session_id, "n": instances + keys})
        return Ended(session_id, namespace, instances, keys)

    async def learn_txn(self, conn: Conn, owners: list[tuple[str, str, str]]) -> Learned:
        """Records (namespace, owner, session id) rows: the owner's leases end with that session. An owner whose
        session has already ended (another replica ended it before this one recorded the call that named the owner)
        has its leases freed now, as the end would have."""
        if not owners:
            return Learned(0, {})
        ids = sorted({sid for _, _, sid in owners})
        ended = {row["session_id"]: str(row["end_reason"] or "expired")
                 for row in await self.r.all(conn, self._hold, {"ids": self.r.dialect.list_param(ids)}) if row["ended"]}
        now = await self.r.with_now(conn)
        await self.r.many(conn, self._learn, [{**now, "ns": ns, "owner": owner, "id": sid}
                                              for ns, owner, sid in owners])
        late: dict[str, list[str]] = {}
        for ns, owner, sid in owners:
            if sid in ended:
                late.setdefault(ns, []).append(owner)
        return Learned(sum([await self.release_txn(conn, ns, sorted(names)) for ns, names in late.items()]), ended)

    async def learn_single(self, conn: Conn, owners: list[tuple[str, str, str]]) -> bool:
        """Records the owners in one statement, where one_statement_learn; False when a session of theirs had
        ended (the caller then records them with learn_txn, which frees their leases)."""
        raise NotImplementedError("recording owners in one statement is PostgreSQL's (one_statement_learn)")

    async def ended_since_txn(self, conn: Conn, since: datetime) -> list[SessionRow]:
        return [self._session(row) for row in await self.r.all(conn, self._ended_since, {"since": self.r.at(since)})]

    async def alive_count_txn(self, conn: Conn) -> int:
        row = await self.r.one(conn, self._alive, {})
        return int(row["n"]) if row else 0

    async def list_txn(self, conn: Conn, namespace: str, *, limit: int) -> list[SessionRow]:
        return [self._session(row) for row in await self.r.all(conn, self._list, {"ns": namespace, "limit": limit})]

    async def holders_txn(self, conn: Conn, namespace: str, owners: list[str]) -> dict[str, SessionRow]:
        """The session each of these lease owners ran in, where known."""
        if not owners:
            return {}
        rows = await self.r.all(conn, self._holders, {"ns": namespace,
                                                      "owners": self.r.dialect.list_param(owners)})
        return {row["owner"]: self._session(row) for row in rows}

    async def prune_txn(self, conn: Conn, *, ended_seconds: int, owner_seconds: int) -> None:
        """Deletes sessions ended longer ago than ended_seconds, and owners not seen for owner_seconds."""
        await self.r.all(conn, self._prune_sessions, await self.r.with_now(conn, seconds=ended_seconds))
        await self.r.all(conn, self._prune_owners, await self.r.with_now(conn, seconds=owner_seconds))
