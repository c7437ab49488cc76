"""Group commit of lone plain saves (services/grouping.py, CheckpointService._save_group).

Concurrent one-item saves of a namespace that arrive while others are being written go to PostgreSQL
together, as one statement; each caller must get exactly what saving alone gives it: its checkpoint,
its deduplication, its own refusal (and nobody else's).
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from durable.v1 import common_pb2, instance_pb2
from durable_sidecar.errors import FailedPrecondition
from durable_sidecar.services.grouping import StatementGroups
from prometheus_client import REGISTRY

from tests.conftest import Harness
from tests.sidecar.storage import is_sqlite
from tests.sidecar.test_checkpoints import WF, item, latest, new_key, save, start

COMPLETED = common_pb2.INSTANCE_STATUS_COMPLETED


def grouped() -> float:
    return REGISTRY.get_sample_value("durable_grouped_saves_total") or 0.0


# --- the grouping itself ----------------------------------------------------------------------------


class Recorder:
    """write_one / write_many that wait for `gate` and record what they were given."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.one: list[str] = []
        self.many: list[list[str]] = []

    async def write_one(self, _ns: str, item: str) -> str:
        self.one.append(item)
        await self.gate.wait()
        if item.startswith("bad"):
            raise FailedPrecondition(f"{item} refused")
        return f"saved {item}"

    async def write_many(self, _ns: str, items: list[str]) -> list[str | BaseException]:
        self.many.append(items)
        await self.gate.wait()
        if "boom" in items:
            raise ConnectionError("database gone")
        return [FailedPrecondition(f"{i} refused") if i.startswith("bad") else f"saved {i} with others" for i in items]


async def test_a_lone_write_runs_at_once_in_its_callers_task() -> None:
    r = Recorder()
    r.gate.set()
    groups: StatementGroups[str, str] = StatementGroups(r.write_one, r.write_many, flushers=2)
    assert await groups.write("ns", "a") == "saved a"
    assert await groups.write("ns", "b") == "saved b"
    assert r.one == ["a", "b"] and r.many == []


async def test_writes_arriving_while_the_flushers_are_busy_go_together_each_with_its_own_answer() -> None:
    r = Recorder()
    groups: StatementGroups[str, str] = StatementGroups(r.write_one, r.write_many, flushers=2)
    first = [asyncio.create_task(groups.write("ns", x)) for x in ("a", "b")]
    await asyncio.sleep(0)
    later = [asyncio.create_task(groups.write("ns", x)) for x in ("c", "bad-d", "e")]
    other = asyncio.create_task(groups.write("other-ns", "f"))  # another namespace is not held up
    await asyncio.sleep(0)
    assert r.one == ["a", "b", "f"] and r.many == []
    r.gate.set()
    assert await asyncio.gather(*first, other) == ["saved a", "saved b", "saved f"]
    results = await asyncio.gather(*later, return_exceptions=True)
    assert r.many == [["c", "bad-d", "e"]]
    assert results[0] == "saved c with others" and results[2] == "saved e with others"
    assert isinstance(results[1], FailedPrecondition) and "bad-d" in str(results[1])


async def test_a_failed_group_write_fails_each_of_its_callers_and_a_caller_gone_is_left_out() -> None:
    r = Recorder()
    groups: StatementGroups[str, str] = StatementGroups(r.write_one, r.write_many, flushers=1)
    busy = asyncio.create_task(groups.write("ns", "a"))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(groups.write("ns", x)) for x in ("boom", "c", "gone")]
    await asyncio.sleep(0)
    waiting[2].cancel()  # its RPC was cancelled before its turn
    r.gate.set()
    assert await busy == "saved a"
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert r.many == [["boom", "c"]]
    assert all(isinstance(x, ConnectionError) for x in results[:2])
    assert isinstance(results[2], asyncio.CancelledError)


# --- against the real sidecar and database ----------------------------------------------------------


