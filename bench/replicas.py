"""Throughput of one and of two sidecar processes on one PostgreSQL database (README "How it scales").

`python -m bench.replicas`: a throwaway database on the machine's PostgreSQL, no Redis
(saves never read the cache), 1 KB checkpoint saves from one closed-loop load generator
at concurrency 32, split over the sidecars' channels. Every process shares this
machine's cores, so the figure says what a second replica adds *here*, not on a
machine of its own. Not part of `make bench`.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import grpc

from bench.infra import sidecar_server, throwaway_database
from bench.loadgen import Window, run
from bench.payloads import KB, state_json
from bench.sidecar import SidecarClient


async def _measure(ports: list[int], concurrency: int, warmup_s: float, duration_s: float) -> tuple[float, float]:
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{p}") for p in ports]
    try:
        client = SidecarClient(channels)
        keys = await client.save_setup(concurrency)
        stats = await run(client.save_bodies(keys, state_json(KB)), Window(warmup_s, duration_s))
        assert stats.errors == 0, stats.first_error
        return stats.calls_per_s, stats.p95_ms
    finally:
        for ch in channels:
            await ch.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as logs, throwaway_database("bench_replicas") as url:
        servers = [sidecar_server(url, "", Path(logs), DURABLE_LOG_LEVEL="WARNING") for _ in range(2)]
        for i, s in enumerate(servers):
            s.name = f"sidecar{i}"
            s.log_path = Path(logs) / f"{s.name}.log"
        try:
            servers[0].start()
            one = asyncio.run(_measure([servers[0].port], args.concurrency, args.warmup, args.duration))
            servers[1].start()
            two = asyncio.run(_measure([s.port for s in servers], args.concurrency, args.warmup, args.duration))
        finally:
            for s in servers:
                s.stop()
    print(f"1 KB saves, concurrency {args.concurrency}, {args.duration:.0f} s measured, one PostgreSQL database:")
    print(f"  one sidecar:  {one[0]:7.0f} saves/s  p95 {one[1]:.1f} ms")
    print(f"  two sidecars: {two[0]:7.0f} saves/s  p95 {two[1]:.1f} ms")


if __name__ == "__main__":
    main()
