"""`python -m bench.n8n_rpcs`: the durable n8n order's 4 RPCs replayed against one sidecar, its CPU per RPC.

What bench/n8n.py's durable workflow sends per order, without n8n (bench/n8n_mix.py builds the
requests), in a session as the nodes keep one (`--no-session`: the calls alone). The Guards send
nothing. The sidecar runs as e2e/harness.py starts it (PostgreSQL, Redis, metrics on, log level warning);
its CPU is read from /proc/<pid>/task/*/schedstat (nanoseconds, every thread) around each
call, so each RPC kind gets its own figure. `--gap-ms` sleeps between calls, as n8n's nodes
do, to see what an idle sidecar pays per wake-up. `DURABLE_E2E_SIDECAR` runs another build.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import grpc
import harness  # e2e/harness.py, on sys.path through bench/__init__.py
from durable.v1 import checkpoint_pb2_grpc, instance_pb2_grpc, session_pb2_grpc
from durable_sidecar.transport.owners import SESSION_METADATA

from bench import n8n_mix
from bench.harness_sidecar import cpu_ns, harness_sidecar, order_parser
from bench.n8n_mix import CALLS, RPCS_PER_ORDER
from bench.sessions import Process

WORKFLOW = "bench-n8n-rpcs"


def run(orders: int, gaps_ms: list[float], warmup: int = 5, *, session: bool = True) -> list[dict[str, Any]]:
    rows = []
    with harness.work_dir() as work, \
            harness_sidecar(work, "durable_bench_rpcs", metrics_port=harness.free_port()) as sidecar:
        assert sidecar.process.proc is not None
        pid = sidecar.process.proc.pid
        channel = grpc.insecure_channel(f"127.0.0.1:{sidecar.port}")
        instances = instance_pb2_grpc.InstanceServiceStub(channel)
        checkpoints = checkpoint_pb2_grpc.CheckpointServiceStub(channel)
        kept = Process(session_pb2_grpc.SessionServiceStub(channel), sidecar.md, 1) if session else None
        # The calls carry the session, as the nodes' do: each order's first call records its execution.
        md = (*sidecar.md, (SESSION_METADATA, kept.id)) if kept else sidecar.md
        spent: dict[str, list[int]] = {}

        def timed(kind: str, call: Callable[[], Any], gap: float) -> Any:
            before = cpu_ns(pid)
            reply = call()
            spent.setdefault(kind, []).append(cpu_ns(pid) - before)
            if gap:
                time.sleep(gap)
            return reply

        def order(gap: float) -> None:
            key = uuid.uuid4().hex[:12]
            execution = str(uuid.uuid4().int % 10**9)
            start = n8n_mix.start_request(WORKFLOW, key, execution)
            started = timed("StartOrResume", partial(instances.StartOrResume, start, metadata=md, timeout=10), gap)
            attempt = started.start_claim.key.attempt
            for n, call in enumerate(CALLS):
                if not attempt:
                    raise RuntimeError(f"no claim ahead for {call}: the sidecar answered none")
                save = n8n_mix.save_request(WORKFLOW, key, execution, n, attempt)
                saved = timed("SaveCheckpoints",
                              partial(checkpoints.SaveCheckpoints, save, metadata=md, timeout=10), gap)
                attempt = saved.results[0].next_claim.key.attempt

        for _ in range(warmup):
            order(0)
        for gap_ms in gaps_ms:
            spent.clear()
            before, started = cpu_ns(pid), time.monotonic()
            for _ in range(orders):
                order(gap_ms / 1000)
            total_ms = (cpu_ns(pid) - before) / 1e6
            rows.append({"gap_ms": gap_ms, "orders": orders,
                         "cpu_ms_per_order": round(total_ms / orders, 2),
                         "cpu_ms_per_rpc": round(total_ms / orders / RPCS_PER_ORDER, 3),
                         "wall_ms_per_order": round((time.monotonic() - started) * 1000 / orders, 1),
                         "median_cpu_ms": {k: round(statistics.median(v) / 1e6, 3) for k, v in spent.items()}})
        if kept:
            kept.close()
        channel.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = order_parser("python -m bench.n8n_rpcs", __doc__, orders=60)
    p.add_argument("--no-session", action="store_true",
                   help="send the calls without a session (the nodes always keep one): the calls' own cost")
    args = p.parse_args(argv)
    for row in run(args.orders, args.gap_ms, session=not args.no_session):
        per_kind = ", ".join(f"{k} {v}" for k, v in row["median_cpu_ms"].items())
        print(f"gap {row['gap_ms']:g} ms: sidecar {row['cpu_ms_per_order']} ms CPU per order "
              f"({row['cpu_ms_per_rpc']} per RPC), {row['wall_ms_per_order']} ms wall; median per RPC: {per_kind}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
