"""summary.md: the targets, how the run was measured, and every number in tables."""

from __future__ import annotations

import math
from typing import Any

from bench.payloads import KB, MB, label
from bench.report_rows import Index, _ms, _rate, _x, floor_for
from bench.report_targets import Target, _rss_limit_mb, targets

OP_TITLES = {
    "save": "checkpoint save (1 item)",
    "load": "checkpoint load (newest, with state)",
    "batch": "batched save (100 items of 1 KB)",
    "start": "start-or-resume (new key)",
    "n8n_mix": "an n8n order's RPCs (per RPC), unary",
    "n8n_mix_stream": "an n8n order's RPCs (per call), on one open call stream as the nodes send them",
    "claim_new": "idempotency claim, new key",
    "limit_pair": "Enter + Leave Section (AcquireSlot + ReleaseSlot, two calls), a shared key",
    "limit_rate": "Rate Limit acquire (Throttle), a shared key, under its rate",
    "claim_done": "idempotency claim, completed key (Redis hit)",
    "claim_done_redis_down": "idempotency claim, completed key, Redis down",
    "claim_new_redis_down": "idempotency claim, new key, Redis down",
    "insert": "raw psycopg INSERT, autocommit",
    "select": "raw psycopg SELECT by primary key",
    "grpc_save": "no-op grpc.aio call, save-sized request",
    "grpc_load": "no-op grpc.aio call, load-sized reply",
    "grpc_stream_save": "no-op call on an open stream, save-sized request",
    "step_async": "DBOS durable step (asyncio API)",
    "step_sync": "DBOS durable step (thread API)",
}


# -- markdown --------------------------------------------------------------------------------------------


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _rows_table(ix: Index, system: str, ops: list[str]) -> list[str]:
    headers = ["scenario", "size", "conc.", "p50 ms", "p95 ms", "p99 ms", "calls/s", "items/s", "errors", "floor p50 ms",
               "p50 − floor", "calls/s ÷ floor", "DBOS step p50 ms", "× faster than DBOS", "× DBOS steps/s",
               "server CPU ms/call", "client CPU ms/call", "PostgreSQL CPU ms/call", "others' CPU %"]
    body = []
    for op in ops:
        for size in ix.sizes(system, op):
            for c in ix.concurrencies():
                r = ix.get(system, op, size, c)
                if not r:
                    continue
                floor = floor_for(ix, r) if system == "sidecar" else None
                peer_l = ix.dbos(size, c, by="p50") if op == "save" else None
                peer_t = ix.dbos(size, c, by="tput") if op == "save" else None
                cpu = r.get("cpu_ms_per_call", {})
                body.append([
                    OP_TITLES.get(op, op), label(size) if size else "–", str(c), _ms(r["p50_ms"]), _ms(r["p95_ms"]),
                    _ms(r["p99_ms"]), _rate(r["calls_per_s"]),
                    _rate(r["items_per_s"]) if r["items_per_call"] > 1 else "",
                    f"{r['errors']}" if r["errors"] else "",
                    _ms(floor[0]) if floor else "", f"{r['p50_ms'] - floor[0]:+.3f}" if floor else "",
                    _x(r["calls_per_s"] / floor[1]) if floor else "",
                    _ms(peer_l["p50_ms"]) if peer_l else "", _x(peer_l["p50_ms"] / r["p50_ms"]) if peer_l else "",
                    _x(r["calls_per_s"] / peer_t["calls_per_s"]) if peer_t else "",
                    f"{cpu['server']:.3f}" if "server" in cpu else "", f"{cpu.get('client', math.nan):.3f}",
                    f"{cpu.get('postgres', math.nan):.3f}",
                    f"{r['others_cpu_pct']:.0f}" if "others_cpu_pct" in r else "",
                ])
    return _table(headers, body)


