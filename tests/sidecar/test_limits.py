"""Flow control (issue 43): places per key, rate limits and debounce, on both backends.

Each item is an instance started by its execution (as the Resume Point does);
an item over a limit is parked and handed out again by ClaimResumable (the
Resume Trigger), and its resumed execution calls again.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from durable.v1 import checkpoint_pb2, common_pb2, events_pb2, instance_pb2, limits_pb2
from durable_sidecar import metrics
from durable_sidecar.services.limits import LimitService
from durable_sidecar.wiring import open_backend
from prometheus_client import REGISTRY

from tests.conftest import Harness
from tests.sidecar.helpers import SidecarProcess, Stubs, channel, two_sidecar_processes
from tests.sidecar.storage import expire_instance_lease, fetch
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start
from tests.sidecar.test_events import claim, get, refused

ACQUIRED = limits_pb2.ACQUIRE_OUTCOME_ACQUIRED
WAITING = limits_pb2.ACQUIRE_OUTCOME_WAITING
BUSY = limits_pb2.ACQUIRE_OUTCOME_BUSY
ALLOWED = limits_pb2.THROTTLE_OUTCOME_ALLOWED
T_WAITING = limits_pb2.THROTTLE_OUTCOME_WAITING
T_BUSY = limits_pb2.THROTTLE_OUTCOME_BUSY
D_WAITING = limits_pb2.DEBOUNCE_OUTCOME_WAITING
RUN = limits_pb2.DEBOUNCE_OUTCOME_RUN
DEBOUNCED = limits_pb2.DEBOUNCE_OUTCOME_DEBOUNCED
REFUSE = limits_pb2.OVER_LIMIT_REFUSE


def _name() -> str:
    return f"api-{uuid.uuid4().hex[:8]}"


async def acquire(s: Stubs, key: str, name: str, lkey: str = "customer-1", execution: str = "exec-1",
                  max_holders: int = 2, **kw: object) -> limits_pb2.AcquireSlotResponse:
    return await s.limits.AcquireSlot(limits_pb2.AcquireSlotRequest(
        workflow_id=WF, instance_key=key, execution_id=execution, limit_name=name, limit_key=lkey,
        max_holders=max_holders, **kw), metadata=s.metadata)


async def release(s: Stubs, key: str, name: str, lkey: str = "customer-1") -> limits_pb2.ReleaseSlotResponse:
    return await s.limits.ReleaseSlot(limits_pb2.ReleaseSlotRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1", limit_name=name, limit_key=lkey),
        metadata=s.metadata)


async def throttle(s: Stubs, key: str, name: str, lkey: str = "customer-1", execution: str = "exec-1",
                   **kw: object) -> limits_pb2.ThrottleResponse:
    fields: dict[str, object] = {"limit": 5, "period_ms": 1000, **kw}
    return await s.limits.Throttle(limits_pb2.ThrottleRequest(
        workflow_id=WF, instance_key=key, execution_id=execution, limit_name=name, limit_key=lkey, **fields),
        metadata=s.metadata)


async def debounce(s: Stubs, key: str, name: str, lkey: str = "chat-1", execution: str = "exec-1",
                   **kw: object) -> limits_pb2.DebounceResponse:
    fields: dict[str, object] = {"quiet_ms": 400, **kw}
    return await s.limits.Debounce(limits_pb2.DebounceRequest(
        workflow_id=WF, instance_key=key, execution_id=execution, limit_name=name, limit_key=lkey, **fields),
        metadata=s.metadata)


async def started(s: Stubs, n: int) -> list[str]:
    keys = [new_key() for _ in range(n)]
    for key in keys:
        await start(s, key)
    return keys


async def handed_out(s: Stubs, keys: list[str], *, timeout: float = 10.0) -> list[instance_pb2.ResumableInstance]:
    """Claims until one of `keys` is handed out (the sweep runs every second); those handed out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = [r for r in await claim(s) if r.instance.instance_key in keys]
        if got or loop.time() > deadline:
            return got
        await asyncio.sleep(0.1)


async def three_holders_three_waiters(s: Stubs, name: str) -> list[str]:
    """Six new instances at a key of three places: the first three hold one each, the last three wait in order."""
    keys = await started(s, 6)
    for key in keys[:3]:
        assert (await acquire(s, key, name, max_holders=3)).outcome == ACQUIRED
    for key in keys[3:]:
        assert (await acquire(s, key, name, max_holders=3)).outcome == WAITING
    return keys


