"""`python -m bench.bulk`: a bulk retry over N failed instances (issue 44), in instances per second, against
the floor of retrying them one RetryInstance call at a time.

The sidecar runs as e2e/harness.py starts it (PostgreSQL, Redis, defaults) on a throwaway database. The
failed instances are written by SQL in bulk (the setup, not the measurement), and set back to failed by SQL
before each round. In `--rounds` interleaved rounds:

- the floor: `--floor` instances retried by sequential RetryInstance calls (what a script against the API
  does without bulk operations), in instances per second;
- bulk: one StartOperation retrying all N, timed from the call until GetOperation reports it completed
  (polled every 50 ms), in instances per second.

Reported: the median of each over the rounds and bulk as a ratio to the floor in the same run.
Writes bench/results/bulk-<time>.json and, with --docs, docs/bench/bulk.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import grpc
import harness  # e2e/harness.py, on sys.path through bench/__init__.py
import psycopg
from durable.v1 import audit_pb2, audit_pb2_grpc, common_pb2, events_pb2, events_pb2_grpc, operations_pb2, operations_pb2_grpc

from bench.harness_sidecar import harness_sidecar

ROOT = Path(__file__).resolve().parent.parent
WF, FLOOR_WF = "wf-bench-bulk", "wf-bench-bulk-floor"


def fail_all(url: str, namespace: str, n: int, floor: int) -> float:
    """N (bulk) and `floor` (floor) failed instances: written the first time, set back to failed after."""
    t0 = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        for wf, count in ((WF, n), (FLOOR_WF, floor)):
            conn.execute("""INSERT INTO durable_instances (namespace, workflow_id, instance_key, status,
                                created_by_execution_id, error_message, finished_at, created_at, updated_at)
                            SELECT %(ns)s, %(wf)s, 'order-' || g, 'failed', 'bench', 'payment API 503', now(),
                                   now(), now()
                            FROM generate_series(1, %(n)s) g
                            ON CONFLICT (namespace, workflow_id, instance_key) DO UPDATE
                            SET status = 'failed', error_message = 'payment API 503', finished_at = now(),
                                wake_at = NULL, wake_reason = '', attempt = 0, last_error = ''""",
                         {"ns": namespace, "wf": wf, "n": count})
        conn.execute("ANALYZE durable_instances")
    return time.monotonic() - t0


def floor_rate(channel: grpc.Channel, md: Any, floor: int) -> float:
    stub = events_pb2_grpc.RecoveryServiceStub(channel)
    t0 = time.perf_counter()
    for g in range(1, floor + 1):
        stub.RetryInstance(events_pb2.RetryInstanceRequest(workflow_id=FLOOR_WF, instance_key=f"order-{g}",
                                                           actor="bench", reason="floor"), metadata=md, timeout=10)
    return floor / (time.perf_counter() - t0)


def bulk_rate(channel: grpc.Channel, md: Any, n: int) -> tuple[float, operations_pb2.Operation]:
    stub = operations_pb2_grpc.OperationServiceStub(channel)
    t0 = time.perf_counter()
    op = stub.StartOperation(operations_pb2.StartOperationRequest(
        action=operations_pb2.BULK_ACTION_RETRY, actor="bench", reason="bulk",
        selector=operations_pb2.BulkSelector(workflow_id=WF, statuses=[common_pb2.INSTANCE_STATUS_FAILED])),
        metadata=md, timeout=30).operation
    while op.status != operations_pb2.OPERATION_STATUS_COMPLETED:
        time.sleep(0.05)
        op = stub.GetOperation(operations_pb2.GetOperationRequest(id=op.id), metadata=md, timeout=10).operation
    elapsed = time.perf_counter() - t0
    assert op.acted == n and op.skipped == 0, op
    return n / elapsed, op


def run(instances: int, floor: int, rounds: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with harness.work_dir() as work, harness_sidecar(work, "durable_bench_bulk") as sidecar:
        channel = grpc.insecure_channel(f"127.0.0.1:{sidecar.port}")
        md = sidecar.md
        namespace = audit_pb2_grpc.AuditServiceStub(channel).GetCaller(
            audit_pb2.GetCallerRequest(), metadata=md, timeout=10).namespace
        url = harness.db_url(sidecar.database)
        setup_s = fail_all(url, namespace, instances, floor)
        for r in range(rounds):
            if r:
                fail_all(url, namespace, instances, floor)
            one = floor_rate(channel, md, floor)
            many, op = bulk_rate(channel, md, instances)
            rows.append({"round": r + 1, "floor_per_s": round(one, 1), "bulk_per_s": round(many, 1),
                         "operation": op.id})
        channel.close()
    floor_med = statistics.median(x["floor_per_s"] for x in rows)
    bulk_med = statistics.median(x["bulk_per_s"] for x in rows)
    return {"instances": instances, "floor_instances": floor, "rounds": rounds, "setup_s": round(setup_s, 1),
            "rows": rows, "floor_per_s": round(floor_med, 1), "bulk_per_s": round(bulk_med, 1),
            "bulk_over_floor": round(bulk_med / floor_med, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bulk", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", type=int, default=10_000)
    p.add_argument("--floor", type=int, default=500, help="instances retried one call at a time per round")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is reported)")
    p.add_argument("--quick", action="store_true", help="1,000 instances, a floor of 100, 1 round (a smoke run)")
    p.add_argument("--docs", type=Path, help="also write bulk.json into this folder (docs/bench)")
    args = p.parse_args(argv)
    if args.quick:
        args.instances, args.floor, args.rounds = 1_000, 100, 1
    result = run(args.instances, args.floor, args.rounds)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2) + "\n"
    (out / f"bulk-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(text)
    if args.docs:
        (args.docs / "bulk.json").write_text(text)
    print(f"bulk retry of {args.instances:,} failed instances: {result['bulk_per_s']} instances/s, "
          f"{result['bulk_over_floor']}x the floor of one RetryInstance call each ({result['floor_per_s']}/s) "
          f"(median of {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
