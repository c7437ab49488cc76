"""The peer: DBOS Transact running workflows of durable steps that return the benchmark state.

Runs in its own child process (DBOS keeps process-global state and background
threads) against its own throwaway database, and writes its results as JSON:
`python -m bench.dbos_peer --database-url URL --out FILE [--sizes ...]`.

A DBOS step checkpoints its return value before the workflow goes on, so one
step that returns the state is the peer's equivalent of one checkpoint save.
Latency is the wall time of one step call inside a workflow of STEPS steps;
throughput is steps per second, workflow start and finish included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dbos import DBOS

from bench import payloads
from bench.infra import CpuMeter
from bench.loadgen import Window, WorkerBody, run

STEPS = 10
_window = Window(0, 0)
_states: dict[int, str] = {}


@DBOS.step()
async def save_state(size: int, index: int) -> str:
    return _states[size]


@DBOS.workflow()
async def durable_steps(size: int) -> int:
    # The state is looked up, not passed in, so only the steps' outputs are written (not workflow inputs).
    done = 0
    for index in range(STEPS):
        if _window.done():
            break
        started = time.perf_counter_ns()
        await save_state(size, index)
        _window.record(started, time.perf_counter_ns())
        done += 1
    return done


@DBOS.step()
def save_state_sync(size: int, index: int) -> str:
    return _states[size]


@DBOS.workflow()
def durable_steps_sync(size: int) -> int:
    done = 0
    for index in range(STEPS):
        if _window.done():
            break
        started = time.perf_counter_ns()
        save_state_sync(size, index)
        _window.record(started, time.perf_counter_ns())
        done += 1
    return done


def _bodies(variant: str, size: int, concurrency: int, executor: ThreadPoolExecutor | None) -> list[WorkerBody]:
    async def async_body(window: Window) -> None:
        while not window.done():
            try:
                await durable_steps(size)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                window.failed(exc)

    async def sync_body(window: Window) -> None:
        loop = asyncio.get_running_loop()
        while not window.done():
            try:
                await loop.run_in_executor(executor, durable_steps_sync, size)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                window.failed(exc)

    return [async_body if variant == "async" else sync_body for _ in range(concurrency)]


async def measure(variants: list[str], sizes: list[int], concurrencies: list[int], warmup_s: float,
                  duration_s: float, min_rounds: int, max_s: float, max_inflight_mb: float) -> list[dict[str, Any]]:
    global _window
    results = []
    for variant in variants:
        for size in sizes:
            _states[size] = payloads.state_json(size).decode()
            for concurrency in concurrencies:
                if max_inflight_mb and size * concurrency > max_inflight_mb * payloads.MB:
                    continue
                executor = ThreadPoolExecutor(max_workers=concurrency) if variant == "sync" else None
                _window = Window(warmup_s, duration_s, min_samples=max(1, concurrency * min_rounds), max_s=max_s)
                cpu = CpuMeter(None)
                cpu.start()
                stats = await run(_bodies(variant, size, concurrency, executor), _window)
                used = cpu.used()
                calls = max(1, _window.completed)
                if executor is not None:
                    executor.shutdown(wait=True)
                # The DBOS process is client and engine at once: its CPU is reported as the client's.
                results.append({"system": "dbos", "op": f"step_{variant}", "size_bytes": size,
                                "concurrency": concurrency, "items_per_call": 1, **stats.as_dict(),
                                "cpu_ms_per_call": {k: round(v * 1000 / calls, 4) for k, v in used.items()
                                                    if k != "others"},
                                "others_cpu_pct": round(cpu.others_pct(used), 1)})
                print(f"  dbos step ({variant}) {payloads.label(size)} c{concurrency}: p50 {stats.p50_ms:.2f} ms, "
                      f"{stats.calls_per_s:.0f} steps/s", flush=True)
            _states.pop(size, None)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--variants", default="async")
    parser.add_argument("--sizes", default=",".join(str(s) for s in payloads.SIZES))
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--min-rounds", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--max-inflight-mb", type=float, default=0.0)
    args = parser.parse_args()
    DBOS(config={"name": "durable-bench", "system_database_url": args.database_url, "log_level": "WARNING"})

    async def go() -> list[dict[str, Any]]:
        DBOS.launch()
        try:
            return await measure(args.variants.split(","), [int(s) for s in args.sizes.split(",")],
                                 [int(c) for c in args.concurrency.split(",")], args.warmup, args.duration,
                                 args.min_rounds, args.max_seconds, args.max_inflight_mb)
        finally:
            DBOS.destroy(workflow_completion_timeout_sec=5)

    results = asyncio.run(go())
    with open(args.out, "w") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
