"""Soak: DURABLE_SOAK_SECONDS (default 600) at about 70 % of the measured peak; no errors, bounded RSS."""

from __future__ import annotations

import asyncio
import os
import statistics
import time

import grpc
import psutil
import pytest

from tests.faults.infra import check_invariants
from tests.faults.report import TALLY
from tests.sidecar.helpers import SidecarProcess, Stubs, channel
from tests.sidecar.test_checkpoints import item, latest, new_key, save, start

pytestmark = [pytest.mark.soak, pytest.mark.postgres_only(
    reason="the soak measures the production backend for 10 minutes; the embedded database is for a first run")]

WORKERS = 16
STATE = {"order": "x" * 900}


async def _one(s: Stubs, key: str, n: int) -> None:
    await save(s, item(key, f"step-{n % 7}", {**STATE, "n": n}))
    await latest(s, key)


async def _peak(s: Stubs, keys: list[str], seconds: float) -> float:
    done = 0
    end = time.monotonic() + seconds

    async def worker(key: str) -> None:
        nonlocal done
        n = 0
        while time.monotonic() < end:
            n += 1
            await _one(s, key, n)
            done += 1

    await asyncio.gather(*[worker(k) for k in keys])
    return done / seconds


@pytest.mark.timeout(0)
async def test_soak_at_70_percent_of_peak_has_no_errors_and_bounded_memory(database_url: str) -> None:
    seconds = float(os.environ.get("DURABLE_SOAK_SECONDS", "600"))
    proc = SidecarProcess({"DURABLE_DATABASE_URL": database_url, "DURABLE_REDIS_URL": "redis://127.0.0.1:6379/0",
                           "DURABLE_AUTH_TOKENS": "soak-token-1=ns-soak", "DURABLE_AUTO_MIGRATE": "false",
                           "DURABLE_LOG_LEVEL": "WARNING"})
    proc.start()
    assert proc.proc is not None
    ps = psutil.Process(proc.proc.pid)
    try:
        ch = channel(proc.port)
        s = Stubs(ch, "soak-token-1")
        keys = [new_key() for _ in range(WORKERS)]
        for k in keys:
            await start(s, k)
        peak = await _peak(s, keys, 5.0)
        rate = 0.7 * peak
        interval = WORKERS / rate  # per worker
        errors: dict[str, int] = {}
        windows: list[list[float]] = []
        rss: list[int] = []
        window_s = max(seconds / 10, 5.0)
        end = time.monotonic() + seconds
        ops = 0

        async def worker(key: str) -> None:
            nonlocal ops
            n = 0
            next_at = time.monotonic()
            while (now := time.monotonic()) < end:
                if now < next_at:
                    await asyncio.sleep(next_at - now)
                next_at += interval
                n += 1
                t0 = time.perf_counter()
                try:
                    await _one(s, key, n)
                except grpc.aio.AioRpcError as exc:
                    errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
                windows[-1].append(time.perf_counter() - t0)
                ops += 1

        async def sampler() -> None:
            while time.monotonic() < end:
                windows.append([])
                await asyncio.sleep(window_s)
                rss.append(ps.memory_info().rss)

        windows.append([])
        await asyncio.gather(sampler(), *[worker(k) for k in keys])
        await ch.close()
        p99s = [round(statistics.quantiles(w, n=100)[98] * 1000, 2) for w in windows if len(w) > 100]
        assert errors == {}
        assert check_invariants(database_url) == []
        # Memory: after the first window (warm caches, pools), RSS may not keep growing.
        baseline = rss[0]
        growth_mb = (max(rss) - baseline) / 2**20
        assert growth_mb < 64, f"RSS grew {growth_mb:.1f} MB over the soak: {[r // 2**20 for r in rss]}"
        TALLY.add(f"soak {seconds:.0f}s at 70% of {peak:.0f} ops/s", faults=0, operations=ops,
                  note=f"rss_mb={[r // 2**20 for r in rss]} p99_ms_per_window={p99s}")
    finally:
        proc.stop()
