"""`python -m bench` runs end to end in tiny runs and reports every scenario; no timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Every (system, op) the full benchmark reports; each must have measured something.
EXPECTED = {
    ("floor", "insert"), ("floor", "grpc_save"), ("floor", "grpc_stream_save"), ("floor", "select"),
    ("floor", "grpc_load"), ("sidecar", "save"), ("sidecar", "load"), ("sidecar", "batch"), ("sidecar", "start"),
    ("sidecar", "n8n_mix"), ("sidecar", "n8n_mix_stream"), ("sidecar", "limit_pair"), ("sidecar", "limit_rate"),
    ("sidecar", "claim_new"), ("sidecar", "claim_done"), ("sidecar", "claim_done_redis_down"),
    ("sidecar", "claim_new_redis_down"), ("dbos", "step_async"), ("dbos", "step_sync"),
}


def test_quick_bench_runs_every_scenario_and_writes_the_report(tmp_path: Path) -> None:
    # Tiny windows and two concurrencies keep this to a smoke check; `make bench-quick` runs 1, 16 and 64.
    argv = [sys.executable, "-m", "bench", "--quick", "--duration", "0.05", "--warmup", "0.02",
            "--concurrency", "1,4", "--sizes", "1024,10485760", "--repeats", "1", "--out", str(tmp_path)]
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    data = json.loads((tmp_path / "results.json").read_text())
    rows = data["results"]
    assert {(r["system"], r["op"]) for r in rows} >= EXPECTED
    failed = [(r["system"], r["op"], r["size_bytes"], r["concurrency"], r["first_error"]) for r in rows if r["errors"]]
    assert not failed, failed
    empty = [(r["system"], r["op"], r["size_bytes"], r["concurrency"]) for r in rows if r["samples"] < 1]
    assert not empty, empty
    ten_mb = [r for r in rows if r["system"] == "sidecar" and r["size_bytes"] == 10 * 1024 * 1024]
    assert ten_mb and all(r["peak_rss_mb"] > 0 for r in ten_mb)

    # The small targets' cells ran a second round next to their floors, and are judged over both rounds.
    repeated = {(r["system"], r["op"], r["concurrency"]) for r in rows if r.get("note") == "repeat 1"}
    assert repeated == {("floor", "insert", 1), ("floor", "grpc_save", 1), ("sidecar", "save", 1),
                        ("sidecar", "start", 1), ("sidecar", "claim_done", 1), ("sidecar", "n8n_mix", 1),
                        ("floor", "grpc_stream_save", 1), ("sidecar", "n8n_mix_stream", 1),
                        ("sidecar", "limit_pair", 1)}, repeated

    summary = (tmp_path / "summary.md").read_text()
    assert "## Targets" in summary and "save 1 KB, c1" in summary
    # save c1, start c1, the n8n mix c1 unary and on a stream, the acquire-and-release c1, claim c1 (no c16)
    assert summary.count("median of 2 rounds") == 6, summary
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_settle_writes_back_and_waits_for_a_quiet_second() -> None:
    # The full bench settles the machine before each round of the small targets (quick runs do not).
    from bench.infra import settle

    done = settle(max_wait_s=3.0)
    assert isinstance(done["checkpoint_s"], float), done  # the bench's admin role may run CHECKPOINT
    assert 1.0 <= done["waited_s"] <= 5.0 and 0.0 <= done["busy_pct"] <= 100.0, done


def test_the_sessions_bench_measures_heartbeats_and_cpu_per_session() -> None:
    from bench import sessions

    result = sessions.run(sessions=2, seconds=2.0, rounds=1)
    assert [r["sessions"] for r in result["rows"]] == [0, 1, 2]
    s = result["summary"]
    assert s["heartbeats_per_s_per_process"] > 0  # the simulated processes did heartbeat
    assert {"sidecar_cpu_ms_per_s_idle", "sidecar_cpu_ms_per_s_per_session_1", "sidecar_cpu_ms_per_s_per_session_2",
            "sidecar_cpu_pct_of_one_core_per_session"} <= set(s)


def test_the_search_bench_times_a_field_search_against_its_floor_and_reads_the_index() -> None:
    from bench import search

    result = search.run(instances=500, queries=5, rounds=1)
    assert [r["call"] for r in result["rows"]] == ["floor", "search", "range"]
    assert result["p50_ms"]["search"] > 0 and result["search_over_floor"] > 0
    assert result["plan"]["index_on_search_fields"] and not result["plan"]["seq_scan_on_search_fields"]


def test_the_bulk_bench_times_a_bulk_retry_against_one_call_per_instance() -> None:
    from bench import bulk

    result = bulk.run(instances=300, floor=20, rounds=1)
    assert result["rows"][0]["bulk_per_s"] > 0 and result["rows"][0]["floor_per_s"] > 0
    assert result["bulk_over_floor"] > 0