async def test_concurrent_lone_saves_are_written_together_and_each_gets_its_own_answer(
        harness: Harness, database_url: str) -> None:
    s = harness.alpha
    before = grouped()
    # A burst of 40 concurrent saves; on a busy machine the server may happen to take one burst's saves one
    # after the other with none waiting, so up to five bursts are sent: grouping must show in one of them.
    for _burst in range(5):
        keys = [new_key() for _ in range(40)]
        for key in keys:
            await start(s, key, "exec-1")
        replies = await asyncio.gather(*(save(s, item(key, "paid", {"order": key})) for key in keys))
        assert [r.results[0].checkpoint.sequence for r in replies] == [1] * len(keys)
        assert all(r.results[0].checkpoint.instance_key == key for r, key in zip(replies, keys, strict=True))
        for key in keys[:3]:
            assert (await latest(s, key)).step_name == "paid"
        if is_sqlite(database_url) or grouped() > before:
            break
    if is_sqlite(database_url):
        assert grouped() == before  # one transaction at a time: nothing to group
    else:
        assert grouped() > before, "40 concurrent saves were each written alone, in five bursts"


async def test_a_refused_save_in_a_group_is_refused_alone_and_the_others_are_saved(harness: Harness) -> None:
    s = harness.alpha
    ok = [new_key() for _ in range(30)]
    stale, finished, unknown = new_key(), new_key(), new_key()
    for key in [*ok, stale, finished]:
        await start(s, key, "exec-1")
        await save(s, item(key, "one", {"n": 1}))
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=finished, execution_id="exec-1"), metadata=s.metadata)
    calls = [save(s, item(key, "two", {"n": 2})) for key in ok]
    calls[10:10] = [save(s, item(stale, "two", {"n": 2}, expected_sequence=7)),
                    save(s, item(finished, "two", {"n": 2})),
                    save(s, item(unknown, "two", {"n": 2}))]
    results = await asyncio.gather(*calls, return_exceptions=True)
    refused = results[10:13]
    saved = results[:10] + results[13:]
    codes = [r.code() if isinstance(r, grpc.aio.AioRpcError) else r for r in refused]
    assert codes == [grpc.StatusCode.ABORTED, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND], codes
    assert "expected newest sequence 7 but it is 1" in refused[0].details()
    assert all(not isinstance(r, BaseException) and r.results[0].checkpoint.sequence == 2 for r in saved), saved
    assert (await latest(s, stale)).sequence == 1 and (await latest(s, finished)).sequence == 1


async def test_concurrent_saves_of_one_instance_decide_as_saved_one_after_another(harness: Harness) -> None:
    s = harness.alpha
    key, twin = new_key(), new_key()
    await start(s, key, "exec-1")
    await start(s, twin, "exec-1")
    await save(s, item(key, "one", {"n": 1}))
    # Both expect sequence 1: one of them is first, the other finds 2 and is refused.
    fenced = await asyncio.gather(save(s, item(key, "two", {"n": 2}, expected_sequence=1)),
                                  save(s, item(key, "three", {"n": 3}, expected_sequence=1)),
                                  return_exceptions=True)
    won = [r for r in fenced if not isinstance(r, BaseException)]
    lost = [r for r in fenced if isinstance(r, grpc.aio.AioRpcError)]
    assert len(won) == 1 and len(lost) == 1 and lost[0].code() == grpc.StatusCode.ABORTED
    assert won[0].results[0].checkpoint.sequence == 2
    # The same save sent twice at once (a retry racing the original): one checkpoint, the other its duplicate.
    same = await asyncio.gather(*(save(s, item(twin, "paid", {"n": 1})) for _ in range(2)))
    assert [r.results[0].checkpoint.sequence for r in same] == [1, 1]
    assert sorted(r.results[0].deduplicated for r in same) == [False, True]


@pytest.mark.parametrize("concurrency", [1, 8])
async def test_the_saved_rows_equal_what_one_at_a_time_writes(harness: Harness, concurrency: int) -> None:
    s = harness.alpha
    keys = [new_key() for _ in range(8)]
    for key in keys:
        await start(s, key, "exec-1")
    sem = asyncio.Semaphore(concurrency)

    async def one(key: str) -> None:
        async with sem:
            await save(s, item(key, "paid", {"order": key}, lease_seconds=45))

    await asyncio.gather(*(one(k) for k in keys))
    for key in keys:
        cp = await latest(s, key)
        inst = (await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                              metadata=s.metadata)).instance
        assert (cp.sequence, cp.step_name, cp.execution_id, cp.node_name) == (1, "paid", "exec-1",
                                                                              "Durable Checkpoint")
        assert (inst.last_sequence, inst.last_step, inst.checkpoint_count, inst.lease_owner) == (1, "paid", 1,
                                                                                                   "exec-1")
