"""`make bench`: floors, the DBOS peer and the sidecar side by side, in one process tree, with a report.

Process tree: this process is the load generator (closed loop, asyncio, one
grpc.aio client); the sidecar (`durable-sidecar serve`, default settings) and
the no-op gRPC server each run in their own child process, so their CPU and
RSS are their own; DBOS runs in a child process with its own load generator,
because it is a library that lives inside the caller. Every store is
throwaway: a database for the sidecar and the raw floor, one for DBOS, and a
redis-server on a free port that is stopped for the "Redis unavailable" runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from bench import payloads, profiling, report
from bench.floors import NoopGrpc, RawPostgres
from bench.infra import (
    GRPC_OPTIONS,
    ChildServer,
    CpuMeter,
    OtherLoad,
    RedisServer,
    RssSampler,
    child_env,
    describe_code,
    describe_machine,
    noop_server,
    settle,
    sidecar_server,
    throwaway_database,
)
from bench.loadgen import Window, WorkerBody
from bench.loadgen import run as run_window
from bench.sidecar import BATCH_ITEMS, SidecarClient

ROOT = Path(__file__).resolve().parent.parent
KB = payloads.KB
# The sidecar's default DURABLE_DB_POOL_MAX: the raw floor gets as many connections.
SIDECAR_POOL_MAX = 10
# Runs at this state size start on a freshly started sidecar: their peak RSS is the memory measurement.
MEMORY_RUN_BYTES = 10 * payloads.MB
# Scenarios profiled with py-spy (--profile): (system, op, size, concurrency).
PROFILED = [("sidecar", "save", KB, 1), ("sidecar", "save", KB, 16), ("sidecar", "claim_done", KB, 1),
            ("sidecar", "claim_new", KB, 1), ("sidecar", "start", 0, 1), ("sidecar", "batch", KB, 1),
            ("sidecar", "batch", KB, 64), ("sidecar", "save", 10 * payloads.MB, 1), ("sidecar", "n8n_mix", 0, 1),
            ("sidecar", "n8n_mix_stream", 0, 1), ("sidecar", "limit_pair", 0, 1), ("sidecar", "limit_rate", 0, 16)]


_T0 = time.monotonic()


def section(title: str) -> None:
    print(f"== [{time.monotonic() - _T0:6.1f} s] {title}", flush=True)


@dataclass
class Plan:
    warmup_s: float
    duration_s: float
    min_rounds: int
    max_s: float
    sizes: list[int]
    concurrency: list[int]
    channels: int
    profile: bool
    dbos_variants: list[str]
    max_inflight_mb: float = 0.0
    # The scenario groups to run (--only); empty: all of them.
    only: frozenset[str] = frozenset()
    # Extra rounds of the small targets' cells, each alternated with its floors (see Bench.repeats).
    repeats: int = 0
    # Settle the machine (infra.settle) before each round of the small targets; off in quick runs.
    settle: bool = False

    def wants(self, group: str) -> bool:
        return not self.only or group in self.only

    def cells(self, size: int) -> list[int]:
        """The concurrencies run at this size: all, unless size × concurrency is above max_inflight_mb."""
        limit = self.max_inflight_mb * payloads.MB
        return [c for c in self.concurrency if not limit or size * c <= limit]


class Bench:
    def __init__(self, plan: Plan, out: Path) -> None:
        self.plan = plan
        self.out = out
        self.results: list[dict[str, Any]] = []
        self.profiles: dict[str, Any] = {}
        self.settled: list[dict[str, Any]] = []
        self.sidecar: ChildServer | None = None
        self.noop: ChildServer | None = None

    async def measure(self, system: str, op: str, size: int, concurrency: int,
                      bodies: list[WorkerBody], *, server: ChildServer | None, items_per_call: int = 1,
                      note: str = "") -> dict[str, Any]:
        plan = self.plan
        window = Window(plan.warmup_s, plan.duration_s, min_samples=max(1, concurrency * plan.min_rounds),
                        max_s=plan.max_s,
                        items_per_call=items_per_call)
        cpu = CpuMeter(server.pid if server else None)
        sampler = RssSampler(server.pid, interval_s=0.01) if server else None
        with sampler or contextlib.nullcontext():
            base_rss = sampler.rss() if sampler else 0
            cpu.start()
            stats = await run_window(bodies, window)
            used = cpu.used()
            peak_rss = sampler.peak() if sampler else 0
        calls = max(1, window.completed)
        row: dict[str, Any] = {
            "system": system, "op": op, "size_bytes": size, "concurrency": concurrency,
            "items_per_call": items_per_call, **stats.as_dict(),
            "cpu_ms_per_call": {k: round(v * 1000 / calls, 4) for k, v in used.items() if k != "others"},
            "others_cpu_pct": round(cpu.others_pct(used), 1),
            "base_rss_mb": round(base_rss / 2**20, 1), "peak_rss_mb": round(peak_rss / 2**20, 1),
        }
        if note:
            row["note"] = note
        self.results.append(row)
        err = f", {stats.errors} errors ({stats.first_error})" if stats.errors else ""
        rate = f"{stats.items_per_s:,.0f} items/s" if items_per_call > 1 else f"{stats.calls_per_s:,.0f}/s"
        print(f"  {system:>8} {op:<24} {payloads.label(size):>6} c{concurrency:<3} p50 {stats.p50_ms:8.3f} ms  "
              f"p99 {stats.p99_ms:8.3f} ms  {rate}{err}", flush=True)
        return row

    async def profiled(self, key: tuple[str, str, int, int], factory: Callable[[], Awaitable[list[WorkerBody]]],
                       items_per_call: int = 1) -> None:
        """Runs a scenario again with py-spy attached to the sidecar; the timed run above stays unperturbed."""
        assert self.sidecar is not None
        _, op, size, concurrency = key
        name = f"{op}-{payloads.label(size).replace(' ', '')}-c{concurrency}"
        path = self.out / f"profile-{name}.txt"
        bodies = await factory()
        recorder = profiling.Recorder(self.sidecar.pid, path)
        try:
            await asyncio.sleep(1.0)  # py-spy attaches
            window = Window(0.2, max(self.plan.duration_s, 3.0), min_samples=concurrency, max_s=self.plan.max_s,
                            items_per_call=items_per_call)
            stats = await run_window(bodies, window)
        finally:
            problem = recorder.stop()
        if problem:
            # Profiling is an aid: without ptrace rights (non-root, Yama) the benchmark still completes.
            print(f"  profiling {name} failed: {problem}", flush=True)
            self.profiles[name] = {"samples": 0, "error": problem, "categories": [], "leaves": [], "inclusive": [],
                                   "p50_ms_while_profiled": stats.p50_ms}
            return
        summary = profiling.summarise(path)
        summary["p50_ms_while_profiled"] = stats.p50_ms
        self.profiles[name] = summary
        top = ", ".join(f"{c['name']} {c['share']:.0%}" for c in summary["categories"][:4])
        print(f"  profiled {name}: {summary['samples']} samples; {top}", flush=True)

    def _channels(self, port: int) -> list[grpc.aio.Channel]:
        # A local subchannel pool: channels opened after a restart must not inherit the old one's backoff.
        return [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[
                    *GRPC_OPTIONS, ("grpc.use_local_subchannel_pool", 1), ("grpc.bench_channel", i)])
                for i in range(self.plan.channels)]

    async def fresh_sidecar(self, client: SidecarClient) -> None:
        """Restarts the sidecar before a memory run, so its peak RSS is that run's alone."""
        assert self.sidecar is not None
        await asyncio.to_thread(self.sidecar.stop)
        await asyncio.to_thread(self.sidecar.start)
        old, client.channels = client.channels, self._channels(self.sidecar.port)
        for ch in old:
            await ch.close()

    async def run_all(self, db_url: str, dbos_url: str, redis: RedisServer) -> None:
        plan = self.plan
        assert self.sidecar is not None and self.noop is not None
        noop_channels = self._channels(self.noop.port)
        client = SidecarClient(self._channels(self.sidecar.port))
        noop = NoopGrpc(noop_channels)
        raw = RawPostgres(db_url, SIDECAR_POOL_MAX)
        one_kb = payloads.state_json(KB)
        try:
            section("checkpoint save (floors: raw INSERT, no-op gRPC)")
            if plan.wants("save"):
                await self.settle("the main round's saves")
            for size in plan.sizes if plan.wants("save") else []:
                payload = payloads.state_json(size)
                for c in plan.cells(size):
                    await raw.open(c)
                    await self.measure("floor", "insert", size, c, raw.insert_bodies(payload, c), server=None)
                    await raw.close()
                    await self.measure("floor", "grpc_save", size, c, noop.save_bodies(payload, c), server=self.noop)
                    keys = await client.save_setup(c)
                    if size >= MEMORY_RUN_BYTES:
                        await self.fresh_sidecar(client)
                    await self.measure("sidecar", "save", size, c, client.save_bodies(keys, payload),
                                       server=self.sidecar)
                if size == KB and plan.dbos_variants and plan.wants("dbos"):
                    # Right after the 1 KB saves, so the comparisons the targets make share the machine's
                    # conditions; the sidecar and the no-op server sit idle meanwhile.
                    await asyncio.to_thread(self.run_dbos, dbos_url, [KB], plan.dbos_variants)
                    section("checkpoint save, continued")

            section("checkpoint load, newest with state (floors: raw SELECT, no-op gRPC)")
            for size in plan.sizes if plan.wants("load") else []:
                payload = payloads.state_json(size)
                for c in plan.cells(size):
                    await raw.open(c)
                    await self.measure("floor", "select", size, c, await raw.select_bodies(payload, c), server=None)
                    await raw.close()
                    await self.measure("floor", "grpc_load", size, c, noop.load_bodies(payload, c), server=self.noop)
                    keys = await client.load_setup(payload, c)
                    if size >= MEMORY_RUN_BYTES:
                        await self.fresh_sidecar(client)
                    await self.measure("sidecar", "load", size, c, client.load_bodies(keys, payload),
                                       server=self.sidecar)

            section(f"batched save, {BATCH_ITEMS} items of 1 KB per call; start-or-resume; idempotency claims")
            if plan.wants("batch"):
                await self.settle("the batched saves")
            for c in plan.concurrency if plan.wants("batch") else []:
                await self.measure("sidecar", "batch", KB, c, await client.batch_bodies(one_kb, c),
                                   server=self.sidecar, items_per_call=BATCH_ITEMS)
            if plan.wants("start"):
                await self.settle("the main round's start-or-resume")
            for c in plan.concurrency if plan.wants("start") else []:
                await self.measure("sidecar", "start", 0, c, client.start_bodies(c), server=self.sidecar)
            if plan.wants("n8n_mix"):
                await self.settle("the main round's n8n order mix")
            for c in plan.concurrency if plan.wants("n8n_mix") else []:
                # The RPCs of durable n8n orders on the documented wiring (bench/n8n_mix.py), latency per RPC.
                await self.measure("sidecar", "n8n_mix", 0, c, client.n8n_mix_bodies(c), server=self.sidecar)
                # The same, carried on an open call stream as the nodes send them, next to its floor.
                await self.measure("floor", "grpc_stream_save", KB, c, noop.stream_save_bodies(one_kb, c),
                                   server=self.noop)
                await self.measure("sidecar", "n8n_mix_stream", 0, c, client.n8n_mix_stream_bodies(c),
                                   server=self.sidecar)
            if plan.wants("limits"):
                await self.settle("the main round's limits")
            for c in plan.concurrency if plan.wants("limits") else []:
                # Issue 43: an Enter and a Leave Section per call, and a Rate Limit acquire per call.
                await self.measure("sidecar", "limit_pair", 0, c, client.limit_pair_bodies(await client.limit_setup(c)),
                                   server=self.sidecar)
                await self.measure("sidecar", "limit_rate", 0, c, client.limit_rate_bodies(await client.limit_setup(c)),
                                   server=self.sidecar)
            if plan.wants("claims"):
                await self.settle("the main round's claims")
            for c in plan.concurrency if plan.wants("claims") else []:
                await self.measure("floor", "grpc_save", KB, c, noop.save_bodies(one_kb, c), server=self.noop,
                                   note="again, next to the claims")
                await self.measure("sidecar", "claim_new", KB, c, client.claim_new_bodies(one_kb, c),
                                   server=self.sidecar)
                keys = await client.completed_keys(one_kb, one_kb, c)
                await self.measure("sidecar", "claim_done", KB, c, client.claim_done_bodies(keys, one_kb, one_kb),
                                   server=self.sidecar)

            await self.repeats(client, noop, raw, one_kb)

            if plan.profile:
                section("profiling the sidecar with py-spy (separate runs)")
                for key in PROFILED:
                    _, op, size, c = key
                    group = {"claim_new": "claims", "claim_done": "claims", "n8n_mix_stream": "n8n_mix",
                             "limit_pair": "limits", "limit_rate": "limits"}.get(op, op)
                    if (size and size not in plan.sizes) or c not in plan.concurrency or not plan.wants(group):
                        continue
                    payload = payloads.state_json(size) if size else one_kb  # start-or-resume sends no state
                    if op == "save":
                        async def save_bodies(p: bytes = payload, c: int = c) -> list[WorkerBody]:
                            return client.save_bodies(await client.save_setup(c), p)

                        await self.profiled(key, save_bodies)
                    elif op == "batch":
                        await self.profiled(key, lambda c=c: client.batch_bodies(one_kb, c), BATCH_ITEMS)
                    elif op == "start":
                        async def start_bodies(c: int = c) -> list[WorkerBody]:
                            return client.start_bodies(c)

                        await self.profiled(key, start_bodies)
                    elif op == "n8n_mix":
                        async def mix_bodies(c: int = c) -> list[WorkerBody]:
                            return client.n8n_mix_bodies(c)

                        await self.profiled(key, mix_bodies)
                    elif op == "n8n_mix_stream":
                        async def mix_stream_bodies(c: int = c) -> list[WorkerBody]:
                            return client.n8n_mix_stream_bodies(c)

                        await self.profiled(key, mix_stream_bodies)
                    elif op in ("limit_pair", "limit_rate"):
                        async def limit_bodies(c: int = c, op: str = op) -> list[WorkerBody]:
                            keys = await client.limit_setup(c)
                            return client.limit_pair_bodies(keys) if op == "limit_pair" else client.limit_rate_bodies(keys)

                        await self.profiled(key, limit_bodies)
                    elif op == "claim_new":
                        async def new_bodies(c: int = c) -> list[WorkerBody]:
                            return client.claim_new_bodies(one_kb, c)

                        await self.profiled(key, new_bodies)
                    elif op == "claim_done":
                        keys = await client.completed_keys(one_kb, one_kb, c)

                        async def done_bodies(keys: list[str] = keys) -> list[WorkerBody]:
                            return client.claim_done_bodies(keys, one_kb, one_kb)

                        await self.profiled(key, done_bodies)

            if not plan.wants("redis_down"):
                return
            section("Redis unavailable (the benchmark's own redis-server, stopped)")
            done_keys = {c: await client.completed_keys(one_kb, one_kb, c) for c in plan.concurrency}
            redis.stop()
            for c in plan.concurrency:
                await self.measure("sidecar", "claim_done_redis_down", KB, c,
                                   client.claim_done_bodies(done_keys[c], one_kb, one_kb), server=self.sidecar)
                await self.measure("sidecar", "claim_new_redis_down", KB, c, client.claim_new_bodies(one_kb, c),
                                   server=self.sidecar)
        finally:
            await client.session.close()
            for ch in [*client.channels, *noop_channels]:
                await ch.close()

    async def settle(self, before: str) -> None:
        """infra.settle before a round the targets compare (not in quick runs: nothing there is judged)."""
        if self.plan.settle:
            done = await asyncio.to_thread(settle)
            self.settled.append({"before": before, **done})
            print(f"  settled before {before}: {done}", flush=True)

    async def repeats(self, client: SidecarClient, noop: NoopGrpc, raw: RawPostgres, one_kb: bytes) -> None:
        """The small targets' cells again, each right after its floors, in `plan.repeats` more rounds.

        This VM's speed drifts by tens of percent within minutes, more than most of
        those targets' margins: the report judges each of them by the median over the
        rounds of the sidecar's figure against the floors of the same round (rows noted
        "repeat N"; round 0 is the main run above).
        """
        plan = self.plan
        if not plan.repeats or not plan.wants("save"):
            return
        section(f"the small targets again, {plan.repeats} more rounds, each next to its floors")
        for r in range(1, plan.repeats + 1):
            note = f"repeat {r}"
            await self.settle(note)
            for c in [c for c in (1, 16) if c in plan.concurrency]:
                await raw.open(c)
                await self.measure("floor", "insert", KB, c, raw.insert_bodies(one_kb, c), server=None, note=note)
                await raw.close()
                await self.measure("floor", "grpc_save", KB, c, noop.save_bodies(one_kb, c), server=self.noop,
                                   note=note)
                await self.measure("sidecar", "save", KB, c, client.save_bodies(await client.save_setup(c), one_kb),
                                   server=self.sidecar, note=note)
                if c == 1:
                    await self.measure("sidecar", "start", 0, c, client.start_bodies(c), server=self.sidecar,
                                       note=note)
                    if plan.wants("n8n_mix"):
                        await self.measure("sidecar", "n8n_mix", 0, c, client.n8n_mix_bodies(c), server=self.sidecar,
                                           note=note)
                        await self.measure("floor", "grpc_stream_save", KB, c, noop.stream_save_bodies(one_kb, c),
                                           server=self.noop, note=note)
                        await self.measure("sidecar", "n8n_mix_stream", 0, c, client.n8n_mix_stream_bodies(c),
                                           server=self.sidecar, note=note)
                    keys = await client.completed_keys(one_kb, one_kb, c)
                    await self.measure("sidecar", "claim_done", KB, c,
                                       client.claim_done_bodies(keys, one_kb, one_kb), server=self.sidecar, note=note)
                    if plan.wants("limits"):
                        await self.measure("sidecar", "limit_pair", 0, c,
                                           client.limit_pair_bodies(await client.limit_setup(c)),
                                           server=self.sidecar, note=note)
                elif plan.wants("limits"):
                    await self.measure("sidecar", "limit_rate", 0, c,
                                       client.limit_rate_bodies(await client.limit_setup(c)), server=self.sidecar,
                                       note=note)

    def run_dbos(self, dbos_url: str, sizes: list[int], variants: list[str]) -> None:
        """DBOS in its own child process (a library: it runs inside its caller), one child per variant."""
        plan = self.plan
        section(f"peer: DBOS Transact, workflows of durable steps ({', '.join(variants)} API; own child process)")
        with tempfile.NamedTemporaryFile("r", suffix=".json", dir=self.out, delete=False) as fh:
            out = Path(fh.name)
        try:
            for variant in variants:
                argv = [sys.executable, "-m", "bench.dbos_peer", "--database-url", dbos_url, "--out", str(out),
                        "--variants", variant, "--sizes", ",".join(map(str, sizes)),
                        "--concurrency", ",".join(map(str, plan.concurrency)), "--warmup", str(plan.warmup_s),
                        "--duration", str(plan.duration_s), "--min-rounds", str(plan.min_rounds),
                        "--max-seconds", str(plan.max_s), "--max-inflight-mb", str(plan.max_inflight_mb)]
                with open(self.out / "dbos.log", "ab") as log:
                    subprocess.run(argv, env=child_env(), check=True, stderr=log)
                self.results.extend(json.loads(out.read_text()))
        finally:
            out.unlink(missing_ok=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="short runs, at least one measured call each, 10 MB not at c64 (a smoke check); docs untouched")
    p.add_argument("--duration", type=float, help="measured seconds per run (default 10, quick 0.3)")
    p.add_argument("--warmup", type=float, help="warm-up seconds per run (default 2, quick 0.05)")
    p.add_argument("--max-inflight-mb", type=float,
                   help="skip runs whose state size × concurrency exceeds this (default: none, quick 200)")
    p.add_argument("--sizes", help="comma-separated state sizes in bytes (default 1 KB to 10 MB)")
    p.add_argument("--concurrency", default="1,16,64", help="comma-separated worker counts (default 1,16,64)")
    p.add_argument("--channels", type=int, default=1, help="grpc.aio channels shared by the workers (default 1)")
    p.add_argument("--profile", action="store_true", help="also profile chosen sidecar runs with py-spy")
    p.add_argument("--dbos-variants", default="async,sync", help="DBOS APIs to run: async, sync or both")
    p.add_argument("--only", default="",
                   help="comma-separated scenario groups to run (default all): save, load, batch, start, n8n_mix, "
                        "limits, claims, redis_down, dbos (save and load include their floors)")
    p.add_argument("--repeats", type=int,
                   help="extra rounds of the small targets' cells next to their floors (default 2, quick 0)")
    p.add_argument("--out", type=Path, help="results directory (default bench/results/<time>)")
    p.add_argument("--docs", type=Path, help="also write summary.md and chart.png here (ignored with --quick)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quick = args.quick
    plan = Plan(
        warmup_s=args.warmup if args.warmup is not None else (0.05 if quick else 2.0),
        duration_s=args.duration if args.duration is not None else (0.3 if quick else 10.0),
        # Full runs: every worker measured at least twice; quick runs: at least one measured call.
        min_rounds=0 if quick else 2,
        max_s=60.0 if quick else 180.0,
        sizes=[int(s) for s in args.sizes.split(",")] if args.sizes else list(payloads.SIZES),
        concurrency=[int(c) for c in args.concurrency.split(",")],
        channels=args.channels,
        profile=args.profile,
        dbos_variants=[v for v in args.dbos_variants.split(",") if v],
        max_inflight_mb=args.max_inflight_mb if args.max_inflight_mb is not None else (200.0 if quick else 0.0),
        only=frozenset(g for g in args.only.split(",") if g),
        repeats=args.repeats if args.repeats is not None else (0 if quick else 2),
        settle=not quick,
    )
    if KB not in plan.sizes:
        plan.sizes.insert(0, KB)  # batches, claims and the targets are all at 1 KB
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or ROOT / "bench" / "results" / (stamp + ("-quick" if quick else ""))
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m bench " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    print(f"bench: results in {out}", flush=True)
    started = dt.datetime.now(dt.UTC)
    other = OtherLoad()
    machine = describe_machine()
    bench = Bench(plan, out)
    redis = RedisServer()
    with throwaway_database("durable_bench") as db_url, throwaway_database("durable_bench_dbos") as dbos_url:
        try:
            redis.start()
            bench.sidecar = sidecar_server(db_url, redis.url, out)
            bench.sidecar.start()
            bench.noop = noop_server(out)
            bench.noop.start()
            asyncio.run(bench.run_all(db_url, dbos_url, redis))
            bench.sidecar.stop()
            bench.noop.stop()
            # The asyncio API at the other sizes; the thread API only at 1 KB, the size the targets use.
            larger = [s for s in plan.sizes if s != KB]
            if "async" in plan.dbos_variants and larger and plan.wants("dbos"):
                bench.run_dbos(dbos_url, larger, ["async"])
        finally:
            for server in (bench.sidecar, bench.noop):
                if server is not None:
                    server.stop()
            redis.stop()
    finished = dt.datetime.now(dt.UTC)
    data = {
        "meta": {
            "command": command, "started": started.isoformat(timespec="seconds"),
            "finished": finished.isoformat(timespec="seconds"), "quick": quick,
            "plan": {**plan.__dict__, "only": sorted(plan.only)}, "machine": machine, "other_load": other.report(), "code": describe_code(ROOT),
            "pid": os.getpid(), "settled": bench.settled,
        },
        "results": bench.results,
        "profiles": bench.profiles,
    }
    (out / "results.json").write_text(json.dumps(data, indent=1))
    docs = None if quick else args.docs
    report.write(data, out, docs)
    section("done")
    if plan.only:
        print(f"bench: wrote {out / 'results.json'}, {out / 'summary.md'} (a subset: no chart, docs untouched)",
              flush=True)
        return 0
    print(f"bench: wrote {out / 'results.json'}, {out / 'summary.md'}, {out / 'chart.png'}"
          + (f"; and {docs}/summary.md, {docs}/chart.png" if docs else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
