"""`python -m bench.search`: a search by one search field among N instances (issue 44), with its plan.

The sidecar runs as e2e/harness.py starts it (PostgreSQL, Redis, defaults) on a throwaway
database. N instances of one workflow are written by SQL in bulk (the setup, not the measurement:
100,000 StartOrResume calls would take minutes), each with two search fields as SetSearchFields
stores them: customerId (a text; 10 instances per customer) and amount (a number). Then, in
`--rounds` interleaved rounds, `--queries` sequential calls each of:

- the floor: GetInstance of a random instance (a read by primary key through the same sidecar);
- search: ListInstances of the workflow filtered by customerId = a random customer (10 rows);
- range: ListInstances filtered by amount >= a value that leaves about 50 rows, sorted by amount.

Reported: the p50 of each (median over rounds), search and range as a ratio to the floor in the
same run, and the PostgreSQL plan of the search's statement (EXPLAIN ANALYZE of the SQL the store
builds, with the same parameters): it must read durable_search_fields by its index, not scan.
Writes bench/results/search-<time>.json and, with --docs, docs/bench/search.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import grpc
import harness  # e2e/harness.py, on sys.path through bench/__init__.py
import psycopg
from durable.v1 import audit_pb2, audit_pb2_grpc, common_pb2, instance_pb2, instance_pb2_grpc
from durable_sidecar.domain import FieldCondition, InstanceFilter, Page, SearchOp
from durable_sidecar.stores.instance_listing import list_instances_query
from durable_sidecar.stores.postgres.db import DIALECT

from bench.harness_sidecar import harness_sidecar

ROOT = Path(__file__).resolve().parent.parent
WF = "wf-bench-search"
PER_CUSTOMER = 10


def populate(url: str, namespace: str, n: int) -> float:
    """N instances with their two fields, in bulk; seconds taken."""
    t0 = time.monotonic()
    customers = max(1, n // PER_CUSTOMER)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("""INSERT INTO durable_instances (namespace, workflow_id, instance_key, status,
                            created_by_execution_id, created_at, updated_at)
                        SELECT %(ns)s, %(wf)s, 'order-' || g, CASE WHEN g %% 10 = 0 THEN 'completed' ELSE 'running' END,
                               'bench', now() - make_interval(secs => g), now()
                        FROM generate_series(1, %(n)s) g""", {"ns": namespace, "wf": WF, "n": n})
        conn.execute("""INSERT INTO durable_search_fields (namespace, workflow_id, instance_key, name, kind,
                            num_value, text_value)
                        SELECT %(ns)s, %(wf)s, 'order-' || g, 'customerId', 's', 0, 'C-' || (g %% %(c)s)
                        FROM generate_series(1, %(n)s) g
                        UNION ALL
                        SELECT %(ns)s, %(wf)s, 'order-' || g, 'amount', 'n', (g * 7919) %% %(n)s, ''
                        FROM generate_series(1, %(n)s) g""", {"ns": namespace, "wf": WF, "n": n, "c": customers})
        conn.execute("ANALYZE durable_instances")
        conn.execute("ANALYZE durable_search_fields")
    return time.monotonic() - t0


def plan_of(url: str, namespace: str, customer: str) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the statement ListInstances runs for a customerId search, and what it reads."""
    flt = InstanceFilter(workflow_id=WF, fields=(FieldCondition("customerId", SearchOp.EQ, customer),))
    query, params = list_instances_query(DIALECT, namespace, flt, Page(100, ""), now=None)
    with psycopg.connect(url) as conn:
        rows = conn.execute("EXPLAIN (ANALYZE, FORMAT TEXT) " + query, params).fetchall()
    text = "\n".join(r[0] for r in rows)
    return {"text": text,
            "index_on_search_fields": "durable_search_fields_value" in text or "durable_search_fields_pkey" in text,
            "seq_scan_on_search_fields": "Seq Scan on durable_search_fields" in text}


def _timed(call: Any) -> float:
    t0 = time.perf_counter()
    call()
    return (time.perf_counter() - t0) * 1000


