"""`python -m bench.n8n_rpcs`: the durable n8n order's 4 RPCs replayed against one sidecar, its CPU per RPC.

What bench/n8n.py's durable workflow sends per order, without n8n: StartOrResume with the
webhook's item as start item (include_state) that also claims the first call's key
(claim_on_start: the Resume Point claims ahead for the Idempotency Guard it feeds, with the
v2 Guard's fingerprint {instanceKey, workflowId}, tied to the instance), then per call a
SaveCheckpoints item with STATE_MODE_ADD_STEP_RESULT that completes the key and claims the
next call's (claim_next), the last one completing the instance instead (complete_instance:
the node's Save option Complete Instance, no CompleteInstance call). The Guards send nothing. The
sidecar runs as e2e/harness.py starts it (PostgreSQL, Redis, metrics on, log level warning);
its CPU is read from /proc/<pid>/task/*/schedstat (nanoseconds, every thread) around each
call, so each RPC kind gets its own figure. `--gap-ms` sleeps between calls, as n8n's nodes
do, to see what an idle sidecar pays per wake-up. `DURABLE_E2E_SIDECAR` runs another build.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import harness  # e2e/harness.py, on sys.path through bench/__init__.py
from durable.v1 import (
    checkpoint_pb2,
    checkpoint_pb2_grpc,
    idempotency_pb2,
    instance_pb2,
    instance_pb2_grpc,
)

from bench.harness_sidecar import harness_sidecar, order_parser

CALLS = ("payment", "inventory", "shipping")
WORKFLOW = "bench-n8n-rpcs"
# StartOrResume, then a SaveCheckpoints per call (the Guards' claims ride on them; the last completes the instance).
RPCS_PER_ORDER = 1 + len(CALLS)


def cpu_ns(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass  # a thread that ended meanwhile
    return total


def run(orders: int, gaps_ms: list[float], warmup: int = 5) -> list[dict[str, Any]]:
    rows = []
    with harness.work_dir() as work, \
            harness_sidecar(work, "durable_bench_rpcs", metrics_port=harness.free_port()) as sidecar:
        assert sidecar.process.proc is not None
        pid = sidecar.process.proc.pid
        channel = grpc.insecure_channel(f"127.0.0.1:{sidecar.port}")
        instances = instance_pb2_grpc.InstanceServiceStub(channel)
        checkpoints = checkpoint_pb2_grpc.CheckpointServiceStub(channel)
        md = sidecar.md
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
            item = {"headers": {"host": "127.0.0.1:5678", "user-agent": "Python-urllib/3.12",
                                "content-type": "application/json", "content-length": "80"},
                    "params": {}, "query": {}, "body": {"orderId": key, "amount": 42.0,
                                                        "email": f"{key}@example.com"},
                    "webhookUrl": "http://localhost:5678/webhook/bench-durable", "executionMode": "production"}
            fingerprint = json.dumps({"instanceKey": key, "workflowId": WORKFLOW}).encode()

            def claim(scope: str) -> idempotency_pb2.ClaimItem:
                return idempotency_pb2.ClaimItem(scope=scope, key=key, payload_json=fingerprint, holder=execution,
                                                 workflow_id=WORKFLOW, instance_key=key)

            start = instance_pb2.StartOrResumeRequest(
                workflow_id=WORKFLOW, instance_key=key, execution_id=execution, include_state=True,
                start_item_json=json.dumps(item).encode(), claim_on_start=claim(CALLS[0]))
            started = timed("StartOrResume", partial(instances.StartOrResume, start, metadata=md, timeout=10), gap)
            attempt = started.start_claim.key.attempt
            for n, call in enumerate(CALLS):
                if not attempt:
                    raise RuntimeError(f"no claim ahead for {call}: the sidecar answered none")
                last = n == len(CALLS) - 1
                result = json.dumps({"ok": True, "service": call, "orderId": key}).encode()
                save = checkpoint_pb2.SaveCheckpointsRequest(items=[checkpoint_pb2.SaveCheckpointItem(
                    workflow_id=WORKFLOW, instance_key=key, step_name=call, state_json=result,
                    execution_id=execution, node_name=f"Save {call}",
                    state_mode=checkpoint_pb2.STATE_MODE_ADD_STEP_RESULT,
                    complete_key=checkpoint_pb2.KeyCompletion(scope=call, key=key, attempt=attempt),
                    complete_instance=last, claim_next=None if last else claim(CALLS[n + 1]))])
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
        channel.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    args = order_parser("python -m bench.n8n_rpcs", __doc__, orders=60).parse_args(argv)
    for row in run(args.orders, args.gap_ms):
        per_kind = ", ".join(f"{k} {v}" for k, v in row["median_cpu_ms"].items())
        print(f"gap {row['gap_ms']:g} ms: sidecar {row['cpu_ms_per_order']} ms CPU per order "
              f"({row['cpu_ms_per_rpc']} per RPC), {row['wall_ms_per_order']} ms wall; median per RPC: {per_kind}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
