"""`python -m bench.sessions`: what sessions cost (issue 39): heartbeats per n8n process, sidecar CPU per session.

Each simulated n8n process does what the node package's shared client does: OpenSession, a
WatchSession stream held open, and a Heartbeat at the interval OpenSession answers (one second
by default). The sidecar runs as e2e/harness.py starts it (PostgreSQL, Redis, every session
setting at its default) and its CPU is read from /proc/<pid>/task/*/schedstat. Rounds of `--seconds`
interleave 0, 1 and `--sessions` processes; the figure is the median over `--rounds` rounds of
(CPU with N sessions - CPU with none) / N per second of wall time, so the sidecar's own sweep
(one transaction a heartbeat interval, whatever the number of sessions) is the floor, measured in
the same run. Writes bench/results/sessions-<time>.json and, with --docs, docs/bench/sessions.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import harness  # e2e/harness.py, on sys.path through bench/__init__.py
from durable.v1 import session_pb2, session_pb2_grpc

from bench.harness_sidecar import cpu_ns, harness_sidecar

ROOT = Path(__file__).resolve().parent.parent


class Process:
    """One simulated n8n process: its session, its watch stream and its heartbeats on a thread."""

    def __init__(self, stub: session_pb2_grpc.SessionServiceStub, md: Any, pid: int) -> None:
        opened = stub.OpenSession(session_pb2.OpenSessionRequest(host="bench-host", pid=pid, mode="worker",
                                                                 client="bench"), metadata=md, timeout=10)
        self.id = opened.session.session_id
        self.interval = opened.heartbeat_interval_ms / 1000
        self.stub, self.md = stub, md
        self.beats = 0
        self.stopping = threading.Event()
        self.watch = stub.WatchSession(session_pb2.WatchSessionRequest(session_id=self.id), metadata=md)
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        while not self.stopping.wait(self.interval):
            answer = self.stub.Heartbeat(session_pb2.HeartbeatRequest(session_id=self.id), metadata=self.md,
                                         timeout=5)
            assert not answer.ended, "a live bench session ended"
            self.beats += 1

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        self.watch.cancel()
        self.stub.CloseSession(session_pb2.CloseSessionRequest(session_id=self.id), metadata=self.md, timeout=10)


def measure(stub: session_pb2_grpc.SessionServiceStub, md: Any, server_pid: int, sessions: int,
            seconds: float, round_no: int) -> dict[str, Any]:
    processes = [Process(stub, md, 10_000 * round_no + i + 1) for i in range(sessions)]
    try:
        time.sleep(min(2.0, seconds / 4))  # every heartbeat thread in step
        beats0 = sum(p.beats for p in processes)
        cpu0, t0 = cpu_ns(server_pid), time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        cpu_ms = (cpu_ns(server_pid) - cpu0) / 1e6
        beats = sum(p.beats for p in processes) - beats0
    finally:
        for p in processes:
            p.close()
    return {"sessions": sessions, "wall_s": round(wall, 2), "sidecar_cpu_ms_per_s": round(cpu_ms / wall, 3),
            "heartbeats_per_s_per_process": round(beats / wall / sessions, 3) if sessions else 0.0}


def run(sessions: int, seconds: float, rounds: int) -> dict[str, Any]:
    with harness.work_dir() as work, harness_sidecar(work, "durable_bench_sessions") as sidecar:
        assert sidecar.process.proc is not None
        pid = sidecar.process.proc.pid
        channel = grpc.insecure_channel(f"127.0.0.1:{sidecar.port}")
        stub = session_pb2_grpc.SessionServiceStub(channel)
        rows: list[dict[str, Any]] = []
        for r in range(rounds):
            for n in (0, 1, sessions):  # interleaved: the floor (no session) in every round
                rows.append({"round": r + 1, **measure(stub, sidecar.md, pid, n, seconds, r + 1)})
        channel.close()
    floor = {r["round"]: r["sidecar_cpu_ms_per_s"] for r in rows if r["sessions"] == 0}
    per_session = {n: statistics.median([(r["sidecar_cpu_ms_per_s"] - floor[r["round"]]) / n
                                         for r in rows if r["sessions"] == n]) for n in (1, sessions)}
    beats = statistics.median([r["heartbeats_per_s_per_process"] for r in rows if r["sessions"] == sessions])
    return {"rows": rows, "sessions": sessions, "seconds_per_round": seconds, "rounds": rounds,
            "summary": {"heartbeats_per_s_per_process": round(beats, 3),
                        "sidecar_cpu_ms_per_s_idle": round(statistics.median(floor.values()), 3),
                        "sidecar_cpu_ms_per_s_per_session_1": round(per_session[1], 3),
                        f"sidecar_cpu_ms_per_s_per_session_{sessions}": round(per_session[sessions], 3),
                        "sidecar_cpu_pct_of_one_core_per_session": round(per_session[sessions] / 10, 4)}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sessions", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=50, help="simulated n8n processes in the largest cell")
    p.add_argument("--seconds", type=float, default=20.0, help="wall time measured per cell")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is reported)")
    p.add_argument("--quick", action="store_true", help="5 sessions, 4 s cells, 1 round (a smoke run)")
    p.add_argument("--docs", type=Path, help="also write sessions.json into this folder (docs/bench)")
    args = p.parse_args(argv)
    if args.quick:
        args.sessions, args.seconds, args.rounds = 5, 4.0, 1
    result = run(args.sessions, args.seconds, args.rounds)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2) + "\n"
    (out / f"sessions-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(text)
    if args.docs:
        (args.docs / "sessions.json").write_text(text)
    s = result["summary"]
    print(f"sessions: {s['heartbeats_per_s_per_process']} heartbeats/s per n8n process; sidecar CPU "
          f"{s[f'sidecar_cpu_ms_per_s_per_session_{args.sessions}']} ms per s per session with {args.sessions} "
          f"sessions ({s['sidecar_cpu_pct_of_one_core_per_session']} % of a core), idle sidecar "
          f"{s['sidecar_cpu_ms_per_s_idle']} ms per s (median of {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