def measure(sidecar: harness.Sidecar, namespace: str, n: int, queries: int, rounds: int) -> dict[str, Any]:
    channel = grpc.insecure_channel(f"127.0.0.1:{sidecar.port}")
    stub = instance_pb2_grpc.InstanceServiceStub(channel)
    md = sidecar.md
    customers = max(1, n // PER_CUSTOMER)
    rng = random.Random(44)
    rows: list[dict[str, Any]] = []

    def floor() -> None:
        stub.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=f"order-{rng.randint(1, n)}"),
                         metadata=md, timeout=10)

    def search() -> None:
        customer = f"C-{rng.randrange(customers)}"
        got = stub.ListInstances(instance_pb2.ListInstancesRequest(
            workflow_id=WF, search_fields=[common_pb2.SearchFieldFilter(
                name="customerId", value_json=json.dumps(customer).encode())]), metadata=md, timeout=10)
        assert len(got.instances) == PER_CUSTOMER or n < customers * PER_CUSTOMER, len(got.instances)

    def ranged() -> None:
        low = rng.randrange(n - 50) if n > 50 else 0
        got = stub.ListInstances(instance_pb2.ListInstancesRequest(
            workflow_id=WF, sort_by_field="amount", page_size=50, search_fields=[common_pb2.SearchFieldFilter(
                name="amount", op=common_pb2.SEARCH_FIELD_OP_GTE, value_json=str(low).encode())]),
            metadata=md, timeout=10)
        assert got.instances, "a range search found nothing"

    for fn in (floor, search, ranged):  # warm up
        for _ in range(20):
            fn()
    for r in range(rounds):
        for name, fn in (("floor", floor), ("search", search), ("range", ranged)):
            times = sorted(_timed(fn) for _ in range(queries))
            rows.append({"round": r + 1, "call": name, "p50_ms": round(statistics.median(times), 3),
                         "p95_ms": round(times[int(len(times) * 0.95) - 1], 3)})
    counted = audit_pb2_grpc.AuditServiceStub(channel).CountInstances(
        audit_pb2.CountInstancesRequest(workflow_id=WF), metadata=md, timeout=30)
    channel.close()
    assert counted.total == n, f"{counted.total} instances, expected {n}"
    p50 = {c: statistics.median(x["p50_ms"] for x in rows if x["call"] == c) for c in ("floor", "search", "range")}
    return {"rows": rows, "p50_ms": {k: round(v, 3) for k, v in p50.items()},
            "search_over_floor": round(p50["search"] / p50["floor"], 2),
            "range_over_floor": round(p50["range"] / p50["floor"], 2)}


def run(instances: int, queries: int, rounds: int) -> dict[str, Any]:
    with harness.work_dir() as work, harness_sidecar(work, "durable_bench_search") as sidecar:
        channel = grpc.insecure_channel(f"127.0.0.1:{sidecar.port}")
        namespace = audit_pb2_grpc.AuditServiceStub(channel).GetCaller(
            audit_pb2.GetCallerRequest(), metadata=sidecar.md, timeout=10).namespace
        channel.close()
        url = harness.db_url(sidecar.database)
        setup_s = populate(url, namespace, instances)
        result = measure(sidecar, namespace, instances, queries, rounds)
        result["plan"] = plan_of(url, namespace, "C-7")
    return {"instances": instances, "queries_per_round": queries, "rounds": rounds, "setup_s": round(setup_s, 1),
            **result}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.search", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=200, help="calls per kind and round")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is reported)")
    p.add_argument("--quick", action="store_true", help="2,000 instances, 30 queries, 1 round (a smoke run)")
    p.add_argument("--docs", type=Path, help="also write search.json into this folder (docs/bench)")
    args = p.parse_args(argv)
    if args.quick:
        args.instances, args.queries, args.rounds = 2_000, 30, 1
    result = run(args.instances, args.queries, args.rounds)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2) + "\n"
    (out / f"search-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(text)
    if args.docs:
        (args.docs / "search.json").write_text(text)
    p50, plan = result["p50_ms"], result["plan"]
    print(f"search among {args.instances:,} instances: customerId = X p50 {p50['search']} ms "
          f"({result['search_over_floor']}x GetInstance's {p50['floor']} ms), amount >= X sorted p50 {p50['range']} ms "
          f"({result['range_over_floor']}x); plan reads durable_search_fields by index: "
          f"{plan['index_on_search_fields']}, seq scan: {plan['seq_scan_on_search_fields']} "
          f"(median of {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