async def resume(s: Stubs, handed: instance_pb2.ResumableInstance, execution: str) -> None:
    await start(s, handed.instance.instance_key, execution, claim_token=handed.claim_token)


# --- concurrency ---------------------------------------------------------------------------------------------


async def test_places_are_counted_per_key_and_waiters_are_parked_then_served_oldest_first(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    a, b, c, d = await started(s, 4)
    assert (await acquire(s, a, name)).outcome == ACQUIRED
    again = await acquire(s, a, name)
    assert again.outcome == ACQUIRED and again.holders == 1  # a repeated call holds the same place
    assert (await acquire(s, b, name)).outcome == ACQUIRED
    waits_c = await acquire(s, c, name)
    assert (waits_c.outcome, waits_c.position, waits_c.holders) == (WAITING, 1, 2)
    waits_d = await acquire(s, d, name)
    assert (waits_d.outcome, waits_d.position) == (WAITING, 2)
    # Parked: no lease, no execution, a wake-up as a safety net.
    inst = await get(s, c)
    assert inst.lease_owner == "" and inst.run_state == common_pb2.RUN_STATE_SCHEDULED
    assert [r for r in await claim(s) if r.instance.instance_key in (c, d)] == []
    # Another key of the same limit is counted apart.
    other = (await started(s, 1))[0]
    assert (await acquire(s, other, name, lkey="customer-2")).outcome == ACQUIRED

    freed = await release(s, a, name)
    assert (freed.released, freed.granted, freed.holders, freed.waiters) == (True, 1, 2, 1)
    handed = await handed_out(s, [c, d])
    assert [h.instance.instance_key for h in handed] == [c]  # the oldest waiter, and only it
    assert handed[0].reason == instance_pb2.RESUME_REASON_WAKE_UP
    await resume(s, handed[0], "exec-2")
    got = await acquire(s, c, name, execution="exec-2")
    assert (got.outcome, got.holders, got.waiters) == (ACQUIRED, 2, 1)
    assert (await release(s, a, name)).released is False  # released twice: nothing changes

    await release(s, b, name)
    handed = await handed_out(s, [d])
    assert [h.instance.instance_key for h in handed] == [d]
    trail = await fetch(_url(harness), "SELECT kind FROM durable_instance_events WHERE instance_key = %s ORDER BY id", d)
    assert [k for (k,) in trail if k.startswith("limit_")] == ["limit_waiting", "limit_granted"]


def _url(harness: Harness) -> str:
    return harness.sidecar.settings.database_url


async def test_a_caller_may_wait_in_its_call_for_a_place_keeping_its_lease_then_is_parked(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    holder, patient, late, last = await started(s, 4)
    await acquire(s, holder, name, max_holders=1)
    waiting = asyncio.ensure_future(acquire(s, patient, name, max_holders=1, max_wait_ms=20_000))
    await asyncio.sleep(0.5)
    assert not waiting.done()
    # Queued behind it, without waiting: parked, number 2.
    queued = await acquire(s, late, name, max_holders=1)
    assert (queued.outcome, queued.position) == (WAITING, 2)
    await release(s, holder, name)
    got = await asyncio.wait_for(waiting, timeout=5)  # answered when the place is given, not at a poll
    assert (got.outcome, got.holders, got.waiters) == (ACQUIRED, 1, 1)
    assert (await get(s, patient)).lease_owner == "exec-1"  # never parked: the same execution goes on
    # Nobody releases: after its wait the caller is parked, in its turn.
    parked = await acquire(s, last, name, max_holders=1, max_wait_ms=300)
    assert (parked.outcome, parked.position) == (WAITING, 2)
    assert (await get(s, last)).lease_owner == ""
    code, detail = await refused(acquire(s, holder, name, max_wait_ms=60_001))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "max_wait_ms" in detail


async def test_release_without_a_key_leaves_every_key_of_the_limit(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    a, b, c = await started(s, 3)
    await acquire(s, a, name, lkey="k1", max_holders=1)
    await acquire(s, a, name, lkey="k2", max_holders=1)
    await acquire(s, b, name, lkey="k1", max_holders=1)
    await acquire(s, c, name, lkey="k2", max_holders=1)
    freed = await release(s, a, name, lkey="")
    assert (freed.released, freed.granted) == (True, 2)
    assert sorted(h.instance.instance_key for h in await handed_out(s, [b, c])) == sorted([b, c])
    listed = await s.limits.ListLimitKeys(limits_pb2.ListLimitKeysRequest(limit_name=name), metadata=s.metadata)
    assert [(k.limit_key, k.holders, k.waiters) for k in listed.keys] == [("k1", 1, 0), ("k2", 1, 0)]
    assert (await release(s, a, name, lkey="")).released is False


async def test_a_finished_holder_is_not_listed_as_holding(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    (a,) = await started(s, 1)
    await acquire(s, a, name)
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=a, execution_id="exec-1"), metadata=s.metadata)
    listed = await s.limits.ListLimitKeys(limits_pb2.ListLimitKeysRequest(limit_name=name), metadata=s.metadata)
    assert [(k.holders, list(k.entries)) for k in listed.keys] == [(0, [])]


async def test_refuse_leaves_by_busy_and_records_nothing(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    a, b = await started(s, 2)
    await acquire(s, a, name, max_holders=1)
    busy = await acquire(s, b, name, max_holders=1, over_limit=REFUSE)
    assert (busy.outcome, busy.holders, busy.waiters) == (BUSY, 1, 0)
    assert (await get(s, b)).lease_owner == "exec-1"  # still running in its execution
    listed = await s.limits.ListLimitKeys(limits_pb2.ListLimitKeysRequest(limit_name=name), metadata=s.metadata)
    assert [(k.limit_key, k.holders, k.waiters, [e.instance_key for e in k.entries]) for k in listed.keys] == [
        ("customer-1", 1, 0, [a])]


async def test_a_place_is_freed_when_its_holder_dies_completes_or_parks(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    dead, done, parked, w1, w2, w3 = await three_holders_three_waiters(s, name)
    # The holder's process died: its lease lapsed (a session's end does the same).
    await expire_instance_lease(_url(harness), dead)
    assert [h.instance.instance_key for h in await handed_out(s, [w1, w2, w3])] == [w1]
    # Completed without a release.
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=done, execution_id="exec-1"), metadata=s.metadata)
    assert [h.instance.instance_key for h in await handed_out(s, [w2, w3])] == [w2]
    # Parked elsewhere (a scheduled wake-up releases the lease).
    await s.instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(
        workflow_id=WF, instance_key=parked, execution_id="exec-1", delay_seconds=3600), metadata=s.metadata)
    assert [h.instance.instance_key for h in await handed_out(s, [w3])] == [w3]


@pytest.mark.parametrize("harness", [{"limit_sweep_interval_seconds": 3600}], indirect=True)
async def test_a_holder_that_finishes_hands_its_place_on_at_once_not_at_the_sweep(harness: Harness) -> None:
    """A section ends at the instance's completion: its place goes to the next waiter right after the last Save,
    a CompleteInstance or a FailInstance commits, not at the limit sweep's next pass (an hour here)."""
    s, name = harness.alpha, _name()
    by_save, by_complete, by_fail, w1, w2, w3 = await three_holders_three_waiters(s, name)
    await save(s, item(by_save, "synced", {"ok": True}, state_mode=checkpoint_pb2.STATE_MODE_ADD_STEP_RESULT,
                       complete_instance=True))
    assert [h.instance.instance_key for h in await handed_out(s, [w1, w2, w3], timeout=5)] == [w1]
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=by_complete, execution_id="exec-1"), metadata=s.metadata)
    assert [h.instance.instance_key for h in await handed_out(s, [w2, w3], timeout=5)] == [w2]
    await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
        workflow_id=WF, instance_key=by_fail, execution_id="exec-1", error_message="gave up"), metadata=s.metadata)
    assert [h.instance.instance_key for h in await handed_out(s, [w3], timeout=5)] == [w3]


