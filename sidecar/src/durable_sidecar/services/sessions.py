"""SessionService: a lease lives as long as the n8n process that holds it.

An n8n process opens a session and heartbeats it; its calls carry the session
id, and the lease owners they name (execution ids, key holders, claim tokens)
are recorded against it. A session that stays silent for the grace period is
ended by whichever replica sweeps first, and the leases of its owners lapse at
once; every replica learns of ended sessions at its next sweep, refuses calls
that carry them (fencing) and wakes its Resume Trigger streams.

A replica judges no session until it has served for one grace period plus one
heartbeat interval: a sidecar restart (or a new replica) first lets every live
process heartbeat through it, so it frees nothing that is alive. The same holds
after its database was unreachable (a sweep failed): no heartbeat could be
recorded meanwhile, so sessions are judged again only one grace plus one
heartbeat after a sweep succeeds.

A call that names an owner in a session that has ended is fenced like any other
call of it: a stream (the Resume Trigger's WatchResumable) ends after the item
whose owners were recorded into its ended session, and the process opens it
again in its new session.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import TypeVar

from .. import metrics, validation
from ..errors import FailedPrecondition, InvalidArgument, NotFound
from ..stores.base import Conn, Database
from ..stores.sessions import Ended, Learned, SessionRow, SessionStore

log = logging.getLogger(__name__)
T = TypeVar("T")

# Whether the session of the call being served is still live, as this replica knows it (a stream asks before
# each claim: one in an ended session stops instead of claiming); set by the transport for each call.
caller_live: ContextVar[Callable[[], bool]] = ContextVar("caller_live", default=lambda: True)

MODES = ("regular", "main", "worker", "webhook")
# Sessions expired per sweep transaction (the rest in the next sweep, a heartbeat interval later).
_EXPIRE_BATCH = 100
# A lease owner is recorded once, then again only after this long (seen_at, for pruning).
_RELEARN_SECONDS = 600.0
_LEARNED_MAX = 100_000
# Ended sessions are kept this long (the console and CLI show them), owners not seen for this long are dropped.
ENDED_KEEP_SECONDS = 7 * 86_400
OWNER_KEEP_SECONDS = 2 * 86_400
_PRUNE_EVERY_SECONDS = 600.0


class SessionService:
    def __init__(self, db: Database, store: SessionStore, *, grace_seconds: float, key_lease_seconds: int) -> None:
        self.db = db
        self.store = store
        self.grace_seconds = grace_seconds
        # A running execution's claimed keys are renewed to at least the default key lease (a Claim of a Guard
        # used without a Resume Point has no instance lease to lean on).
        self.key_lease_seconds = key_lease_seconds
        # Five heartbeats per grace period: a process is declared dead only after five in a row went missing.
        self.heartbeat_seconds = max(0.2, grace_seconds / 5)
        self._started = time.monotonic()
        # session id -> (namespace, end reason or '' while live), as this replica last saw it.
        self._known: dict[str, tuple[str, str]] = {}
        # Owners seen in calls and not yet recorded; and those recorded lately (not recorded again for a while).
        self._pending: dict[tuple[str, str], str] = {}
        self._learned: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()
        self._recording = asyncio.Lock()
        # A sweep failed, or reached the database only after a while: sessions are not judged until a sweep
        # succeeds and one grace and one heartbeat pass. A sweep's gap beyond `_outage_after` counts as that.
        self._outage = False
        self._last_swept = time.monotonic()
        self._outage_after = max(2 * self.heartbeat_seconds, self.grace_seconds / 2, 1.0)
        self._ended_seen_until: datetime | None = None
        self._last_prune = time.monotonic()
        self._wakers: set[asyncio.Event] = set()
        # WatchSession streams by session id, woken when it ends; and the tasks they leave behind.
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # --- the RPCs ---------------------------------------------------------------------------------------

    async def open(self, namespace: str, *, host: str, pid: int, mode: str, client: str) -> SessionRow:
        host = validation.text("host", host, required=True, limit=255)
        if "\n" in host or "\t" in host:
            raise InvalidArgument("host must be one line")
        if not 1 <= pid <= 2_147_483_647:
            raise InvalidArgument(f"pid must be a process id (at least 1), got {pid}")
        if mode not in MODES:
            raise InvalidArgument(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        client = validation.text("client", client, limit=255)
        session_id = f"s-{uuid.uuid4().hex}"

        async def txn(conn: Conn) -> SessionRow:
            return await self.store.open_txn(conn, session_id=session_id, namespace=namespace, host=host, pid=pid,
                                             mode=mode, client=client, grace_seconds=self.grace_seconds)

        row = await self.db.transaction(txn)
        self._known[session_id] = (namespace, "")
        metrics.SESSIONS_OPENED.inc()
        log.info("session opened", extra={"session": session_id, "host": host, "pid": pid, "mode": mode})
        return row

    async def heartbeat(self, namespace: str, session_id: str, released: Sequence[str] = (),
                        running: Sequence[str] = ()) -> tuple[bool, str]:
        """(ended, reason): a live session lives another grace period; an ended or unknown one says so.

        `released`: owners of this process whose executions failed; their leases lapse now. `running`: owners whose
        executions n8n says still run (a long call); their live instance and key leases are renewed. A live session only.
        """
        session_id = _session_id(session_id)
        owners = sorted({validation.text("released_owners", o, required=True, limit=255) for o in released})
        runs = sorted({validation.text("running_owners", o, required=True, limit=255) for o in running})
        freed = 0

        async def txn(conn: Conn) -> tuple[bool, str]:
            nonlocal freed
            if await self.store.heartbeat_txn(conn, namespace, session_id, self.grace_seconds):
                freed = await self.store.release_txn(conn, namespace, owners)
                await self.store.renew_txn(conn, namespace, runs, key_seconds=self.key_lease_seconds)
                return False, ""
            row = await self.store.get_txn(conn, session_id)
            if row is None or row.namespace != namespace:
                raise NotFound(f"session {session_id} is unknown: open a new one (OpenSession)")
            return True, row.end_reason

        ended, reason = await self.db.transaction(txn)
        if ended:
            self._known[session_id] = (namespace, reason)
        if freed:
            metrics.LEASES_FREED_BY_RELEASE.inc(freed)
            log.info("leases released by their process", extra={"session": session_id, "owners": len(owners),
                                                                  "freed": freed})
            self._wake()
        return ended, reason

    async def watch(self, namespace: str, session_id: str,
                    stopping: asyncio.Event) -> AsyncIterator[tuple[bool, str]]:
        """(ended, reason) once at once, then once more when the session ends; while the sidecar serves.

        When the watcher goes away first (its process exited and its connection closed), the session has two
        heartbeat intervals left: a live process heartbeats on, a dead one is ended at the next sweeps.
        """
        session_id = _session_id(session_id)

        async def txn(conn: Conn) -> SessionRow | None:
            return await self.store.get_txn(conn, session_id)

        row = await self.db.transaction(txn)
        if row is None or row.namespace != namespace:
            raise NotFound(f"session {session_id} is unknown: open a new one (OpenSession)")
        if row.end_reason:
            yield True, row.end_reason
            return
        waker = asyncio.Event()
        self._watchers.setdefault(session_id, set()).add(waker)
        finished = False
        try:
            yield False, ""
            while not stopping.is_set():
                await self._first(stopping, waker, 60.0)
                reason = self._known.get(session_id, (namespace, ""))[1]
                if reason:
                    finished = True
                    yield True, reason
                    return
        finally:
            watchers = self._watchers.get(session_id)
            if watchers is not None:
                watchers.discard(waker)
                if not watchers:
                    del self._watchers[session_id]
            if not finished and not stopping.is_set():
                task = asyncio.create_task(self._detached(namespace, session_id))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _detached(self, namespace: str, session_id: str) -> None:
        async def txn(conn: Conn) -> None:
            await self.store.shorten_txn(conn, namespace, session_id, 2 * self.heartbeat_seconds)

        try:
            await self.db.transaction(txn)
        except Exception as exc:  # noqa: BLE001 - the grace then applies in full
            log.warning("could not shorten a detached session", extra={"session": session_id, "error": str(exc)})

    async def close(self, namespace: str, session_id: str) -> SessionRow:
        session_id = _session_id(session_id)
        pending = self._take_pending()

        async def txn(conn: Conn) -> tuple[Learned, Ended | None, SessionRow | None]:
            late = await self.store.learn_txn(conn, [(ns, owner, sid) for (ns, owner), sid in pending.items()])
            ended = await self.store.close_txn(conn, namespace, session_id)
            return late, ended, await self.store.get_txn(conn, session_id)

        late, ended, row = await self._with_pending(pending, txn)
        self._freed_late(late, pending)
        if row is None or row.namespace != namespace:
            raise NotFound(f"session {session_id} is unknown")
        self._known[session_id] = (namespace, row.end_reason)
        if ended is not None:
            self._ended([ended], "closed")
        return row

    async def list_sessions(self, namespace: str, *, page_size: int) -> list[SessionRow]:
        limit = validation.page_size(page_size)

        async def txn(conn: Conn) -> list[SessionRow]:
            return await self.store.list_txn(conn, namespace, limit=limit)

        return await self.db.transaction(txn)

    async def holders(self, namespace: str, owners: list[str]) -> dict[str, SessionRow]:
        """The session each lease owner ran in (for the console and the CLI)."""

        async def txn(conn: Conn) -> dict[str, SessionRow]:
            return await self.store.holders_txn(conn, namespace, owners)

        return await self.db.transaction(txn) if owners else {}

    # --- what every call that carries a session goes through --------------------------------------------

    async def admit(self, namespace: str, session_id: str) -> None:
        """Refuses a call that carries an ended or unknown session (fencing); lets a live one through."""
        known = self._known.get(session_id)
        if known is None:
            _session_id(session_id)

            async def txn(conn: Conn) -> SessionRow | None:
                return await self.store.get_txn(conn, session_id)

            row = await self.db.transaction(txn)
            if row is None or row.namespace != namespace:
                metrics.SESSION_REFUSALS.inc()
                raise FailedPrecondition(f"session {session_id} is unknown to this sidecar's database: the n8n "
                                         "process opens a new session; this call changed nothing")
            known = (row.namespace, row.end_reason)
            self._known[session_id] = known
        if known[0] != namespace:
            metrics.SESSION_REFUSALS.inc()
            raise FailedPrecondition(f"session {session_id} belongs to another namespace; this call changed nothing")
        if known[1]:
            metrics.SESSION_REFUSALS.inc()
            why = ("it was closed" if known[1] == "closed" else
                   f"this n8n process sent no heartbeat for {self.grace_seconds:g} s")
            raise FailedPrecondition(f"session ended: {why}, so its leases were freed and its instances may have "
                                     f"been resumed by another execution; this call changed nothing "
                                     f"(session {session_id})")

    async def learn(self, namespace: str, owners: Sequence[str], session_id: str) -> None:
        """Records that these owners (execution ids, key holders, claim tokens) run in this session, before the call
        that named them answers: a lease is never out in the world without the session it ends with. A sidecar
        killed right after answering, or a session another replica ends meanwhile, would otherwise leave the lease
        to its ceiling (30 minutes by default). Owners recorded lately cost nothing; concurrent calls share one
        transaction. When the database fails here the owners stay pending for the next sweep, and the call, whose
        own work committed, answers as it would have."""
        now = time.monotonic()
        new = []
        for owner in owners:
            if not owner:
                continue
            key = (namespace, owner)
            seen = self._learned.get(key)
            if seen is not None and seen[0] == session_id and now - seen[1] < _RELEARN_SECONDS:
                continue
            self._pending[key] = session_id
            new.append(key)
        if not new:
            return
        async with self._recording:
            if not any(key in self._pending for key in new):
                return  # a transaction that ran while this call waited recorded them
            try:
                await self._record(self._take_pending())
            except Exception as exc:  # noqa: BLE001 - kept pending: the next sweep records them
                log.warning("could not record the owners of a call; the next sweep tries again",
                            extra={"session": session_id, "error": str(exc)})

    async def _record(self, pending: dict[tuple[str, str], str]) -> None:
        owners = [(ns, owner, sid) for (ns, owner), sid in pending.items()]

        async def learn(conn: Conn) -> Learned:
            return await self.store.learn_txn(conn, owners)

        if self.store.one_statement_learn:
            # One round trip instead of a transaction's four; the rare owner whose session had ended meanwhile
            # is recorded again in learn_txn's transaction, which frees its leases.
            recorded = await self._with_pending(pending, lambda conn: self.store.learn_single(conn, owners),
                                                single=True)
            if recorded:
                return
        freed = await self._with_pending(pending, learn)
        self._freed_late(freed, pending)

    def ended_here(self, namespace: str, session_id: str) -> bool:
        """Whether this replica knows the session ended (a stream of it stops after its current item)."""
        known = self._known.get(session_id)
        return known is not None and known[0] == namespace and bool(known[1])

    # --- the sweep --------------------------------------------------------------------------------------

    @property
    def judging(self) -> bool:
        """Whether this replica has served long enough, since it started or since its database answered again
        after an outage, to judge sessions (see the module's docstring)."""
        return not self._outage and time.monotonic() - self._started >= self.grace_seconds + self.heartbeat_seconds

    async def sweep(self) -> list[Ended]:
        """One sweep: records the owners seen, ends silent sessions, and learns what other replicas ended."""
        pending = self._take_pending()
        judging = self.judging
        since = self._ended_seen_until

        async def txn(conn: Conn) -> tuple[Learned, list[Ended], list[SessionRow], int, datetime]:
            late = await self.store.learn_txn(conn, [(ns, owner, sid) for (ns, owner), sid in pending.items()])
            # A sweep that could not reach the database for a while (it waited out an outage in its retries, or
            # the ones before it failed): heartbeats could not be recorded meanwhile either, so nobody is judged.
            if time.monotonic() - self._last_swept > self._outage_after:
                self._outage = True
            ended = await self.store.expire_txn(conn, limit=_EXPIRE_BATCH) if judging and not self._outage else []
            now = await self.store.now_txn(conn)
            # Overlap the previous look by two grace periods: another replica's commit may land late.
            others = await self.store.ended_since_txn(
                conn, (since if since is not None else now) - timedelta(seconds=2 * self.grace_seconds))
            return late, ended, others, await self.store.alive_count_txn(conn), now

        try:
            late, ended, others, alive, now = await self._with_pending(pending, txn)
        except Exception:
            self._outage = True  # no heartbeat can be recorded now: judge nobody until they could be again
            raise
        self._last_swept = time.monotonic()
        if self._outage:
            self._outage = False
            self._started = self._last_swept
            log.info("session sweep works again; sessions are judged again after one grace and one heartbeat",
                     extra={"grace_seconds": self.grace_seconds})
        self._freed_late(late, pending)
        stamp = time.monotonic()
        self._ended_seen_until = now
        metrics.SESSIONS_ALIVE.set(alive)
        if ended:
            self._ended(ended, "expired")
        wake = False
        for row in others:
            previous = self._known.get(row.session_id)
            if (previous is None or not previous[1]) and row.leases_freed:
                wake = True
            self._known[row.session_id] = (row.namespace, row.end_reason)
            self._signal(row.session_id)
        if wake:
            self._wake()
        if stamp - self._last_prune >= _PRUNE_EVERY_SECONDS:
            self._last_prune = stamp
            await self.prune()
        return ended

    def _take_pending(self) -> dict[tuple[str, str], str]:
        pending, self._pending = self._pending, {}
        return pending

    async def _with_pending(self, pending: dict[tuple[str, str], str], fn: Callable[[Conn], Awaitable[T]], *,
                            single: bool = False) -> T:
        """Runs a transaction (`single`: one statement) that records `pending` owners: remembered as recorded once
        it commits, else kept."""
        try:
            result = await (self.db.single(fn) if single else self.db.transaction(fn))
        except BaseException:
            for key, sid in pending.items():  # recorded at the next sweep
                self._pending.setdefault(key, sid)
            raise
        stamp = time.monotonic()
        for key, sid in pending.items():
            self._learned[key] = (sid, stamp)
            self._learned.move_to_end(key)
        while len(self._learned) > _LEARNED_MAX:
            self._learned.popitem(last=False)
        return result

    async def prune(self) -> None:
        async def txn(conn: Conn) -> None:
            await self.store.prune_txn(conn, ended_seconds=ENDED_KEEP_SECONDS, owner_seconds=OWNER_KEEP_SECONDS)

        await self.db.transaction(txn)
        if len(self._known) > _LEARNED_MAX:
            self._known.clear()  # re-read from the database on the next call of each session

    async def run(self, stopping: asyncio.Event) -> None:
        """The sweep every heartbeat interval until `stopping` is set; a failed sweep is retried at the next."""
        while not stopping.is_set():
            try:
                await asyncio.wait_for(stopping.wait(), timeout=self.heartbeat_seconds)
                return
            except TimeoutError:
                pass
            try:
                await self.sweep()
            except Exception as exc:  # noqa: BLE001 - a database blip: the next sweep tries again
                log.warning("session sweep failed; retrying", extra={"error": str(exc)})

    def _ended(self, ended: list[Ended], reason: str) -> None:
        metrics.SESSIONS_ENDED.labels(reason).inc(len(ended))
        freed = 0
        for e in ended:
            self._known[e.session_id] = (e.namespace, reason)
            self._signal(e.session_id)
            metrics.LEASES_FREED.labels("instance").inc(e.instances_freed)
            metrics.LEASES_FREED.labels("key").inc(e.keys_freed)
            freed += e.instances_freed
            log.info("session ended", extra={"session": e.session_id, "reason": reason,
                                             "instances_freed": e.instances_freed, "keys_freed": e.keys_freed})
        if freed:
            self._wake()

    def _freed_late(self, learned: Learned, pending: dict[tuple[str, str], str]) -> None:
        """Sessions the recording found ended are known as ended here (their calls are refused from now on), and
        leases freed because their owners were recorded against such a session wake the Resume Triggers."""
        namespaces = {sid: ns for (ns, _), sid in pending.items()}
        for sid, reason in learned.ended.items():
            if sid in namespaces:
                self._known[sid] = (namespaces[sid], reason)
                self._signal(sid)
        if not learned.freed:
            return
        metrics.LEASES_FREED.labels("late").inc(learned.freed)
        log.info("leases of a call made in a session that had ended were freed",
                 extra={"sessions": sorted(learned.ended), "freed": learned.freed})
        self._wake()

    # --- waking the Resume Trigger streams --------------------------------------------------------------

    def _signal(self, session_id: str) -> None:
        for waker in self._watchers.get(session_id, ()):
            waker.set()

    @staticmethod
    async def _first(stopping: asyncio.Event, other: asyncio.Event, timeout: float) -> None:
        """Returns when either event is set, or after `timeout`."""
        stop = asyncio.ensure_future(stopping.wait())
        woken = asyncio.ensure_future(other.wait())
        try:
            await asyncio.wait({stop, woken}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            woken.cancel()

    def _wake(self) -> None:
        for waker in self._wakers:
            waker.set()

    def wake_streams(self) -> None:
        """This replica's Resume Trigger streams claim now: another service made instances due (a limit)."""
        self._wake()

    async def wait_for_freed(self, timeout: float, stopping: asyncio.Event) -> None:
        """Sleeps up to `timeout`, less when leases are freed (here or by another replica) or at shutdown."""
        waker = asyncio.Event()
        self._wakers.add(waker)
        try:
            await self._first(stopping, waker, timeout)
        finally:
            self._wakers.discard(waker)


def _session_id(value: str) -> str:
    if not value:
        raise InvalidArgument("session_id is required")
    if len(value) > 64 or not value.isascii() or not value.replace("-", "").isalnum():
        raise InvalidArgument("session_id is not a session id OpenSession returned")
    return value
