"""Profiles of the durable workflow: n8n under `node --cpu-prof`, the sidecar under py-spy.

n8n's main process is restarted with NODE_OPTIONS=--cpu-prof (V8's sampling profiler; the profile is
written when n8n exits), the durable workflow runs one order at a time, then the plain one as a
reference, and n8n is stopped (SIGTERM, a clean exit writes the profile) and started again without
the profiler. The .cpuprofile is summarised by where the samples were taken: self time by part of
the stack, and inclusive shares of our nodes, of n8n's expression engine and of the RPC client.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench import n8n as bench_n8n
from bench import profiling

# Self time: the first matching rule names the part of the stack a sample's leaf frame is in.
SELF_RULES: list[tuple[str, str]] = [
    ("(garbage collector)", "garbage collection"),
    ("(idle)", "idle"),
    ("(program)", "V8 / native (program)"),
    ("n8n-nodes-durable/dist/shared/transport.js", "our RPC client (bundled grpc-js, protobuf)"),
    ("n8n-nodes-durable/", "our nodes (JavaScript)"),
    ("n8n-workflow/dist/expression", "n8n expression engine"),
    ("@n8n/tournament", "n8n expression engine"),
    ("isolated-vm", "n8n expression engine"),
    ("@n8n_io/riot-tmpl", "n8n expression engine"),
    ("esprima", "n8n expression engine"),
    ("recast", "n8n expression engine"),
    ("ast-types", "n8n expression engine"),
    ("n8n-workflow/", "n8n-workflow (data proxy, paired items, parameters)"),
    ("n8n-core/", "n8n-core (execution engine, node context)"),
    ("typeorm", "n8n's database layer (typeorm, pg)"),
    ("/pg/", "n8n's database layer (typeorm, pg)"),
    ("/pg-protocol/", "n8n's database layer (typeorm, pg)"),
    ("n8n-nodes-base/", "n8n's own nodes (Webhook, HTTP Request)"),
    ("axios", "n8n's own nodes (Webhook, HTTP Request)"),
    ("node:", "Node.js runtime"),
    ("/cli/dist/", "n8n cli (webhooks, executions, push)"),
]


# Inclusive time: a sample counts for every part its stack passes through (so they overlap).
INCLUSIVE: list[tuple[str, str]] = [
    ("our nodes (all their code, RPC client included)", "n8n-nodes-durable/"),
    ("our RPC client (grpc-js, protobuf)", "n8n-nodes-durable/dist/shared/transport.js"),
    ("n8n expression engine (isolated-vm bridge)", "isolated-vm"),
    ("n8n HTTP Request nodes", "HttpRequest"),
    ("n8n's database layer (typeorm)", "typeorm"),
    ("n8n builds the Workflow object (every node's parameters)", "workflow.js:Workflow"),
    ("n8n's data proxy / paired items", "workflow-data-proxy"),
    ("n8n engine: running nodes (runNode)", "workflow-execute.js:runNode"),
    ("garbage collection", "(garbage collector)"),
]


def _category(url: str, function: str) -> str:
    key = url or function
    for needle, name in SELF_RULES:
        if needle in key:
            return name
    return "other n8n dependencies" if url else "V8 / native (program)"


def summarise_cpuprofile(path: Path, orders: int, durable_nodes: int,
                         window_us: tuple[float, float] | None = None) -> dict[str, Any]:
    """Self and inclusive time; only samples inside `window_us` (CLOCK_MONOTONIC µs, V8's clock) when given."""
    prof = json.loads(path.read_text())
    nodes = {n["id"]: n for n in prof["nodes"]}
    parent: dict[int, int] = {}
    for n in prof["nodes"]:
        for child in n.get("children", []):
            parent[child] = n["id"]
    samples = prof.get("samples", [])
    deltas = prof.get("timeDeltas", [])
    weight: Counter[int] = Counter()
    at = float(prof.get("startTime", 0))
    for sid, delta in zip(samples, deltas, strict=False):
        at += delta
        if window_us and not window_us[0] <= at <= window_us[1]:
            continue
        weight[sid] += max(0, delta)  # microseconds
    total_us = sum(weight.values())
    idle_us = sum(w for sid, w in weight.items() if nodes[sid]["callFrame"]["functionName"] == "(idle)")
    busy_us = max(1, total_us - idle_us)
    self_by: dict[str, float] = defaultdict(float)
    inclusive: dict[str, float] = defaultdict(float)
    functions: Counter[str] = Counter()
    for sid, w in weight.items():
        frame = nodes[sid]["callFrame"]
        if frame["functionName"] == "(idle)":
            continue
        self_by[_category(frame.get("url", ""), frame["functionName"])] += w
        functions[f"{frame['functionName'] or '(anonymous)'} {Path(frame.get('url', '')).name}:"
                  f"{frame.get('lineNumber', 0) + 1}"] += w
        seen: set[str] = set()
        cur: int | None = sid
        while cur is not None:
            f = nodes[cur]["callFrame"]
            where = f"{f.get('url', '')}:{f['functionName']}"
            for name, needle in INCLUSIVE:
                if needle in where:
                    seen.add(name)
            cur = parent.get(cur)
        for s in seen:
            inclusive[s] += w
    ms = 1000.0
    out = {
        "busy_ms": round(busy_us / ms, 1),
        "categories": [{"name": k, "share": v / busy_us, "ms": round(v / ms, 1)}
                       for k, v in sorted(self_by.items(), key=lambda kv: -kv[1])],
        "inclusive": [{"name": k, "share": v / busy_us, "ms": round(v / ms, 1)}
                      for k, v in sorted(inclusive.items(), key=lambda kv: -kv[1])],
        "top_functions": [{"name": k, "share": v / busy_us} for k, v in functions.most_common(25)],
        "ms_per_order": round(busy_us / ms / orders, 2) if orders else None,
        "orders": orders,
    }
    client_ms = inclusive.get("our RPC client (grpc-js, protobuf)", 0.0) / ms
    if orders and durable_nodes:
        out["grpc_client_ms_per_durable_node"] = round(client_ms / orders / durable_nodes, 3)
        out["our_nodes_ms_per_durable_node"] = round(
            inclusive.get("our nodes (all their code, RPC client included)", 0.0) / ms / orders / durable_nodes, 3)
    return out


def profile(n8n: Any, target: bench_n8n.Target, out: Path, orders: int) -> dict[str, Any]:
    """Restarts n8n under --cpu-prof, runs `orders` durable orders (py-spy on the sidecar), summarises both."""
    prof_dir = out / "n8n-cpuprofile"
    prof_dir.mkdir(parents=True, exist_ok=True)
    main = n8n.processes[-1]
    main.stop()
    p = n8n.process("main", env={"NODE_OPTIONS": f"--cpu-prof --cpu-prof-dir={prof_dir}"})
    p.start()
    n8n.wait_ready(p)
    for kind in bench_n8n.WORKFLOWS:
        n8n.wait_webhook(bench_n8n.PATHS[kind])
    target.n8n_pid = p.proc.pid
    for kind in bench_n8n.WORKFLOWS:
        bench_n8n.window(target, kind, 1, 5, None)  # warm-up (JIT)
    recorder = profiling.Recorder(target.sidecar_pid, out / "n8n-profile-sidecar.txt")
    problem = None
    windows: dict[str, tuple[float, float]] = {}
    try:
        for kind in ("plain", "control", "durable"):
            start_us = time.monotonic() * 1e6
            bench_n8n.window(target, kind, 1, orders, None)
            windows[kind] = (start_us, time.monotonic() * 1e6)
    finally:
        problem = recorder.stop()
    p.stop(timeout=60)
    result: dict[str, Any] = {}
    files = sorted(prof_dir.glob("*.cpuprofile"), key=lambda f: f.stat().st_size)
    if files:
        nodes = bench_n8n.durable_node_count(bench_n8n.workflows("http://x", "x")["durable"])
        result["n8n"] = summarise_cpuprofile(files[-1], orders, nodes, windows["durable"])
        result["n8n"]["file"] = str(files[-1])
        result["n8n_by_workflow"] = {kind: summarise_cpuprofile(files[-1], orders, nodes, w)
                                     for kind, w in windows.items()}
    else:
        result["n8n"] = {"error": f"no .cpuprofile in {prof_dir} (n8n did not exit cleanly?)", "categories": []}
    if problem:
        result["sidecar"] = {"error": problem, "categories": []}
    else:
        result["sidecar"] = profiling.summarise(out / "n8n-profile-sidecar.txt")
    # n8n again without the profiler (the stack's teardown expects a running main).
    again = n8n.start_main()
    target.n8n_pid = again.proc.pid
    return result