def markdown(data: dict[str, Any]) -> str:
    meta, ix = data["meta"], Index(data["results"])
    m, other = meta["machine"], meta["other_load"]
    lines = [
        "# Benchmarks: the sidecar side by side with raw PostgreSQL, a no-op gRPC call and DBOS Transact",
        "",
        f"Run {meta['started']} → {meta['finished']} (UTC){' — QUICK run: numbers are not stable' if meta['quick'] else ''}.",
        f"Command: `{meta['command']}` ({'a part of ' if meta.get('plan', {}).get('only') else ''}what `make bench` "
        f"runs). Sidecar code: commit {meta.get('code', {}).get('commit', '?')}"
        + (f" plus {n} uncommitted sidecar/proto files" if (n := meta.get("code", {}).get("uncommitted_sidecar_files")) else "")
        + ".",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Linux {m['kernel']}; Python {m['python']}; "
        f"{m['postgresql'].split(' on ')[0]} (synchronous_commit={m['postgresql_settings'].get('synchronous_commit')}, "
        f"fsync={m['postgresql_settings'].get('fsync')}, shared_buffers={m['postgresql_settings'].get('shared_buffers')}×8kB); "
        f"{m['redis'].split(' sha=')[0]}; " + ", ".join(f"{k} {v}" for k, v in m["packages"].items()) + ".",
        "",
        f"Other load: load average {_load(other['loadavg_start'])} at the start, {_load(other['loadavg_end'])} at the end; "
        + (f"the machine's CPUs were {other['machine_busy_pct']:.0f} % busy on average (this benchmark included); "
           if "machine_busy_pct" in other else "")
        + ("CPU used by processes outside the benchmark during the run: "
           + "; ".join(f"{o['process']} {o['cpu_s']} s" for o in other["other_cpu_s"])
           if other["other_cpu_s"] else "no other process used a noticeable amount of CPU") + ".",
        "",
        "## Targets",
        "",
        "Goals for the code, held as ratios against floors measured in the same run (not test assertions).",
        "",
    ]
    tlist = targets(ix)
    profiles = data.get("profiles", {})
    lines += _table(["target", "goal", "measured", "met?", "margin", "where the sidecar's time goes (py-spy)"],
                    [[t.name, t.goal, t.measured, "–" if t.met is None else ("yes" if t.met else "**no**"), t.margin,
                      _cost(profiles, t) if t.met is False else ""]
                     for t in tlist])
    lines += ["", _reference(ix), ""]
    if any(t.met is False for t in tlist):
        lines += ["Why the misses happen and what would close them: [findings.md](findings.md) (hand-written, "
                  "docs/bench/findings.md).", ""]
    lines += ["## How it was measured", "", *_method(meta), ""]
    lines += ["## Sidecar", "", *_rows_table(ix, "sidecar", ["save", "load", "batch", "start", "n8n_mix",
                                                                "n8n_mix_stream", "limit_pair", "limit_rate",
                                                                "claim_new", "claim_done",
                                                                "claim_done_redis_down", "claim_new_redis_down"]), ""]
    lines += ["## Floors", "", *_rows_table(ix, "floor", ["insert", "grpc_save", "grpc_stream_save", "select",
                                                              "grpc_load"]), ""]
    lines += ["## Peer: DBOS Transact", "", *_rows_table(ix, "dbos", ["step_async", "step_sync"]), ""]
    lines += ["## Memory (sidecar process RSS)", ""]
    mem_rows = []
    for op in ("save", "load"):
        for c in ix.concurrencies():
            r = ix.get("sidecar", op, 10 * MB, c)
            if r:
                mem_rows.append([OP_TITLES[op], "10 MB", str(c), f"{r['base_rss_mb']:.0f}", f"{r['peak_rss_mb']:.0f}",
                                 f"{c * 10} MB", f"{_rss_limit_mb(r):.0f}", "yes" if r["peak_rss_mb"] < _rss_limit_mb(r) else "**no**"])
    lines += _table(["scenario", "size", "conc.", "RSS before MB", "peak RSS MB", "in flight", "limit MB", "under?"], mem_rows)
    if data.get("profiles"):
        lines += ["", "## Where the sidecar's time goes (py-spy, separate profiled runs)", "",
                  "Share of the sidecar's sampled (non-idle) Python stacks, by the innermost recognised layer; "
                  "then the sidecar functions that were on the stack most often (inclusive).", ""]
        for name, p in data["profiles"].items():
            if p.get("error"):
                lines.append(f"- **{name}**: not profiled ({p['error']}).")
                continue
            cats = "; ".join(f"{c['name']} {c['share']:.0%}" for c in p["categories"][:7])
            incl = "; ".join(f"`{c['name']}` {c['share']:.0%}" for c in p["inclusive"][:6])
            lines += [f"- **{name}** ({p['samples']} samples, p50 {_ms(p['p50_ms_while_profiled'])} ms while profiled): "
                      f"{cats}.", f"  Sidecar frames: {incl}."]
    lines += ["", "![latency and throughput against state size and concurrency](chart.png)", ""]
    return "\n".join(lines)


def _cost(profiles: dict[str, Any], target: Target) -> str:
    p = profiles.get(target.profile) if target.profile else None
    if not p or not p.get("categories"):
        return "memory: see the table below" if target.name.startswith("10 MB") else "not profiled"
    return f"{target.profile}: " + ", ".join(f"{c['name']} {c['share']:.0%}" for c in p["categories"][:4])


def _load(v: list[float]) -> str:
    return "/".join(f"{x:.1f}" for x in v)


def _reference(ix: Index) -> str:
    save1, save10 = ix.get("sidecar", "save", KB, 1), ix.get("sidecar", "save", 10 * MB, 1)
    best = max((r["calls_per_s"] for c in ix.concurrencies() if (r := ix.get("sidecar", "save", KB, c))), default=math.nan)
    parts = []
    if save1:
        parts.append(f"1 KB save from one client p50 {_ms(save1['p50_ms'])} ms and {_rate(save1['calls_per_s'])} saves/s "
                     "(replaced design: 12 ms, about 83 saves/s)")
    if not math.isnan(best):
        parts.append(f"best 1 KB rate {_rate(best)} saves/s (replaced design: 3,571 at best)")
    if save10:
        parts.append(f"10 MB save p50 {_ms(save10['p50_ms'])} ms (replaced design: 3.2 s)")
    return ("For reference, against the design this product replaces: " + "; ".join(parts) + ".") if parts else ""


