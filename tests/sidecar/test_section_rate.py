"""A section with a rate (issue 43): AcquireSlot's `rate` takes a rate slot once the place is held, one call where
Enter Section and Rate Limit took two; on both backends."""

from __future__ import annotations

from datetime import timedelta

import grpc
from durable.v1 import limits_pb2

from tests.conftest import Harness
from tests.sidecar.storage import fetch
from tests.sidecar.test_events import get, refused
from tests.sidecar.test_limits import (
    ACQUIRED,
    REFUSE,
    WAITING,
    _most_in_window,
    _name,
    _url,
    acquire,
    handed_out,
    release,
    resume,
    started,
)


def rate(limit: int, period_ms: int, **kw: int) -> limits_pb2.SectionRate:
    return limits_pb2.SectionRate(limit=limit, period_ms=period_ms, **kw)


async def _keys(s: object, name: str, kind: int) -> list[limits_pb2.LimitKeyState]:
    listed = await s.limits.ListLimitKeys(limits_pb2.ListLimitKeysRequest(kind=kind, limit_name=name),  # type: ignore[attr-defined]
                                          metadata=s.metadata)  # type: ignore[attr-defined]
    return list(listed.keys)


async def test_slots_are_taken_inside_the_section_in_arrival_order_never_above_the_rate(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    keys = await started(s, 12)
    answers = [await acquire(s, key, name, max_holders=100, max_wait_ms=60_000, rate=rate(5, 1000))
               for key in keys]
    assert [a.outcome for a in answers] == [ACQUIRED] * 12
    assert answers[0].wait_ms == 0 and all(0 <= a.wait_ms <= 60_000 for a in answers)
    slots = [a.slot_at.ToDatetime() for a in answers]
    assert slots == sorted(slots)
    assert _most_in_window(slots, timedelta(seconds=1)) <= 5
    assert answers[-1].holders == 12
    # The rate is the one Throttle keeps for the same name and key.
    (row,) = await _keys(s, name, limits_pb2.LIMIT_KIND_RATE)
    assert row.limit_key == "customer-1" and row.next_at.ToDatetime() > slots[-1]


async def test_an_item_without_a_place_takes_no_slot_and_one_with_a_far_slot_is_parked_until_it(
        harness: Harness) -> None:
    s, name = harness.alpha, _name()
    first, second = await started(s, 2)
    a = await acquire(s, first, name, max_holders=1, rate=rate(1, 60_000))
    assert (a.outcome, a.wait_ms, a.holders) == (ACQUIRED, 0, 1)
    queued = await acquire(s, second, name, max_holders=1, rate=rate(1, 60_000))
    assert queued.outcome == WAITING and not queued.HasField("slot_at")
    (row,) = await _keys(s, name, limits_pb2.LIMIT_KIND_RATE)
    assert [e.instance_key for e in row.entries] == []  # no slot reserved for a waiter
    assert row.next_at.ToDatetime() == a.slot_at.ToDatetime() + timedelta(seconds=60)
    await release(s, first, name)
    handed = await handed_out(s, [second])
    await resume(s, handed[0], "exec-2")
    parked = await acquire(s, second, name, execution="exec-2", max_holders=1, rate=rate(1, 60_000))
    assert parked.outcome == WAITING and parked.holders == 1
    assert parked.slot_at.ToDatetime() == a.slot_at.ToDatetime() + timedelta(seconds=60)
    inst = await get(s, second)
    assert inst.lease_owner == "" and inst.wake_at.ToDatetime() == parked.slot_at.ToDatetime()


async def test_the_resumed_item_spends_its_reserved_slot_once(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    first, second = await started(s, 2)
    a = await acquire(s, first, name, rate=rate(1, 1500))
    assert a.outcome == ACQUIRED
    parked = await acquire(s, second, name, rate=rate(1, 1500))
    assert parked.outcome == WAITING
    assert parked.slot_at.ToDatetime() - a.slot_at.ToDatetime() == timedelta(milliseconds=1500)
    handed = await handed_out(s, [second])
    await resume(s, handed[0], "exec-2")
    got = await acquire(s, second, name, execution="exec-2", rate=rate(1, 1500))
    assert got.outcome == ACQUIRED and got.slot_at == parked.slot_at and got.holders == 2
    (row,) = await _keys(s, name, limits_pb2.LIMIT_KIND_RATE)
    assert [e.instance_key for e in row.entries] == []  # spent


async def test_a_section_with_a_rate_refuses_bad_input_and_records_nothing(harness: Harness) -> None:
    s, name = harness.alpha, _name()
    (key,) = await started(s, 1)
    for kw in ({"rate": rate(0, 1000)}, {"rate": rate(5, 0)}, {"rate": rate(5, 86_400_001)},
               {"rate": rate(5, 1000, burst=6)}, {"rate": rate(5, 1000, burst=2, calls=3)},
               {"rate": rate(5, 1000), "over_limit": REFUSE}):
        code, detail = await refused(acquire(s, key, name, **kw))  # type: ignore[arg-type]
        assert code == grpc.StatusCode.INVALID_ARGUMENT, kw
        assert detail, kw
    assert await fetch(_url(harness), "SELECT count(*) FROM durable_limit_entries WHERE limit_name = %s",
                       name) == [(0,)]
    assert await _keys(s, name, limits_pb2.LIMIT_KIND_CONCURRENCY) == []
    assert await _keys(s, name, limits_pb2.LIMIT_KIND_RATE) == []
