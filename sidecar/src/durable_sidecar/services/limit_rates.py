"""Rate limits (issue 43): at most `limit` per `period` per key, spaced by the generic cell rate algorithm kept in
the key's row; an item whose slot is beyond its in-process wait is parked with its slot reserved. Throttle calls
of one key that arrive together are answered by one transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .. import metrics
from ..domain import Instance, InstanceRef
from ..errors import FailedPrecondition, InvalidArgument, NotFound
from ..stores.base import Conn
from ..stores.instances import InstanceStore
from ..stores.limits import LimitId, LimitStore
from .grouping import StatementGroups
from .instance_rows import locked_instance
from .limit_terms import MAX_PERIOD_MS, Answer, Outcome, Over, check_call, leased, ms

MAX_RATE = 1_000_000
MAX_IN_PROCESS_WAIT_MS = 300_000
# A parked rate-limited item is woken this much before its slot (at most its call's in-process wait): the
# resumed execution, which takes a moment to start (a queue-mode worker, under load a second or more), asks
# again before the slot and waits in its process until it, so its call goes out on time, not late among the
# next slots' calls (which would put more calls in some window of the API than the rate allows).
RATE_RESUME_LEAD = timedelta(seconds=2)
# Throttle calls of one key answered by one transaction at most.
_RATE_GROUP_MAX = 100


@dataclass(frozen=True)
class RateCall:
    """One Throttle call (or an Enter Section's rate), validated: what its transaction needs."""

    ref: InstanceRef
    execution_id: str
    key: LimitId
    spacing: timedelta
    tolerance: timedelta
    in_process: timedelta
    lead: timedelta
    over: Over
    calls: int
    # A reservation whose slot passed longer ago than this (the period) is not spent (its instance went on
    # without it, or came back too late to call on that slot within the rate): the call takes a new slot.
    stale: timedelta
    # Calls of one key and rate, which may share a transaction.
    group: str


def _gcra(next_at: datetime | None, now: datetime, call: RateCall) -> tuple[datetime, datetime]:
    """The generic cell rate algorithm on a key's row, for a call that stands for `calls` calls at one time (at
    most the burst): (the caller's slot, the row's next theoretical time). The slot is when all of them conform
    together, as the last would if they were spaced; they take `calls` emission intervals."""
    theoretical = max(next_at or now, now)
    return (max(now, theoretical + call.spacing * (call.calls - 1) - call.tolerance),
            theoretical + call.spacing * call.calls)


class RateLimiter:
    """Throttle: the key's row and its reservations in `store`; `run` is the limit service's transaction (which
    wakes what a commit made due) and `park` its parking of an instance until a time."""

    def __init__(self, store: LimitStore, instances: InstanceStore,
                 run: Callable[[Callable[[Conn], Awaitable[Any]]], Awaitable[Any]],
                 park: Callable[..., Awaitable[Instance]]) -> None:
        self.store = store
        self.instances = instances
        self._run = run
        self._park = park
        # Throttle calls of one key (and the same rate) arriving while one runs go to the database together: one
        # lock of the key's row and one commit for all of them (a key's callers otherwise take turns on it).
        self._rate_groups: StatementGroups[RateCall, Answer] = StatementGroups(
            lambda _group, call: self._throttle_alone(call), self._throttle_many,
            flushers=1, max_items=_RATE_GROUP_MAX)


    async def throttle(self, ref: InstanceRef, *, execution_id: str, limit_name: str, limit_key: str, limit: int,
                       period_ms: int, burst: int, max_wait_ms: int, over: Over, calls: int = 1) -> Answer:
        return await self.throttle_call(self.rate_call(
            ref, execution_id=execution_id, limit_name=limit_name, limit_key=limit_key, limit=limit,
            period_ms=period_ms, burst=burst, max_wait_ms=max_wait_ms, over=over, calls=calls))

    def rate_call(self, ref: InstanceRef, *, execution_id: str, limit_name: str, limit_key: str, limit: int,
                  period_ms: int, burst: int, max_wait_ms: int, over: Over, calls: int = 1) -> RateCall:
        """A Throttle call checked (InvalidArgument for what it would refuse), before anything is written: an
        Enter Section with a rate checks its rate before it takes a place."""
        check_call(ref, execution_id, limit_name, limit_key)
        if not 0 <= max_wait_ms <= MAX_IN_PROCESS_WAIT_MS:
            raise InvalidArgument(f"max_wait_ms must be 0 to {MAX_IN_PROCESS_WAIT_MS}, got {max_wait_ms}")
        if not 1 <= limit <= MAX_RATE:
            raise InvalidArgument(f"limit must be 1 to {MAX_RATE}, got {limit}")
        if not 1 <= period_ms <= MAX_PERIOD_MS:
            raise InvalidArgument(f"period_ms must be 1 to {MAX_PERIOD_MS} (one day), got {period_ms}")
        burst = burst or 1
        if not 1 <= burst <= limit:
            raise InvalidArgument(f"burst must be 1 to limit ({limit}), got {burst}")
        calls = calls or 1
        if not 1 <= calls <= burst:
            raise InvalidArgument(f"calls must be 1 to burst ({burst}), got {calls}: that many calls at one time go "
                                  f"beyond the rate; raise the burst to at least {calls}, or send one item per "
                                  "instance through the limit")
        spacing = timedelta(milliseconds=period_ms) / limit
        in_process = timedelta(milliseconds=max_wait_ms)
        # Parked past the in-process wait, the item wakes before its slot by at most that wait, so its next call
        # is answered ALLOWED with the rest of the wait (never parked again).
        group = "\x00".join((ref.namespace, limit_name, limit_key, str(limit), str(period_ms), str(burst),
                              str(max_wait_ms), over.value))
        return RateCall(ref, execution_id, LimitId(ref.namespace, "rate", limit_name, limit_key), spacing,
                        spacing * (burst - 1), in_process, min(RATE_RESUME_LEAD, in_process), over, calls,
                        timedelta(milliseconds=period_ms), group)

    async def throttle_call(self, call: RateCall) -> Answer:
        return await self._rate_groups.write(call.group, call)

    async def _throttle_alone(self, call: RateCall) -> Answer:
        async def txn(conn: Conn) -> Answer:
            return await self._throttle_txn(conn, call)
        answer: Answer = await self._run(txn)
        return answer

    async def _throttle_txn(self, conn: Conn, call: RateCall) -> Answer:
        """One Throttle call in its own transaction: every case (a reservation spent or parked again, a slot now
        or soon, a refusal, a new reservation)."""
        ref, key, where = call.ref, call.key, f"rate {call.key.name} [{call.key.key}]"
        locked = await locked_instance(self.instances, conn, ref)
        row, now = await self.store.lock_txn(conn, key)
        inst = leased(locked, ref, call.execution_id, now)
        mine = await self.store.entry_of_txn(conn, key, ref)
        if mine is not None and mine.at is not None and now - mine.at <= call.stale:
            # The slot reserved when this instance was parked: spent now, once, by its next call on the key,
            # whatever it saved on its way back (a resumed order saves its lines again before the limit; a newer
            # checkpoint used to void the reservation, and the order was parked again, for ever).
            if mine.at - now <= call.in_process:
                await self.store.delete_txn(conn, mine.id)
                metrics.LIMIT_CALLS.labels("rate", "allowed").inc()
                metrics.LIMIT_WAIT_SECONDS.labels("rate").observe(max(0.0, (mine.at - mine.created_at)
                                                                      .total_seconds()))
                return Answer(Outcome.ALLOWED, inst, wait_ms=ms(mine.at - now), at=mine.at)
            parked = await self._park(conn, ref, now=now, until=mine.at - call.lead, kind="limit_waiting",
                                      actor=call.execution_id, detail=f"{where}: slot at {mine.at.isoformat()}")
            return Answer(Outcome.WAITING, parked, at=mine.at)
        if mine is not None:  # a slot long past: that pass is over, its slot spent
            await self.store.delete_txn(conn, mine.id)
        slot, next_at = _gcra(row.next_at, now, call)
        if slot - now <= call.in_process:
            await self.store.set_txn(conn, key, now=now, capacity=None, next_at=next_at, burst_started_at=None)
            return self._allowed(inst, now, slot)
        if call.over is Over.REFUSE:
            metrics.LIMIT_CALLS.labels("rate", "busy").inc()
            return Answer(Outcome.BUSY, inst, at=slot)
        await self.store.set_txn(conn, key, now=now, capacity=None, next_at=next_at, burst_started_at=None)
        await self.store.insert_txn(conn, key, ref, state="reserved", owner="", sequence=inst.last_sequence,
                                    at=slot, now=now)
        parked = await self._park(conn, ref, now=now, until=slot - call.lead, kind="limit_waiting",
                                  actor=call.execution_id, detail=f"{where}: slot at {slot.isoformat()}")
        metrics.LIMIT_CALLS.labels("rate", "waiting").inc()
        return Answer(Outcome.WAITING, parked, at=slot)

    @staticmethod
    def _allowed(inst: Instance, now: datetime, slot: datetime) -> Answer:
        metrics.LIMIT_CALLS.labels("rate", "allowed").inc()
        if slot > now:
            metrics.LIMIT_WAIT_SECONDS.labels("rate").observe((slot - now).total_seconds())
        return Answer(Outcome.ALLOWED, inst, wait_ms=ms(slot - now), at=slot)

    async def _throttle_many(self, _group: str, calls: list[RateCall]) -> list[Answer | BaseException]:
        """Calls of one key and rate that came together: one transaction gives a slot to each whose instance its
        execution holds, that has no reservation and whose slot is within its in-process wait, in arrival order;
        the rest (a reservation to spend, a slot too far, a refused caller) go on alone afterwards."""
        key = calls[0].key
        out: list[Answer | BaseException | None] = [None] * len(calls)

        async def txn(conn: Conn) -> None:
            locked: dict[int, Instance] = {}
            for i in sorted(range(len(calls)), key=lambda i: (calls[i].ref.workflow_id, calls[i].ref.instance_key)):
                try:
                    locked[i] = await locked_instance(self.instances, conn, calls[i].ref)
                except NotFound as exc:
                    out[i] = exc
            if not locked:
                return
            row, now = await self.store.lock_txn(conn, key)
            held: dict[int, Instance] = {}
            for i, inst in locked.items():
                try:
                    held[i] = leased(inst, calls[i].ref, calls[i].execution_id, now)
                except FailedPrecondition as exc:
                    out[i] = exc
            if not held:
                return
            reserved = await self.store.entry_refs_txn(conn, key, [calls[i].ref for i in held])
            next_at = row.next_at
            for i, inst in sorted(held.items()):
                if (calls[i].ref.workflow_id, calls[i].ref.instance_key) in reserved:
                    continue
                slot, after = _gcra(next_at, now, calls[i])
                if slot - now > calls[i].in_process:
                    break  # this one and every later one: alone, in order
                next_at = after
                out[i] = self._allowed(inst, now, slot)
            if next_at != row.next_at:
                await self.store.set_txn(conn, key, now=now, capacity=None, next_at=next_at, burst_started_at=None)

        try:
            await self._run(txn)
        except Exception as exc:  # noqa: BLE001 - the transaction failed: each caller raises it
            return [exc] * len(calls)
        for i, answer in enumerate(out):
            if answer is None:
                try:
                    out[i] = await self._throttle_alone(calls[i])
                except Exception as exc:  # noqa: BLE001 - this caller's own error
                    out[i] = exc
        done = [a for a in out if a is not None]
        assert len(done) == len(calls), "every call answered"
        return done