def _settled(settled: list[dict[str, Any]]) -> str:
    if not settled:
        return "nothing recorded"
    return "; ".join(f"{s['before']}: CHECKPOINT {s['checkpoint_s']} s, {s['waited_s']} s in all, then {s['busy_pct']} % busy"
                     if isinstance(s["checkpoint_s"], (int, float)) else f"{s['before']}: {s['checkpoint_s']}"
                     for s in settled)


def _method(meta: dict[str, Any]) -> list[str]:
    plan = meta["plan"]
    return [
        f"- Closed loop: N asyncio workers (N = {', '.join(map(str, plan['concurrency']))}) each issue calls back to back "
        f"through {plan['channels']} shared grpc.aio channel(s); wall time per call with `perf_counter_ns`. Each run warms up "
        f"for {plan['warmup_s']} s, then measures for {plan['duration_s']} s and "
        + (f"at least {plan['min_rounds']} calls per worker" if plan["min_rounds"] else "at least one call")
        + ". Latency counts calls that start in the window, throughput calls that end in it."
        + (f" Runs with more than {plan['max_inflight_mb']:.0f} MB in flight (size × concurrency) were skipped."
           if plan.get("max_inflight_mb") else ""),
        *([f"- Repeats: the cells of the first four targets (save 1 KB at c1 and c16, start-or-resume and the claim of "
           f"a completed key at c1) ran {plan['repeats']} more rounds after the main runs, each right after its floors "
           "(raw INSERT, no-op gRPC). Those targets are judged by the median over the rounds of each round's figure "
           "against its own floors, because this VM's speed drifts by tens of percent within minutes; the tables show "
           "the main round only."] if plan.get("repeats") else []),
        *([f"- Settling: before each round of those cells (the main round's saves, start-or-resume and claims, and each "
           f"repeat) and before the batched saves, PostgreSQL wrote back its dirty buffers (`CHECKPOINT`) and the bench waited for a second with the "
           f"machine's CPUs under 20 % busy (at most 30 s), so that no round runs in the write-back of the batch and "
           f"10 MB runs before it. This run: {_settled(meta.get('settled', []))}."] if plan.get("settle") else []),
        "- Processes: the load generator is the bench process; the sidecar (`durable-sidecar serve`, default settings: pool "
        "of 10 PostgreSQL connections, INFO JSON logs to a file) and the no-op gRPC server run in their own child "
        "processes; DBOS runs inside its own child process with its own load generator (it is a library). All share the "
        "machine's 2 cores with PostgreSQL, so the client competes with the server: the ratios, not the absolute numbers, "
        "are what carries over.",
        "- Stores: a throwaway database for the sidecar and the raw floor, another for DBOS (both dropped afterwards), on the "
        "machine's PostgreSQL with synchronous commit on; the sidecar's cache is a redis-server the bench starts on a free "
        "port, and stops for the Redis-unavailable runs.",
        "- Payloads: JSON order documents of exactly the stated size (zlib level 1 compresses them about 3×). The raw floor "
        "INSERTs the same bytes into a `bytea` column, one autocommit transaction per row, through a pool as large as the "
        "sidecar's; the no-op gRPC floor sends the same serialised SaveCheckpoints request (or receives a reply of the "
        "state's size) to a grpc.aio server that does nothing.",
        "- Save: each worker appends to its own instance, a new step each call (never deduplicated). Load: "
        "GetLatestCheckpoint with state (Redis hit up to 1 MB, PostgreSQL and zlib above). Batch: 100 items per call, one "
        "per instance of the worker's own 100. Claims: 1 KB `payload_json`; a completed key replays a 1 KB result.",
        "- DBOS: workflows of 10 steps; each step returns the state (DBOS checkpoints a step's output before going on). "
        "Latency is one step call; throughput is steps/s including workflow start and finish. Both the asyncio and the "
        "thread API were measured at 1 KB, right after the sidecar's 1 KB saves (so the target comparisons share the "
        "machine's conditions); comparisons use the better of the two. The other sizes (asyncio API) run at the end. "
        "DBOS keeps its default settings (a pool of 20 connections).",
        "- CPU ms/call: CPU time of the server process (sidecar or no-op), of the client process (for DBOS: its one "
        "process) and of all PostgreSQL processes (ours and anyone else's) over the whole run (warm-up included), per "
        "completed call. \"Others' CPU %\": the share of the machine's CPU used during the run by processes outside the "
        "benchmark: the noise under that row.",
        "- Memory: every 10 MB run starts on a freshly started sidecar process; its RSS is sampled every 10 ms.",
    ]
