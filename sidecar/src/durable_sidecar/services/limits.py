"""Flow control across every n8n process and worker (issue 43): concurrency per key, rate limits, debounce.

The rules live here (rate limits in services/limit_rates.py, the shared vocabulary in
services/limit_terms.py); stores/limits.py holds their SQL, once for both backends.
Each call is one transaction that locks the caller's instance, then the
(limit, key) row, so racing callers on any number of replicas take turns on
a key. An item over a limit is an instance parked like a scheduled wake-up
(lease released); the Resume Trigger hands it out when its turn comes and the
resumed execution calls again, getting the answer its turn earned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TypeVar

from .. import metrics, validation
from ..domain import Instance, InstanceRef, InstanceStatus, Page
from ..errors import InvalidArgument
from ..stores.base import Conn, Database
from ..stores.instances import InstanceStore
from ..stores.limits import Entry, KeyState, LimitId, LimitRow, LimitStore
from .instance_rows import check_ref, locked_instance
from .limit_rates import RateLimiter
from .limit_terms import MAX_PERIOD_MS, Answer, Keep, Outcome, Over, Released, SectionRate, check_call, leased

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class _AfterCommit:
    """What a transaction did that others must hear of once it committed."""

    due: bool = False  # it made an instance due now: wake the Resume Trigger streams
    granted: set[LimitId] = field(default_factory=set)  # keys whose waiters got places: wake in-process waiters


_after: ContextVar[_AfterCommit | None] = ContextVar("limits_after_commit", default=None)

MAX_HOLDERS = 10_000
# AcquireSlot's wait in the caller's process for a place (it holds the RPC open: below the nodes' deadline).
MAX_ACQUIRE_WAIT_MS = 60_000
# How often a call waiting here for a place looks again (a place given by another replica).
IN_PROCESS_POLL_SECONDS = 1.0
# A waiter for a place is parked with this wake-up as a safety net: woken without a place, it parks again
# (keeping its turn). Places are handed out at once by ReleaseSlot and within SWEEP_SECONDS otherwise.
WAITER_RECHECK = timedelta(hours=1)
SWEEP_SECONDS = 1.0
_SWEEP_KEYS = 100
# Entries of finished instances, and idle keys, are dropped this long after.
PRUNE_AFTER = timedelta(hours=1)
_PRUNE_EVERY_SECONDS = 600.0
_PRUNE_BATCH = 1000
# Instances remembered as having asked this replica for a place (finished() hands their places on at once).
_ENTERED_MAX = 100_000


def holds(e: Entry, now: datetime) -> bool:
    """Whether a holder entry still holds its place: its instance runs, and the execution it names holds the
    lease; a waiter given a place and not yet resumed holds it while parked or once an execution leases it."""
    if e.status is not InstanceStatus.RUNNING or e.suspended:
        return False
    lease_live = e.lease_expires_at is not None and e.lease_expires_at > now
    if e.owner:
        return e.lease_owner == e.owner and lease_live
    return (not e.lease_owner and e.wake_at is not None) or lease_live


def still_waits(e: Entry) -> bool:
    return e.status is InstanceStatus.RUNNING and not e.suspended


class LimitService:
    """AcquireSlot, ReleaseSlot, Throttle, Debounce and ListLimitKeys; the sweep that hands out freed places."""

    def __init__(self, db: Database, instances: InstanceStore, store: LimitStore) -> None:
        self.db = db
        self.instances = instances
        self.store = store
        # Called after a transaction that made instances due now (a place given, a debounce decided), or parked
        # one until a time (a rate limit's slot): this replica's Resume Trigger streams claim at once, or at that
        # time, instead of at their next poll (wiring.py).
        self.on_due: Callable[[], None] = lambda: None
        # AcquireSlot calls waiting in this process for a place, by key (set when a place is given here).
        self._waiters: dict[LimitId, set[asyncio.Event]] = {}
        # Instances that asked this replica for a place (newest last): when one finishes, its places go to the
        # next waiters at once (finished()); any other freed place within the sweep's interval.
        self._entered: OrderedDict[InstanceRef, None] = OrderedDict()
        self._handing_on: set[asyncio.Task[None]] = set()
        # Rate limits (services/limit_rates.py), in this service's transactions and parking.
        self.rates = RateLimiter(store, instances, self._run, self._park)
    async def _run(self, txn: Callable[[Conn], Awaitable[T]]) -> T:
        """One transaction; then wakes the Resume Trigger streams when it made an instance due now, and the calls
        waiting here for a place on a key it gave places on."""
        after = _AfterCommit()
        token = _after.set(after)
        try:
            result = await self.db.transaction(txn)
        finally:
            _after.reset(token)
        if after.due:
            self.on_due()
        for limit in after.granted:
            for event in self._waiters.get(limit, ()):
                event.set()
        return result

    # --- shared steps ------------------------------------------------------------------------------------

    async def _park(self, conn: Conn, ref: InstanceRef, *, now: datetime, until: datetime, kind: str,
                    detail: str, actor: str) -> Instance:
        """Releases the instance's lease and parks it until `until` (the Resume Trigger hands it out then)."""
        inst = await self.instances.update_txn(conn, ref, now=now, lease_owner="", lease_expires_at=None,
                                               wake_at=until, wake_reason="", awaited_event="", wait_outcome="")
        await self.instances.add_event_txn(conn, ref, kind, actor=actor, detail=detail)
        after = _after.get()
        if after is not None:
            after.due = True  # the Resume Trigger's streams plan their next claim for this wake-up
        return inst

    async def _wake(self, conn: Conn, ref: InstanceRef, *, now: datetime, at: datetime, kind: str,
                    detail: str) -> None:
        """Moves a parked instance's wake-up to `at` (now: due at once); one an execution leases is left alone
        (its next call reads its entry)."""
        inst = await self.instances.get_txn(conn, ref, for_update=True)
        if inst is None or inst.status is not InstanceStatus.RUNNING or inst.lease_owner:
            return
        await self.instances.update_txn(conn, ref, now=now, wake_at=at)
        after = _after.get()
        if at <= now and after is not None:
            after.due = True
        await self.instances.add_event_txn(conn, ref, kind, detail=detail)

    async def _settle(self, conn: Conn, limit: LimitId, capacity: int, now: datetime,
                      entries: list[Entry]) -> tuple[list[Entry], list[Entry], int]:
        """Drops holders that no longer hold and waiters whose instance stopped, hands free places to the oldest
        waiters (waking them); (holders, waiters, how many were granted)."""
        holders: list[Entry] = []
        waiters: list[Entry] = []
        for e in entries:
            if e.state == "holding" and holds(e, now):
                holders.append(e)
            elif e.state == "waiting" and still_waits(e):
                waiters.append(e)
            else:
                await self.store.delete_txn(conn, e.id)
        granted = 0
        while waiters and len(holders) < capacity:
            w = waiters.pop(0)
            await self.store.update_txn(conn, w.id, state="holding", owner="", sequence=w.sequence, at=None)
            ref = w.ref(limit.namespace)
            await self._wake(conn, ref, now=now, at=now, kind="limit_granted",
                             detail=f"concurrency {limit.name} [{limit.key}]: a place is free")
            metrics.LIMIT_WAIT_SECONDS.labels("concurrency").observe(max(0.0, (now - w.created_at).total_seconds()))
            holders.append(replace(w, state="holding", owner=""))
            granted += 1
        after = _after.get()
        if granted and after is not None:
            after.granted.add(limit)
        return holders, waiters, granted

    # --- concurrency ---------------------------------------------------------------------------------------

    async def acquire(self, ref: InstanceRef, *, execution_id: str, limit_name: str, limit_key: str,
                      max_holders: int, over: Over, max_wait_ms: int = 0, rate: SectionRate | None = None) -> Answer:
        """A place, or a turn in the queue. With max_wait_ms, a caller without a place waits here (its execution
        keeps the lease, its turn is kept in the queue) until it is given one, and only then is parked. With a
        rate, a place held then takes a slot of the rate of the same name and key, as Throttle would (one call
        where a section and a rate limit took two)."""
        check_call(ref, execution_id, limit_name, limit_key)
        if not 0 <= max_wait_ms <= MAX_ACQUIRE_WAIT_MS:
            raise InvalidArgument(f"max_wait_ms must be 0 to {MAX_ACQUIRE_WAIT_MS}, got {max_wait_ms}")
        call = None
        if rate is not None:  # its terms first: a request with a bad rate is refused naming the rate's field
            if over is Over.REFUSE:
                raise InvalidArgument("a rate inside the section needs over_limit WAIT: an item refused its slot "
                                      "would hold its place; use Throttle after the section to refuse")
            call = self.rates.rate_call(ref, execution_id=execution_id, limit_name=limit_name, limit_key=limit_key,
                                        limit=rate.limit, period_ms=rate.period_ms, burst=rate.burst,
                                        max_wait_ms=max_wait_ms, over=Over.WAIT, calls=rate.calls)
        if not 1 <= max_holders <= MAX_HOLDERS:
            raise InvalidArgument(f"max_holders must be 1 to {MAX_HOLDERS}, got {max_holders}")
        placed = await self._acquire(ref, execution_id, LimitId(ref.namespace, "concurrency", limit_name, limit_key),
                                     max_holders, over, max_wait_ms)
        if call is None or placed.outcome is not Outcome.ACQUIRED:
            return placed
        slot = await self.rates.throttle_call(call)
        return Answer(Outcome.ACQUIRED if slot.outcome is Outcome.ALLOWED else slot.outcome, slot.instance,
                      holders=placed.holders, waiters=placed.waiters, wait_ms=slot.wait_ms, at=slot.at)

    async def _acquire(self, ref: InstanceRef, execution_id: str, limit: LimitId, max_holders: int, over: Over,
                       max_wait_ms: int) -> Answer:
        self._entered[ref] = None
        self._entered.move_to_end(ref)
        if len(self._entered) > _ENTERED_MAX:
            self._entered.popitem(last=False)

        def attempt(park: bool) -> Callable[[Conn], Awaitable[Answer]]:
            async def txn(conn: Conn) -> Answer:
                return await self._acquire_txn(conn, ref, limit, execution_id, max_holders, over, park=park)
            return txn

        if max_wait_ms == 0 or over is Over.REFUSE:
            return await self._run(attempt(park=True))
        event = asyncio.Event()
        self._waiters.setdefault(limit, set()).add(event)
        try:
            answer = await self._run(attempt(park=False))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + max_wait_ms / 1000
            while answer.outcome is Outcome.WAITING and loop.time() < deadline:
                # Woken when a place is given on this replica; another replica's grants are seen within a poll.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=min(IN_PROCESS_POLL_SECONDS,
                                                                     max(0.0, deadline - loop.time())))
                event.clear()
                answer = await self._run(attempt(park=False))
            if answer.outcome is Outcome.WAITING:
                answer = await self._run(attempt(park=True))
            return answer
        finally:
            waiting = self._waiters.get(limit)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[limit]

    async def _acquire_txn(self, conn: Conn, ref: InstanceRef, limit: LimitId, execution_id: str, max_holders: int,
                           over: Over, *, park: bool) -> Answer:
        locked = await locked_instance(self.instances, conn, ref)
        _, now = await self._lock(conn, limit, capacity=max_holders)
        inst = leased(locked, ref, execution_id, now)
        holders, waiters, _ = await self._settle(conn, limit, max_holders, now,
                                                 await self.store.entries_txn(conn, limit))
        mine = next((e for e in holders + waiters if (e.workflow_id, e.instance_key) == (ref.workflow_id,
                                                                                           ref.instance_key)), None)
        if mine is not None and mine.state == "holding":
            if mine.owner != execution_id:
                await self.store.update_txn(conn, mine.id, state="holding", owner=execution_id,
                                            sequence=inst.last_sequence, at=None)
            metrics.LIMIT_CALLS.labels("concurrency", "acquired").inc()
            return Answer(Outcome.ACQUIRED, inst, holders=len(holders), waiters=len(waiters))
        if mine is None and len(holders) < max_holders and not waiters:
            await self.store.insert_txn(conn, limit, ref, state="holding", owner=execution_id,
                                        sequence=inst.last_sequence, at=None, now=now)
            metrics.LIMIT_CALLS.labels("concurrency", "acquired").inc()
            return Answer(Outcome.ACQUIRED, inst, holders=len(holders) + 1, waiters=len(waiters))
        if mine is None and over is Over.REFUSE:
            metrics.LIMIT_CALLS.labels("concurrency", "busy").inc()
            return Answer(Outcome.BUSY, inst, holders=len(holders), waiters=len(waiters))
        if mine is None:
            await self.store.insert_txn(conn, limit, ref, state="waiting", owner="", sequence=inst.last_sequence,
                                        at=None, now=now)
            position = len(waiters) + 1
            waiters_after = position
        else:
            position = waiters.index(mine) + 1
            waiters_after = len(waiters)
        if not park:  # the caller waits for its turn in its own process, keeping the lease
            return Answer(Outcome.WAITING, inst, holders=len(holders), waiters=waiters_after, position=position)
        parked = await self._park(conn, ref, now=now, until=now + WAITER_RECHECK, kind="limit_waiting",
                                  actor=execution_id, detail=f"concurrency {limit.name} [{limit.key}]: "
                                  f"{len(holders)} of {max_holders} places held, number {position} in the queue")
        metrics.LIMIT_CALLS.labels("concurrency", "waiting").inc()
        return Answer(Outcome.WAITING, parked, holders=len(holders), waiters=waiters_after, position=position)

    async def release(self, ref: InstanceRef, *, execution_id: str, limit_name: str, limit_key: str) -> Released:
        """Leaves the section (or the queue) of the key, or of every key of the limit the instance is at when
        limit_key is empty; the freed places go to the oldest waiters. The figures are the last key's."""
        check_ref(ref)
        validation.identifier("execution_id", execution_id, required=False)
        validation.identifier("limit_name", limit_name)
        validation.identifier("limit_key", limit_key, required=False)

        async def txn(conn: Conn) -> Released:
            await locked_instance(self.instances, conn, ref)
            keys = [limit_key] if limit_key else await self.store.keys_of_txn(conn, ref, "concurrency", limit_name)
            released, granted, holders, waiters = False, 0, 0, 0
            for key in sorted(keys):
                limit = LimitId(ref.namespace, "concurrency", limit_name, key)
                row, now = await self._lock(conn, limit)
                entries = await self.store.entries_txn(conn, limit)
                mine = next((e for e in entries if (e.workflow_id, e.instance_key) == (ref.workflow_id,
                                                                                         ref.instance_key)), None)
                if mine is not None:
                    released = True
                    await self.store.delete_txn(conn, mine.id)
                    entries.remove(mine)
                    if mine.state == "waiting":
                        await self.instances.add_event_txn(conn, ref, "limit_left", actor=execution_id,
                                                           detail=f"concurrency {limit_name} [{key}]: left the queue")
                live, queued, n = await self._settle(conn, limit, row.capacity or 1, now, entries)
                granted, holders, waiters = granted + n, len(live), len(queued)
            return Released(released, granted, holders, waiters)

        return await self._run(txn)

    async def _lock(self, conn: Conn, limit: LimitId, *,
                    capacity: int | None = None) -> tuple[LimitRow, datetime]:
        row, now = await self.store.lock_txn(conn, limit)
        if capacity is not None and row.capacity != capacity:
            await self.store.set_txn(conn, limit, now=now, capacity=capacity, next_at=row.next_at,
                                     burst_started_at=row.burst_started_at)
        return row, now

    def finished(self, ref: InstanceRef) -> None:
        """After an instance reached a final status (its last Save completed it; Complete, Fail or Cancel): the
        places it held through this replica go to the next waiters now, after the caller's reply, instead of at
        the sweep's next pass (up to DURABLE_LIMIT_SWEEP_INTERVAL_SECONDS later). Nothing for an instance that
        never asked this replica for a place."""
        if ref not in self._entered:
            return
        del self._entered[ref]
        task = asyncio.get_running_loop().create_task(self._hand_on(ref))
        self._handing_on.add(task)
        task.add_done_callback(self._handing_on.discard)

    async def _hand_on(self, ref: InstanceRef) -> None:
        async def txn(conn: Conn) -> int:
            granted = 0
            for limit in await self.store.instance_keys_txn(conn, ref, "concurrency"):
                row, now = await self.store.lock_txn(conn, limit)
                _, _, n = await self._settle(conn, limit, row.capacity or 1, now,
                                             await self.store.entries_txn(conn, limit))
                granted += n
            return granted

        try:
            await self._run(txn)
        except Exception as exc:  # noqa: BLE001 - the sweep hands the places on within its interval
            log.warning("handing on a finished instance's places failed; the limit sweep will",
                        extra={"workflow_id": ref.workflow_id, "instance_key": ref.instance_key, "error": str(exc)})

    async def sweep_once(self) -> int:
        """Hands places freed without a ReleaseSlot (a holder finished, died or parked) to waiters; how many."""
        keys = await self.db.transaction(lambda conn: self.store.waiting_keys_txn(conn, limit=_SWEEP_KEYS))
        granted = 0
        for limit in keys:
            async def txn(conn: Conn, limit: LimitId = limit) -> int:
                row, now = await self.store.lock_txn(conn, limit)
                _, _, n = await self._settle(conn, limit, row.capacity or 1, now,
                                             await self.store.entries_txn(conn, limit))
                return n
            granted += await self._run(txn)
        return granted

    async def run_sweeper(self, stopping: asyncio.Event, *, interval_seconds: float = SWEEP_SECONDS) -> None:
        """sweep_once every interval (the first one interval after start-up), and prune now and then."""
        loop = asyncio.get_running_loop()
        last_prune = loop.time()
        while not stopping.is_set():
            try:
                await asyncio.wait_for(stopping.wait(), timeout=interval_seconds)
                return
            except TimeoutError:
                pass
            try:
                await self.sweep_once()
                if loop.time() - last_prune >= _PRUNE_EVERY_SECONDS:
                    last_prune = loop.time()
                    await self.prune()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the database is away: try again next round
                log.warning("limit sweep failed", extra={"error": str(exc)})

    async def prune(self) -> int:
        async def txn(conn: Conn) -> int:
            now = await self.store.now_txn(conn)
            return await self.store.prune_txn(conn, before=now - PRUNE_AFTER, limit=_PRUNE_BATCH)
        return await self._run(txn)

    # --- rate ----------------------------------------------------------------------------------------------

    async def throttle(self, ref: InstanceRef, *, execution_id: str, limit_name: str, limit_key: str, limit: int,
                       period_ms: int, burst: int, max_wait_ms: int, over: Over, calls: int = 1) -> Answer:
        return await self.rates.throttle(ref, execution_id=execution_id, limit_name=limit_name, limit_key=limit_key,
                                         limit=limit, period_ms=period_ms, burst=burst, max_wait_ms=max_wait_ms,
                                         over=over, calls=calls)

    # --- debounce ------------------------------------------------------------------------------------------

    async def debounce(self, ref: InstanceRef, *, execution_id: str, limit_name: str, limit_key: str,
                       quiet_ms: int, max_wait_ms: int, keep: Keep) -> Answer:
        check_call(ref, execution_id, limit_name, limit_key)
        if not 1 <= quiet_ms <= MAX_PERIOD_MS:
            raise InvalidArgument(f"quiet_ms must be 1 to {MAX_PERIOD_MS} (one day), got {quiet_ms}")
        if max_wait_ms and not quiet_ms <= max_wait_ms <= MAX_PERIOD_MS:
            raise InvalidArgument(f"max_wait_ms must be 0 (no maximum) or quiet_ms ({quiet_ms}) to {MAX_PERIOD_MS}, "
                                  f"got {max_wait_ms}")
        key = LimitId(ref.namespace, "debounce", limit_name, limit_key)
        quiet = timedelta(milliseconds=quiet_ms)
        longest = timedelta(milliseconds=max_wait_ms) if max_wait_ms else None
        where = f"debounce {limit_name} [{limit_key}]"

        async def txn(conn: Conn) -> Answer:
            locked = await locked_instance(self.instances, conn, ref)
            row, now = await self.store.lock_txn(conn, key)
            inst = leased(locked, ref, execution_id, now)
            entries = await self.store.entries_txn(conn, key)
            mine = next((e for e in entries if (e.workflow_id, e.instance_key) == (ref.workflow_id,
                                                                                     ref.instance_key)), None)
            if mine is not None and mine.sequence != inst.last_sequence:
                # A decision of an earlier pass (the instance saved since): this is a new arrival.
                await self.store.delete_txn(conn, mine.id)
                entries.remove(mine)
                mine = None
            if mine is not None and mine.state in ("run", "debounced"):
                return Answer(Outcome(mine.state), inst)
            candidate = next((e for e in entries if e.state == "candidate"), None)
            open_burst = row.burst_started_at is not None and candidate is not None
            if open_burst and row.next_at is not None and row.next_at <= now:
                # The burst ended: its candidate runs, and this call (if a new item) opens the next one.
                assert candidate is not None
                await self.store.update_txn(conn, candidate.id, state="run", owner="", sequence=candidate.sequence,
                                            at=None)
                self._decided("run", now, candidate)
                if candidate is mine:
                    await self.store.set_txn(conn, key, now=now, capacity=None, next_at=None, burst_started_at=None)
                    await self.instances.add_event_txn(conn, ref, "debounce_run", actor=execution_id,
                                                       detail=f"{where}: the burst was quiet; this item runs")
                    return Answer(Outcome.RUN, inst)
                await self._wake(conn, candidate.ref(ref.namespace), now=now, at=now, kind="debounce_run",
                                 detail=f"{where}: the burst was quiet; this item runs")
                open_burst = False
            if mine is not None:  # the open burst's candidate, called again before the burst ended
                deadline = row.next_at or now
                parked = await self._park(conn, ref, now=now, until=deadline, kind="debounce_waiting",
                                          actor=execution_id, detail=f"{where}: until {deadline.isoformat()}")
                return Answer(Outcome.WAITING, parked, at=deadline)
            started = row.burst_started_at if open_burst and row.burst_started_at is not None else now
            deadline = now + quiet
            if longest is not None and deadline > started + longest:
                deadline = started + longest
            await self.store.set_txn(conn, key, now=now, capacity=None, next_at=deadline, burst_started_at=started)
            if open_burst and candidate is not None and keep is Keep.FIRST:
                await self.store.insert_txn(conn, key, ref, state="debounced", owner="", sequence=inst.last_sequence,
                                            at=None, now=now)
                await self._wake(conn, candidate.ref(ref.namespace), now=now, at=deadline, kind="debounce_extended",
                                 detail=f"{where}: a later item arrived; the burst ends {deadline.isoformat()}")
                self._decided("debounced", now)
                await self.instances.add_event_txn(conn, ref, "debounced", actor=execution_id,
                                                   detail=f"{where}: the burst's first item runs")
                return Answer(Outcome.DEBOUNCED, inst)
            if open_burst and candidate is not None:  # keep LAST: the candidate so far is debounced
                await self.store.update_txn(conn, candidate.id, state="debounced", owner="",
                                            sequence=candidate.sequence, at=None)
                self._decided("debounced", now, candidate)
                await self._wake(conn, candidate.ref(ref.namespace), now=now, at=now, kind="debounced",
                                 detail=f"{where}: a later item of the burst runs")
            await self.store.insert_txn(conn, key, ref, state="candidate", owner="", sequence=inst.last_sequence,
                                        at=None, now=now)
            parked = await self._park(conn, ref, now=now, until=deadline, kind="debounce_waiting", actor=execution_id,
                                      detail=f"{where}: until {deadline.isoformat()}")
            metrics.LIMIT_CALLS.labels("debounce", "waiting").inc()
            return Answer(Outcome.WAITING, parked, at=deadline)

        return await self._run(txn)

    @staticmethod
    def _decided(outcome: str, now: datetime, entry: Entry | None = None) -> None:
        metrics.LIMIT_CALLS.labels("debounce", outcome).inc()
        if entry is not None:
            metrics.LIMIT_WAIT_SECONDS.labels("debounce").observe(max(0.0, (now - entry.created_at).total_seconds()))

    # --- reading -------------------------------------------------------------------------------------------

    async def list_keys(self, namespace: str, *, kind: str, limit_name: str, page: Page) -> tuple[list[KeyState], str]:
        """Keys with their entries; holders that no longer hold (their instance finished or its execution died,
        not yet swept) are left out of the entries and the counts."""
        validation.identifier("limit_name", limit_name, required=False)

        async def txn(conn: Conn) -> tuple[list[KeyState], str]:
            now = await self.store.now_txn(conn)
            keys, token = await self.store.list_txn(conn, namespace, kind=kind, name=limit_name, page=page)
            out = []
            for k in keys:
                live = [e for e in k.entries if not (e.state == "holding" and not holds(e, now))
                        and not (e.state == "waiting" and not still_waits(e))]
                counts = dict(k.counts)
                if sum(k.counts.values()) == len(k.entries):  # every entry read: count the live ones
                    counts = {state: sum(1 for e in live if e.state == state) for state in k.counts}
                out.append(replace(k, entries=live, counts=counts))
            return out, token

        return await self.db.transaction(txn)

    async def gauges(self) -> list[tuple[str, str, str, int]]:
        return await self.db.transaction(self.store.gauges_txn)
