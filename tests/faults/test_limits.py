"""Message-size edges and pathological JSON: clean answers, no partial rows, bounded memory."""

from __future__ import annotations

import json

import grpc
import psutil
import pytest

from tests.faults.infra import check_invariants
from tests.faults.report import TALLY
from tests.sidecar.helpers import SidecarProcess, Stubs, channel
from tests.sidecar.test_checkpoints import item, latest, new_key, save, start

LIMIT = 12 * 1024 * 1024


def _state_of_size(n: int) -> bytes:
    """A JSON document of exactly n bytes."""
    head, tail = b'{"pad": "', b'"}'
    return head + b"x" * (n - len(head) - len(tail)) + tail


async def test_state_size_edges_and_10mb_with_bounded_memory(database_url: str) -> None:
    proc = SidecarProcess({"DURABLE_DATABASE_URL": database_url, "DURABLE_REDIS_URL": "redis://127.0.0.1:6379/0",
                           "DURABLE_AUTH_TOKENS": "limit-token-1=ns-limits", "DURABLE_AUTO_MIGRATE": "false",
                           "DURABLE_MAX_STATE_BYTES": str(LIMIT)})
    proc.start()
    try:
        ch = channel(proc.port)
        s = Stubs(ch, "limit-token-1")
        key = new_key()
        await start(s, key)
        assert proc.proc is not None
        rss_start = psutil.Process(proc.proc.pid).memory_info().rss
        peak = rss_start
        for n, ok in ((LIMIT - 1, True), (LIMIT, True), (LIMIT + 1, False), (10 * 1024 * 1024, True)):
            raw = _state_of_size(n)
            assert len(raw) == n
            if ok:
                reply = await save(s, item(key, f"size-{n}", raw))
                assert reply.results[0].checkpoint.size_bytes == n
                assert (await latest(s, key)).state_json == raw
            else:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await save(s, item(key, f"size-{n}", raw))
                assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert str(LIMIT) in (err.value.details() or "")
            peak = max(peak, psutil.Process(proc.proc.pid).memory_info().rss)
        assert check_invariants(database_url) == []
        # Four states of ~10-12 MB went through: memory stays within a bound of a few copies, not a leak per call.
        growth_mb = (peak - rss_start) / 2**20
        assert growth_mb < 400, f"sidecar grew by {growth_mb:.0f} MB"
        await ch.close()
        TALLY.add("state size limit -1/exact/+1 and 10 MB", faults=1, operations=7,
                  note=f"rss_start={rss_start / 2**20:.0f}MB peak={peak / 2**20:.0f}MB")
    finally:
        proc.stop()


@pytest.mark.parametrize("raw", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    b'"\\ud800"',
    b"NaN",
    b'{"a": 1} trailing',
], ids=["deep-array", "deep-object", "lone-surrogate", "nan", "trailing"])
async def test_pathological_json_is_refused_or_stored_exactly(harness: object, raw: bytes) -> None:
    from tests.conftest import Harness

    assert isinstance(harness, Harness)
    s = harness.alpha
    key = new_key()
    await start(s, key)
    try:
        reply = await save(s, item(key, "weird", raw))
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.details()
        return
    assert reply.results[0].checkpoint.size_bytes == len(raw)
    assert (await latest(s, key)).state_json == raw
    json.loads(raw)  # whatever was accepted is valid JSON for Python too
