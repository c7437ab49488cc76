"""The n8n benchmark (bench/n8n.py, `make bench`) in its smoke form: it runs and yields numbers.

Tiny counts against the suite's own n8n and sidecar; no timing assertion (the machine is shared).
"""

from __future__ import annotations

import sys

from conftest import Stack
from harness import REPO, db_url, free_port

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import n8n as bench_n8n
from bench import n8n_client, n8n_report, stream_floor


def test_n8n_benchmark_runs(stack: Stack, tmp_path: object) -> None:
    # The sidecar with its Prometheus endpoint on (same port, so n8n's credential still reaches it).
    metrics_port = free_port()
    stack.sidecar.reconfigure({"DURABLE_METRICS_ADDRESS": f"127.0.0.1:{metrics_port}"})
    assert stack.main.proc is not None and stack.sidecar.process.proc is not None
    target = bench_n8n.Target(stack.n8n.url, stack.main.proc.pid, stack.sidecar.process.proc.pid,
                              db_url(stack.n8n.database), f"http://127.0.0.1:{metrics_port}/metrics", stack.services)
    api_key = stack.n8n.create_api_key("bench-smoke")
    ids = bench_n8n.create_workflows(stack.n8n, api_key, stack.services.url, "durableSidecarE2E")
    result = bench_n8n.run_workloads(target, bench_n8n.SMOKE, ids)
    rows = result["rows"]
    assert {(r["workflow"], r["concurrency"]) for r in rows} == {
        (k, c) for k in bench_n8n.WORKFLOWS for c in bench_n8n.SMOKE.concurrency}
    for row in rows:
        assert row["errors"] == 0, row
        assert row["orders"] > 0 and row["p50_ms"] is not None and row["orders_per_s"], row
        assert row["cpu_ms_per_order"]["n8n"] >= 0 and row["execution_data_bytes"], row
        assert row["rpcs_per_order"] is not None, row
    durable = [r for r in rows if r["workflow"].startswith("durable")]
    # Each durable order starts its instance and saves: the order's own RPCs, the process's session apart.
    assert all(r["rpcs_per_order"] > 0 and {"StartOrResume", "SaveCheckpoints"} <= set(r["rpcs_by_method"])
               for r in durable), durable
    # The documented wiring's count, on both intakes (durable-respond with the door's error output, as the examples
    # wire it): the Resume Point and each Save claim the next key ahead, so no Claim call of its own.
    assert all(r["rpcs_per_order"] == len(bench_n8n.CALLS) + 1 and "Claim" not in r["rpcs_by_method"]
               for r in durable), durable
    assert all(r["rpcs_per_order"] == 0 for r in rows if r["workflow"] in ("plain", "plain-respond")), rows
    data = {"meta": {"command": "e2e smoke", "started": "", "finished": "", "plan": bench_n8n.SMOKE.__dict__,
                     "n8n": "", "other_load": {"machine_busy_pct": 0, "loadavg_start": [0, 0, 0]},
                     "code": {"commit": "test"}, "quick": True},
            "rows": rows, "ratios": bench_n8n.ratios(rows, bench_n8n.durable_node_count(
                bench_n8n.workflows(stack.services.url, "x")["durable"]), result["rounds"]), "profiles": {},
            "client": n8n_client.run(orders=2, gaps_ms=[15.0], rounds=1)}
    assert all(f["p50_ratio_c1"] is not None for f in data["ratios"]["intakes"].values())
    assert data["client"][0]["rpcs_per_order"] == 4 and data["client"][0]["gap_ms"] == 15
    n8n_report.write(data, tmp_path, None)  # type: ignore[arg-type]
    summary = (tmp_path / "n8n-summary.md").read_text()  # type: ignore[operator]
    assert summary.startswith("# n8n benchmark") and "the RPC client measured whole" in summary


def test_stream_floor_runs() -> None:
    # bench/stream_floor.py (findings.md, section 6): both kinds of call, both spacings, each answered.
    rows = stream_floor.run(calls=30, gap_calls=3, rounds=1)
    cells = {(r["kind"], r["gap_ms"]) for r in rows if "round" in r}
    assert cells == {(k, g) for k in ("unary", "stream") for g in (0, 15)}, rows
    assert all(r["client_cpu_ms"] > 0 and r["server_cpu_ms"] > 0 and r["wall_ms"] > 0 for r in rows if "round" in r)