async def test_many_waiters_are_served_in_arrival_order(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    holder, *waiters = await started(s, 9)
    await acquire(s, holder, name, max_holders=1)
    for key in waiters:
        assert (await acquire(s, key, name, max_holders=1)).outcome == WAITING
    order, current, execution = [], holder, 1
    for _ in waiters:
        await release(s, current, name)
        handed = await handed_out(s, waiters)
        assert len(handed) == 1
        current = handed[0].instance.instance_key
        execution += 1
        await resume(s, handed[0], f"exec-{execution}")
        assert (await acquire(s, current, name, execution=f"exec-{execution}", max_holders=1)).outcome == ACQUIRED
        order.append(current)
    assert order == waiters


async def test_a_waiter_woken_without_a_place_parks_again_and_keeps_its_turn(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    holder, first, second = await started(s, 3)
    await acquire(s, holder, name, max_holders=1)
    await acquire(s, first, name, max_holders=1)
    await acquire(s, second, name, max_holders=1)
    # An operator resumes the first waiter early: it finds no place and waits again, still first.
    await s.recovery.ResumeInstance(events_pb2.ResumeInstanceRequest(
        workflow_id=WF, instance_key=first, actor="ops", reason="test"), metadata=s.metadata)
    handed = await handed_out(s, [first])
    await resume(s, handed[0], "exec-early")
    again = await acquire(s, first, name, execution="exec-early", max_holders=1)
    assert (again.outcome, again.position) == (WAITING, 1)


async def test_acquire_refuses_bad_input_and_wrong_callers_and_changes_nothing(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    (key,) = await started(s, 1)
    for kw in ({"max_holders": 0}, {"max_holders": 10_001}, {"lkey": ""}, {"lkey": "a\x00b"},
               {"execution": ""}):
        code, _ = await refused(acquire(s, key, name, **kw))  # type: ignore[arg-type]
        assert code == grpc.StatusCode.INVALID_ARGUMENT, kw
    code, detail = await refused(acquire(s, key, name, execution="exec-other"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "does not hold the lease" in detail
    code, _ = await refused(acquire(s, new_key(), name))
    assert code == grpc.StatusCode.NOT_FOUND
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1"), metadata=s.metadata)
    code, _ = await refused(acquire(s, key, name))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert await fetch(_url(harness), "SELECT count(*) FROM durable_limit_entries WHERE limit_name = %s",
                       name) == [(0,)]
    # Another namespace sees nothing of this one's limits.
    listed = await harness.beta.limits.ListLimitKeys(limits_pb2.ListLimitKeysRequest(), metadata=harness.beta.metadata)
    assert [k for k in listed.keys if k.limit_name == name] == []


async def test_racing_callers_never_exceed_the_places(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    keys = await started(s, 30)
    answers = await asyncio.gather(*(acquire(s, k, name, max_holders=3, over_limit=REFUSE) for k in keys))
    assert sorted(a.outcome for a in answers).count(ACQUIRED) == 3


@pytest.mark.postgres_only(reason="two sidecar replicas on one database: the embedded database has one owner")
async def test_replicas_racing_never_exceed_the_places_or_the_rate() -> None:
    token, ns = f"lim-{uuid.uuid4().hex[:8]}", "ns-limits"
    async with two_sidecar_processes(token, ns) as (_, stubs):
        name = _name()
        keys = [new_key() for _ in range(40)]
        for i, key in enumerate(keys):
            await start(stubs[i % 2], key)
        answers = await asyncio.gather(*(acquire(stubs[i % 2], k, name, max_holders=4, over_limit=REFUSE)
                                         for i, k in enumerate(keys)))
        assert [a.outcome for a in answers].count(ACQUIRED) == 4
        # The same keys, racing for a rate of 5 per second: the slots are spaced exactly, whoever serves them.
        slots = await asyncio.gather(*(throttle(stubs[i % 2], k, name, max_wait_ms=300_000)
                                       for i, k in enumerate(keys)))
        assert all(a.outcome == ALLOWED for a in slots)
        times = sorted(a.slot_at.ToDatetime() for a in slots)
        assert _most_in_window(times, timedelta(seconds=1)) <= 5
        assert min(b - a for a, b in itertools.pairwise(times)) >= timedelta(milliseconds=199)


# --- rate ------------------------------------------------------------------------------------------------------


def _most_in_window(times: list, window: timedelta) -> int:  # type: ignore[type-arg]
    """The most of `times` (sorted) that fall in any half-open window of that length."""
    most, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - window:
            j += 1
        most = max(most, i - j + 1)
    return most


@pytest.mark.parametrize("burst", [1, 3])
async def test_a_rate_limit_never_gives_more_slots_in_any_window_than_it_allows(harness: Harness, burst: int) -> None:
    s, name = harness.alpha, _name()
    keys = await started(s, 30)
    times = []
    for i, key in enumerate(keys):
        if i % 7 == 3:
            await asyncio.sleep(random.uniform(0.05, 0.4))  # pauses: the bucket refills, bursts start again
        a = await throttle(s, key, name, limit=10, period_ms=1000, burst=burst, max_wait_ms=300_000)
        assert a.outcome == ALLOWED and 0 <= a.wait_ms <= 300_000
        times.append(a.slot_at.ToDatetime())
    assert times == sorted(times)  # slots in arrival order
    assert _most_in_window(times, timedelta(seconds=1)) <= 10 + burst - 1
    assert _most_in_window(times, timedelta(milliseconds=100)) <= burst


async def test_throttle_calls_arriving_together_are_each_answered_as_if_alone(harness: Harness) -> None:
    """Calls of one key that arrive together are answered by one transaction where they can be (the sidecar
    groups them): still exactly the burst at once, every later one its own reserved slot, spaced exactly, and a
    caller whose execution does not hold its instance refused alone."""
    s, name = harness.alpha, _name()
    keys = await started(s, 24)
    (stranger,) = await started(s, 1)
    answers = await asyncio.gather(
        *(throttle(s, k, name, limit=4, period_ms=1000, burst=4, max_wait_ms=0) for k in keys[:12]),
        refused(throttle(s, stranger, name, execution="exec-other", limit=4, period_ms=1000, burst=4)),
        *(throttle(s, k, name, limit=4, period_ms=1000, burst=4, max_wait_ms=0) for k in keys[12:]))
    code, details = answers.pop(12)  # type: ignore[misc]
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "does not hold the lease" in details
    outcomes = [a.outcome for a in answers]  # type: ignore[union-attr]
    assert outcomes.count(ALLOWED) == 4 and outcomes.count(T_WAITING) == 20
    slots = sorted(a.slot_at.ToDatetime() for a in answers)  # type: ignore[union-attr]
    waiting = slots[4:]
    assert all(b - a == timedelta(milliseconds=250) for a, b in itertools.pairwise(waiting))
    assert _most_in_window(slots, timedelta(seconds=1)) <= 4 + 4 - 1
    for key, a in zip(keys, answers, strict=True):
        inst = await get(s, key)
        parked = a.outcome == T_WAITING  # type: ignore[union-attr]
        assert (inst.lease_owner == "") is parked
    assert (await get(s, stranger)).lease_owner == "exec-1"  # the refused caller changed nothing


async def test_a_slot_beyond_the_in_process_wait_parks_the_item_until_its_slot(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    first, second, third = await started(s, 3)
    now = await throttle(s, first, name, limit=1, period_ms=1500, max_wait_ms=0)
    assert (now.outcome, now.wait_ms) == (ALLOWED, 0)
    busy = await throttle(s, second, name, limit=1, period_ms=1500, max_wait_ms=0, over_limit=REFUSE)
    assert busy.outcome == T_BUSY and busy.slot_at.ToDatetime() > now.slot_at.ToDatetime()
    parked = await throttle(s, second, name, limit=1, period_ms=1500, max_wait_ms=0)
    assert parked.outcome == T_WAITING
    assert parked.slot_at.ToDatetime() - now.slot_at.ToDatetime() == timedelta(milliseconds=1500)
    inst = await get(s, second)
    assert inst.lease_owner == "" and inst.wake_at.ToDatetime() == parked.slot_at.ToDatetime()
    # The third queues behind the reserved slot.
    behind = await throttle(s, third, name, limit=1, period_ms=1500, max_wait_ms=300_000)
    assert behind.slot_at.ToDatetime() - parked.slot_at.ToDatetime() == timedelta(milliseconds=1500)
    handed = await handed_out(s, [second])
    await resume(s, handed[0], "exec-2")
    got = await throttle(s, second, name, execution="exec-2", limit=1, period_ms=1500, max_wait_ms=0)
    assert got.outcome == ALLOWED and got.slot_at == parked.slot_at  # its own slot, spent once
    after = await throttle(s, second, name, execution="exec-2", limit=1, period_ms=1500, max_wait_ms=300_000)
    assert after.slot_at.ToDatetime() > behind.slot_at.ToDatetime()  # a call after that is a new slot


async def test_a_parked_slot_wakes_its_item_ahead_so_the_call_goes_out_on_time(harness: Harness) -> None:
    """An item parked for a slot wakes RATE_RESUME_LEAD (at most its in-process wait) before it; its resumed
    execution asks again before the slot and is told to wait the rest in its process."""
    s, name = harness.alpha, _name()
    first, second = await started(s, 2)
    await throttle(s, first, name, limit=1, period_ms=5000, max_wait_ms=3000)
    parked = await throttle(s, second, name, limit=1, period_ms=5000, max_wait_ms=3000)
    assert parked.outcome == T_WAITING
    slot = parked.slot_at.ToDatetime()
    lead = (slot - (await get(s, second)).wake_at.ToDatetime()).total_seconds()
    assert lead == pytest.approx(2.0)
    # Woken: the resumed execution (its slot about 2 s ahead, within its 3 s) waits in its process.
    handed = await handed_out(s, [second])
    await resume(s, handed[0], "exec-2")
    got = await throttle(s, second, name, execution="exec-2", limit=1, period_ms=5000, max_wait_ms=3000)
    assert got.outcome == ALLOWED and got.slot_at == parked.slot_at and 0 < got.wait_ms <= 2000
    # A caller that cannot wait in its process is woken at the slot itself (not ahead, not twice).
    (third,) = await started(s, 1)
    late = await throttle(s, third, name, limit=1, period_ms=5000, max_wait_ms=0)
    assert late.outcome == T_WAITING
    assert (await get(s, third)).wake_at.ToDatetime() == late.slot_at.ToDatetime()


async def test_several_calls_of_one_instance_take_that_many_slots_at_one_time(harness: Harness) -> None:
    """An instance's items that reach the limit in one run (an order's lines) make one call for all of them: it
    takes that many slots at one time (within the burst), and the instance is parked as a whole and given all of
    them together on resume (before, one of them went on while the instance was parked, and the instance was
    parked again on every resume)."""
    s, name = harness.alpha, _name()
    first, second, third = await started(s, 3)
    rate = {"limit": 4, "period_ms": 2000, "burst": 3}  # spaced 500 ms, 3 at once after a quiet spell
    now = await throttle(s, first, name, calls=3, max_wait_ms=0, **rate)
    assert (now.outcome, now.wait_ms) == (ALLOWED, 0)
    parked = await throttle(s, second, name, calls=2, max_wait_ms=0, **rate)
    assert parked.outcome == T_WAITING
    # The three took 1.5 s of the key; two more conform together once one interval of it is left over the burst.
    assert parked.slot_at.ToDatetime() - now.slot_at.ToDatetime() == timedelta(milliseconds=1000)
    behind = await throttle(s, third, name, max_wait_ms=300_000, **rate)
    assert behind.slot_at.ToDatetime() - parked.slot_at.ToDatetime() == timedelta(milliseconds=500)
    handed = await handed_out(s, [second])
    await resume(s, handed[0], "exec-2")
    got = await throttle(s, second, name, execution="exec-2", calls=2, max_wait_ms=300_000, **rate)
    assert got.outcome == ALLOWED and got.slot_at == parked.slot_at  # both slots, spent once


async def test_a_reservation_is_spent_by_the_next_call_whatever_was_saved_on_the_way_back(harness: Harness) -> None:
    """A resumed order that saves again before it reaches the limit (its lines' steps, on the way from its Resume
    Point) still spends its reservation: a newer checkpoint used to void it, give a new slot further on, and park
    the order again, each pass. A reservation whose slot passed more than a period ago is not spent."""
    s, name = harness.alpha, _name()
    first, second = await started(s, 2)
    rate = {"limit": 1, "period_ms": 1500}
    await throttle(s, first, name, max_wait_ms=0, **rate)
    parked = await throttle(s, second, name, max_wait_ms=0, **rate)
    assert parked.outcome == T_WAITING
    handed = await handed_out(s, [second])
    await resume(s, handed[0], "exec-2")
    await save(s, item(second, "line a", {"ok": True}, execution="exec-2"))  # saved again on the way back
    got = await throttle(s, second, name, execution="exec-2", max_wait_ms=300_000, **rate)
    assert got.outcome == ALLOWED and got.slot_at == parked.slot_at
    # A stale reservation: its slot passed more than a period ago.
    (third,) = await started(s, 1)
    late = await throttle(s, third, name, max_wait_ms=0, **rate)
    assert late.outcome == T_WAITING
    # Its execution comes back more than a period after the slot (n8n was down, say).
    await asyncio.sleep((late.slot_at.ToDatetime() - datetime.now(UTC).replace(tzinfo=None)).total_seconds() + 1.7)
    handed = await handed_out(s, [third])
    await resume(s, handed[0], "exec-3")
    fresh = await throttle(s, third, name, execution="exec-3", max_wait_ms=300_000, **rate)
    assert fresh.outcome == ALLOWED and fresh.slot_at.ToDatetime() > late.slot_at.ToDatetime()


async def test_calls_of_several_items_never_give_more_in_any_window_than_the_rate_allows(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    keys = await started(s, 30)
    times = []
    rng = random.Random(43)
    for i, key in enumerate(keys):
        if i % 7 == 3:
            await asyncio.sleep(rng.uniform(0.05, 0.4))
        calls = rng.randint(1, 3)
        a = await throttle(s, key, name, limit=10, period_ms=1000, burst=3, calls=calls, max_wait_ms=300_000)
        assert a.outcome == ALLOWED
        times.extend([a.slot_at.ToDatetime()] * calls)
    assert times == sorted(times)
    assert _most_in_window(times, timedelta(seconds=1)) <= 10 + 3 - 1
    assert _most_in_window(times, timedelta(milliseconds=100)) <= 3


async def test_throttle_refuses_bad_input(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    (key,) = await started(s, 1)
    for kw in ({"limit": 0}, {"period_ms": 0}, {"period_ms": 86_400_001}, {"burst": 6}, {"max_wait_ms": 300_001},
               {"calls": 2}, {"calls": -1}, {"calls": 4, "burst": 3}):
        code, details = await refused(throttle(s, key, name, **kw))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, kw
        assert "calls" not in kw or "calls must be" in details
    assert await fetch(_url(harness), "SELECT count(*) FROM durable_limits WHERE limit_name = %s", name) == [(0,)]


# --- debounce --------------------------------------------------------------------------------------------------


async def test_debounce_keep_last_runs_the_last_item_of_a_quiet_burst(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    keys = await started(s, 3)
    for key in keys:
        assert (await debounce(s, key, name)).outcome == D_WAITING
    # The earlier two can no longer be kept: handed out at once, and told so.
    early = await handed_out(s, keys[:2], timeout=2)
    assert sorted(h.instance.instance_key for h in early) == sorted(keys[:2])
    for h in early:
        await resume(s, h, "exec-2")
        assert (await debounce(s, h.instance.instance_key, name, execution="exec-2")).outcome == DEBOUNCED
        assert (await debounce(s, h.instance.instance_key, name, execution="exec-2")).outcome == DEBOUNCED
    last = await handed_out(s, [keys[2]])
    await resume(s, last[0], "exec-2")
    assert (await debounce(s, keys[2], name, execution="exec-2")).outcome == RUN
    assert (await debounce(s, keys[2], name, execution="exec-2")).outcome == RUN  # repeated: the same answer
    # After a checkpoint the same instance arrives anew: a new burst.
    await save(s, item(keys[2], "replied", {"n": 1}, execution="exec-2"))
    assert (await debounce(s, keys[2], name, execution="exec-2")).outcome == D_WAITING


async def test_debounce_keep_first_debounces_later_items_at_once_and_runs_the_first(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    first, *later = await started(s, 4)
    keep = limits_pb2.DEBOUNCE_KEEP_FIRST
    waiting = await debounce(s, first, name, keep=keep)
    assert waiting.outcome == D_WAITING
    for key in later:
        assert (await debounce(s, key, name, keep=keep)).outcome == DEBOUNCED
    moved = (await get(s, first)).wake_at.ToDatetime()
    assert moved > waiting.decide_at.ToDatetime()  # each later item moved the end of the burst
    handed = await handed_out(s, [first])
    await resume(s, handed[0], "exec-2")
    assert (await debounce(s, first, name, execution="exec-2", keep=keep)).outcome == RUN


async def test_a_burst_ends_at_its_maximum_wait_however_busy(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    keys = await started(s, 12)
    first = await debounce(s, keys[0], name, quiet_ms=500, max_wait_ms=700)
    cap = first.decide_at.ToDatetime() + timedelta(milliseconds=200)  # the first item's arrival + 700 ms
    ends = []
    for key in keys[1:]:
        await asyncio.sleep(0.1)  # never quiet for 500 ms
        ends.append((await debounce(s, key, name, quiet_ms=500, max_wait_ms=700)).decide_at.ToDatetime())
    assert cap in ends  # items past the first's 200 ms: the burst ends at its maximum, not 500 ms after them
    first_burst = ends[:ends.index(cap) + 1]
    assert first_burst == sorted(first_burst) and max(first_burst) == cap
    runs = await _decide_all(s, name, keys, quiet_ms=500, max_wait_ms=700)
    assert 2 <= runs.count(RUN) <= 3  # 1.2 s of items and never quiet: a burst ends every 0.7 s


async def _decide_all(s: Stubs, name: str, keys: list[str], **kw: object) -> list[int]:
    """Resumes every parked item as the Resume Trigger would until each has its decision; the decisions."""
    decided: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    n = 0
    while len(decided) < len(keys) and loop.time() < deadline:
        for h in await handed_out(s, [k for k in keys if k not in decided], timeout=0.5):
            n += 1
            await resume(s, h, f"exec-r{n}")
            a = await debounce(s, h.instance.instance_key, name, execution=f"exec-r{n}", **kw)
            if a.outcome != D_WAITING:
                decided[h.instance.instance_key] = a.outcome
    assert len(decided) == len(keys), f"undecided: {set(keys) - set(decided)}"
    return [decided[k] for k in keys]


async def test_debounce_refuses_bad_input(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    (key,) = await started(s, 1)
    for kw in ({"quiet_ms": 0}, {"quiet_ms": 1000, "max_wait_ms": 999}, {"quiet_ms": 86_400_001},
               {"keep": 7}):
        code, _ = await refused(debounce(s, key, name, **kw))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, kw
    assert (await get(s, key)).lease_owner == "exec-1"


async def test_debounce_decides_each_item_once_through_a_kill9_of_the_sidecar(database_url: str) -> None:
    token = f"deb-{uuid.uuid4().hex[:8]}"
    env = {"DURABLE_DATABASE_URL": database_url, "DURABLE_REDIS_URL": "", "DURABLE_AUTH_TOKENS": f"{token}=ns-deb"}
    proc = SidecarProcess(env)
    proc.start()
    name = _name()
    bursts: list[list[str]] = []
    try:
        ch = channel(proc.port)
        s = Stubs(ch, token)
        for b in range(4):
            keys = await started(s, 5)
            bursts.append(keys)
            for key in keys:
                assert (await debounce(s, key, name, quiet_ms=300)).outcome in (D_WAITING,)
            if b == 1:
                proc.kill9()  # mid-way: bursts 0 and 1 wait for their decision, the rest come after
                await ch.close()
                proc.start()
                ch = channel(proc.port)
                s = Stubs(ch, token)
            await asyncio.sleep(0.6)  # the burst goes quiet
        everything = [k for keys in bursts for k in keys]
        decisions = await _decide_all(s, name, everything, quiet_ms=300)
        for b in range(len(bursts)):
            got = decisions[b * 5:(b + 1) * 5]
            assert got == [DEBOUNCED] * 4 + [RUN], (b, got)
        # Asked again, every item keeps its decision.
        for key, want in zip(everything, decisions, strict=True):
            inst = await get(s, key)
            assert (await debounce(s, key, name, execution=inst.lease_owner, quiet_ms=300)).outcome == want
        await ch.close()
    finally:
        proc.stop()


async def test_limit_metrics_count_answers_and_show_waiters_per_limit(harness: Harness) -> None:
    s, name = harness.alpha, _name()

    def sample(metric: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(metric, labels) or 0.0

    before = sample("durable_limit_calls_total", kind="concurrency", outcome="waiting")
    a, b, c = await started(s, 3)
    await acquire(s, a, name, max_holders=1)
    await acquire(s, b, name, max_holders=1)
    await acquire(s, c, name, max_holders=1)
    assert sample("durable_limit_calls_total", kind="concurrency", outcome="waiting") == before + 2
    backend = await open_backend(harness.sidecar.settings, owner=False, migrate=False)
    try:
        metrics.set_limit_gauges(await LimitService(backend.db, backend.instances, backend.limits).gauges())
    finally:
        await backend.db.close()
    assert sample("durable_limit_entries", kind="concurrency", limit=name, state="holding") == 1
    assert sample("durable_limit_entries", kind="concurrency", limit=name, state="waiting") == 2
    waited = sample("durable_limit_wait_seconds_count", kind="concurrency")
    await release(s, a, name)
    assert sample("durable_limit_wait_seconds_count", kind="concurrency") == waited + 1
