"""Results → summary.md (targets, ratios, every number) and chart.png (latency and throughput vs size and concurrency).

Also runnable on a saved run: `python -m bench.report bench/results/<run>/results.json [--docs docs/bench]`.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.payloads import KB, MB, label

Row = dict[str, Any]

OP_TITLES = {
    "save": "checkpoint save (1 item)",
    "load": "checkpoint load (newest, with state)",
    "batch": "batched save (100 items of 1 KB)",
    "start": "start-or-resume (new key)",
    "claim_new": "idempotency claim, new key",
    "claim_done": "idempotency claim, completed key (Redis hit)",
    "claim_done_redis_down": "idempotency claim, completed key, Redis down",
    "claim_new_redis_down": "idempotency claim, new key, Redis down",
    "insert": "raw psycopg INSERT, autocommit",
    "select": "raw psycopg SELECT by primary key",
    "grpc_save": "no-op grpc.aio call, save-sized request",
    "grpc_load": "no-op grpc.aio call, load-sized reply",
    "step_async": "DBOS durable step (asyncio API)",
    "step_sync": "DBOS durable step (thread API)",
}


class Index:
    """Rows by (system, op, size, concurrency); rows with a note (repeats) are kept apart."""

    def __init__(self, rows: Iterable[Row]) -> None:
        self.rows = list(rows)
        self._by: dict[tuple[str, str, int, int, str], Row] = {}
        for r in self.rows:
            self._by.setdefault((r["system"], r["op"], r["size_bytes"], r["concurrency"], r.get("note", "")), r)

    def get(self, system: str, op: str, size: int, c: int, note: str = "") -> Row | None:
        row = self._by.get((system, op, size, c, note))
        if row is None or not row.get("samples"):
            return None
        return row

    def near_claims(self, c: int) -> Row | None:
        """The no-op floor measured right next to the claims, or the one from the save block."""
        return self.get("floor", "grpc_save", KB, c, "again, next to the claims") or self.get("floor", "grpc_save", KB, c)

    def dbos(self, size: int, c: int, *, by: str) -> Row | None:
        """The better DBOS variant for this cell: lower p50 (by='p50') or higher throughput (by='tput')."""
        rows = [r for r in (self.get("dbos", "step_async", size, c), self.get("dbos", "step_sync", size, c)) if r]
        if not rows:
            return None
        return min(rows, key=lambda r: r["p50_ms"]) if by == "p50" else max(rows, key=lambda r: r["calls_per_s"])

    def sizes(self, system: str, op: str) -> list[int]:
        return sorted({r["size_bytes"] for r in self.rows if r["system"] == system and r["op"] == op})

    def concurrencies(self) -> list[int]:
        return sorted({r["concurrency"] for r in self.rows})


class Round:
    """One round of the small targets' cells: 0 is the main run, r the rows noted "repeat r" (run.Bench.repeats)."""

    def __init__(self, ix: Index, number: int) -> None:
        self.ix, self.number = ix, number
        self.note = "" if number == 0 else f"repeat {number}"

    def get(self, system: str, op: str, size: int, c: int) -> Row | None:
        return self.ix.get(system, op, size, c, self.note)

    def near_claims(self, c: int) -> Row | None:
        # A repeat round measures one no-op floor per cell, right before its sidecar runs.
        return self.ix.near_claims(c) if self.number == 0 else self.get("floor", "grpc_save", KB, c)


def rounds(ix: Index) -> list[Round]:
    notes = {r.get("note", "") for r in ix.rows}
    return [Round(ix, 0)] + [Round(ix, n) for n in range(1, 100) if f"repeat {n}" in notes]


def over_rounds(ix: Index, figure: Callable[[Round], float | None]) -> tuple[float, list[float]] | None:
    """The median over the rounds of a figure each round computes from its own rows (None: not measured)."""
    values = [v for rd in rounds(ix) if (v := figure(rd)) is not None]
    return (statistics.median(values), values) if values else None


def over_save_floors(op: str, size: int) -> Callable[[Round], float | None]:
    """A round's c1 p50 of the sidecar's `op` over that round's 1 KB save floors (raw INSERT + no-op gRPC)."""
    def figure(rd: Round) -> float | None:
        row, ins, grpc = rd.get("sidecar", op, size, 1), rd.get("floor", "insert", KB, 1), rd.get("floor", "grpc_save", KB, 1)
        return row["p50_ms"] - ins["p50_ms"] - grpc["p50_ms"] if row and ins and grpc else None

    return figure


def _each(values: list[float], fmt: str) -> str:
    if len(values) < 2:
        return ""
    return f"; median of {len(values)} rounds ({', '.join(format(v, fmt) for v in values)})"


@dataclass
class Target:
    name: str
    goal: str
    measured: str
    met: bool | None
    margin: str
    profile: str = ""  # the profiled run (see run.PROFILED) that shows where this target's time goes


def _ms(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def _rate(v: float) -> str:
    if v is None or math.isnan(v):
        return "–"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _x(v: float | None) -> str:
    return "–" if v is None or math.isnan(v) else f"{v:.2f}×"


def save_floor(ix: Index, size: int, c: int) -> tuple[float, float] | None:
    """(p50 ms, calls/s) of the save floor: raw INSERT p50 + no-op gRPC p50; the lower of the two rates."""
    ins, grpc = ix.get("floor", "insert", size, c), ix.get("floor", "grpc_save", size, c)
    if not ins or not grpc:
        return None
    return ins["p50_ms"] + grpc["p50_ms"], min(ins["calls_per_s"], grpc["calls_per_s"])


def load_floor(ix: Index, size: int, c: int) -> tuple[float, float] | None:
    sel, grpc = ix.get("floor", "select", size, c), ix.get("floor", "grpc_load", size, c)
    if not sel or not grpc:
        return None
    return sel["p50_ms"] + grpc["p50_ms"], min(sel["calls_per_s"], grpc["calls_per_s"])


def floor_for(ix: Index, row: Row) -> tuple[float, float, str] | None:
    """The floor a sidecar row is compared with: (p50 ms, calls/s, what it is)."""
    op, size, c = row["op"], row["size_bytes"], row["concurrency"]
    if op == "save":
        f = save_floor(ix, size, c)
        return (*f, "INSERT + no-op gRPC") if f else None
    if op == "load":
        f = load_floor(ix, size, c)
        return (*f, "SELECT + no-op gRPC") if f else None
    grpc = ix.near_claims(c)
    if op in ("claim_done", "claim_done_redis_down") and grpc:
        return grpc["p50_ms"], grpc["calls_per_s"], "no-op gRPC"
    if op in ("claim_new", "claim_new_redis_down", "start"):
        f = save_floor(ix, KB, c)
        return (*f, "INSERT + no-op gRPC (1 KB)") if f else None
    return None


def targets(ix: Index) -> list[Target]:
    out: list[Target] = []

    def missing(name: str, goal: str) -> None:
        out.append(Target(name, goal, "not measured", None, ""))

    # The goals of issue 18 (store layer v2), as ratios against floors measured in the same run. Targets 1-4
    # are judged by the median over the rounds (run.Bench.repeats) of each round's figure against its own floors.
    # 1. Save 1 KB at c1 against the sum of the floors.
    name, goal = "save 1 KB, c1: p50 overhead over floors", "p50 ≤ INSERT p50 + no-op gRPC p50 + 0.8 ms"

    save, ins, grpc = ix.get("sidecar", "save", KB, 1), ix.get("floor", "insert", KB, 1), ix.get("floor", "grpc_save", KB, 1)
    judged = over_rounds(ix, over_save_floors("save", KB))
    if save and ins and grpc and judged:
        over, each = judged
        out.append(Target(name, goal, f"{_ms(save['p50_ms'])} ms vs {_ms(ins['p50_ms'])} + {_ms(grpc['p50_ms'])} ms: "
                          f"overhead {each[0]:+.3f} ms{_each(each, '+.3f')}", over <= 0.8,
                          _margin(over - 0.8, "ms", lower_is_better=True), profile="save-1KB-c1"))
    else:
        missing(name, goal)

    # 2. Save 1 KB at c16 against the no-op gRPC throughput.
    name, goal = "save 1 KB, c16: throughput vs no-op gRPC", "≥ 35 % of the no-op gRPC floor's calls/s"

    def save_share(rd: Round) -> float | None:
        save, grpc = rd.get("sidecar", "save", KB, 16), rd.get("floor", "grpc_save", KB, 16)
        return save["calls_per_s"] / grpc["calls_per_s"] if save and grpc else None

    save, grpc = ix.get("sidecar", "save", KB, 16), ix.get("floor", "grpc_save", KB, 16)
    judged = over_rounds(ix, save_share)
    if save and grpc and judged:
        share, each = judged
        out.append(Target(name, goal, f"{_rate(save['calls_per_s'])}/s vs {_rate(grpc['calls_per_s'])}/s = "
                          f"{each[0]:.0%}{_each(each, '.0%')}", share >= 0.35,
                          _margin((share - 0.35) * 100, "points", lower_is_better=False), profile="save-1KB-c16"))
    else:
        missing(name, goal)

    # 3. Start-or-resume of a new instance at c1 against the save floors.
    name, goal = "start-or-resume (new instance), c1: p50 over floors", "p50 ≤ INSERT p50 + no-op gRPC p50 + 1.2 ms"

    start, floor = ix.get("sidecar", "start", 0, 1), save_floor(ix, KB, 1)
    judged = over_rounds(ix, over_save_floors("start", 0))
    if start and floor and judged:
        over, each = judged
        out.append(Target(name, goal, f"{_ms(start['p50_ms'])} ms vs floors {_ms(floor[0])} ms: overhead "
                          f"{each[0]:+.3f} ms{_each(each, '+.3f')}", over <= 1.2,
                          _margin(over - 1.2, "ms", lower_is_better=True), profile="start-0KB-c1"))
    else:
        missing(name, goal)

    # 4. Claim of a completed key at c1 against the no-op gRPC call.
    name, goal = "claim completed key, c1: p50 vs no-op gRPC", "p50 ≤ no-op gRPC p50 + 0.3 ms"

    def claim_over(rd: Round) -> float | None:
        claim, grpc = rd.get("sidecar", "claim_done", KB, 1), rd.near_claims(1)
        return claim["p50_ms"] - grpc["p50_ms"] if claim and grpc else None

    claim, grpc = ix.get("sidecar", "claim_done", KB, 1), ix.near_claims(1)
    judged = over_rounds(ix, claim_over)
    if claim and grpc and judged:
        over, each = judged
        out.append(Target(name, goal, f"{_ms(claim['p50_ms'])} ms vs {_ms(grpc['p50_ms'])} ms: overhead "
                          f"{each[0]:+.3f} ms{_each(each, '+.3f')}", over <= 0.3,
                          _margin(over - 0.3, "ms", lower_is_better=True), profile="claim_done-1KB-c1"))
    else:
        missing(name, goal)

    # 5-6. Batched saves: throughput at c1, and no collapse with concurrency.
    name, goal = "batched save (100 × 1 KB per call), c1", "≥ 10,000 items/s"
    batches = [r for c in ix.concurrencies() if (r := ix.get("sidecar", "batch", KB, c))]
    one = ix.get("sidecar", "batch", KB, 1)
    each = ", ".join(f"c{r['concurrency']} {_rate(r['items_per_s'])}" for r in batches)
    if one:
        out.append(Target(name, goal, f"{_rate(one['items_per_s'])} items/s ({each})",
                          one["items_per_s"] >= 10_000,
                          _margin(one["items_per_s"] / 10_000 - 1, "%", lower_is_better=False),
                          profile="batch-1KB-c1"))
    else:
        missing(name, goal)
    name, goal = "batched save, c64 vs c1", "c64 items/s ≥ c1 items/s"
    many = ix.get("sidecar", "batch", KB, 64)
    if one and many:
        ratio = many["items_per_s"] / one["items_per_s"]
        errors = f", {many['errors']} errors at c64" if many.get("errors") else ""
        out.append(Target(name, goal, f"c64 {_rate(many['items_per_s'])} vs c1 {_rate(one['items_per_s'])} items/s: "
                          f"{ratio:.2f}×{errors}", ratio >= 1 and not many.get("errors"),
                          _margin(ratio - 1, "%", lower_is_better=False), profile="batch-1KB-c64"))
    else:
        missing(name, goal)

    # 7-8. Against DBOS.
    name, goal = "vs DBOS, c1: save 1 KB p50 vs a DBOS step", "≥ 2× faster (DBOS p50 / save p50)"
    save, peer = ix.get("sidecar", "save", KB, 1), ix.dbos(KB, 1, by="p50")
    if save and peer:
        speed = peer["p50_ms"] / save["p50_ms"]
        out.append(Target(name, goal, f"{_ms(save['p50_ms'])} ms vs DBOS {_ms(peer['p50_ms'])} ms ({peer['op']}): "
                          f"{speed:.2f}×", speed >= 2, _margin(speed / 2 - 1, "%", lower_is_better=False),
                          profile="save-1KB-c1"))
    else:
        missing(name, goal)
    name, goal = "vs DBOS, c16: save 1 KB throughput vs DBOS steps", "≥ 3× DBOS steps/s"
    save, peer = ix.get("sidecar", "save", KB, 16), ix.dbos(KB, 16, by="tput")
    if save and peer:
        times = save["calls_per_s"] / peer["calls_per_s"]
        out.append(Target(name, goal, f"{_rate(save['calls_per_s'])}/s vs DBOS {_rate(peer['calls_per_s'])}/s "
                          f"({peer['op']}): {times:.2f}×", times >= 3, _margin(times / 3 - 1, "%", lower_is_better=False),
                          profile="save-1KB-c16"))
    else:
        missing(name, goal)

    # 9. 10 MB save latency.
    name, goal = "save 10 MB, c1: p50", "< 250 ms"
    save = ix.get("sidecar", "save", 10 * MB, 1)
    if save:
        out.append(Target(name, goal, f"{_ms(save['p50_ms'])} ms", save["p50_ms"] < 250,
                          _margin(save["p50_ms"] - 250, "ms", lower_is_better=True),
                          profile="save-10MB-c1"))
    else:
        missing(name, goal)

    # 10. Peak RSS in the 10 MB runs.
    name, goal = "10 MB runs: sidecar peak RSS", "< 4 × in-flight bytes + 150 MB, at every concurrency"
    mem = [r for op in ("save", "load") for c in ix.concurrencies() if (r := ix.get("sidecar", op, 10 * MB, c))]
    if mem:
        worst = max(mem, key=lambda r: r["peak_rss_mb"] / _rss_limit_mb(r))
        each = ", ".join(f"{r['op']} c{r['concurrency']} {r['peak_rss_mb']:.0f}/{_rss_limit_mb(r):.0f} MB" for r in mem)
        ok = all(r["peak_rss_mb"] < _rss_limit_mb(r) for r in mem)
        out.append(Target(name, goal, f"peak/limit: {each}", ok,
                          _margin(worst["peak_rss_mb"] - _rss_limit_mb(worst), "MB", lower_is_better=True)
                          + f" (tightest: {worst['op']} c{worst['concurrency']})"))
    else:
        missing(name, goal)
    return out


def _rss_limit_mb(row: Row) -> float:
    return 4 * row["concurrency"] * row["size_bytes"] / MB + 150


def _margin(delta: float, unit: str, *, lower_is_better: bool) -> str:
    """Distance to the goal: 'missed by …' or 'met with … to spare'."""
    bad = delta > 0 if lower_is_better else delta < 0
    amount = abs(delta) * (100 if unit == "%" else 1)
    text = f"{amount:.0f} %" if unit == "%" else f"{amount:.1f} points" if unit == "points" else f"{amount:.3f} ms" \
        if unit == "ms" else f"{amount:.0f} {unit}"
    return f"missed by {text}" if bad else f"met, {text} to spare"


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
        f"Command: `{meta['command']}` (what `make bench` runs). Sidecar code: commit {meta.get('code', {}).get('commit', '?')}"
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
    lines += ["## Sidecar", "", *_rows_table(ix, "sidecar", ["save", "load", "batch", "start", "claim_new", "claim_done",
                                                                "claim_done_redis_down", "claim_new_redis_down"]), ""]
    lines += ["## Floors", "", *_rows_table(ix, "floor", ["insert", "grpc_save", "select", "grpc_load"]), ""]
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


# -- chart -------------------------------------------------------------------------------------------------


def chart(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ix = Index(data["results"])
    concs = ix.concurrencies()
    colours = {c: col for c, col in zip(concs, ["tab:blue", "tab:orange", "tab:red", "tab:green", "tab:purple"], strict=False)}
    fig, axes = plt.subplots(2, 3, figsize=(18, 10.5))
    fig.suptitle(f"durable sidecar benchmarks, {data['meta']['started']} UTC"
                 + (" (QUICK: not stable)" if data["meta"]["quick"] else ""), fontsize=13)

    def by_size(system: str, op: str, c: int, value: str) -> tuple[list[float], list[float]]:
        pts = [(s / KB, r[value]) for s in ix.sizes(system, op) if (r := ix.get(system, op, s, c))]
        return [p[0] for p in pts], [p[1] for p in pts]

    def floor_by_size(fn: Any, op: str, c: int, i: int) -> tuple[list[float], list[float]]:
        pts = [(s / KB, f[i]) for s in ix.sizes("sidecar", op) if (f := fn(ix, s, c))]
        return [p[0] for p in pts], [p[1] for p in pts]

    for ax, op, fn, value, i, title in (
        (axes[0][0], "save", save_floor, "p50_ms", 0, "checkpoint save: p50 latency (ms)"),
        (axes[0][1], "save", save_floor, "calls_per_s", 1, "checkpoint save: throughput (saves/s)"),
        (axes[0][2], "load", load_floor, "p50_ms", 0, "checkpoint load: p50 latency (ms)"),
    ):
        for c in concs:
            ax.plot(*by_size("sidecar", op, c, value), "o-", color=colours[c], label=f"sidecar c{c}")
            ax.plot(*floor_by_size(fn, op, c, i), "--", color=colours[c], alpha=0.6, label=f"floor c{c}")
            if op == "save":
                xs, ys = by_size("dbos", "step_async", c, value)
                ax.plot(xs, ys, ":", marker="x", color=colours[c], alpha=0.8, label=f"DBOS step c{c}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("state size (KB)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=3)

    ops_1kb = [("sidecar", "save", KB, "save"), ("sidecar", "load", KB, "load"), ("sidecar", "start", 0, "start"),
               ("sidecar", "claim_new", KB, "claim new"), ("sidecar", "claim_done", KB, "claim done"),
               ("sidecar", "claim_done_redis_down", KB, "claim done, Redis down"), ("sidecar", "batch", KB, "batch (per call)"),
               ("floor", "insert", KB, "raw INSERT"), ("floor", "grpc_save", KB, "no-op gRPC"),
               ("dbos", "step_async", KB, "DBOS step (async)"), ("dbos", "step_sync", KB, "DBOS step (sync)")]
    for ax, value, title in ((axes[1][0], "p50_ms", "1 KB: p50 latency (ms) against concurrency"),
                             (axes[1][1], "items_per_s", "1 KB: throughput (items/s) against concurrency")):
        palette = plt.get_cmap("tab20").colors
        for n, (system, op, size, name) in enumerate(ops_1kb):
            pts = [(c, r[value]) for c in concs if (r := ix.get(system, op, size, c))]
            if pts:
                style = "--" if system == "floor" else ":" if system == "dbos" else "-"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=name,
                        color=palette[(2 * n) % 20 if n < 10 else 2 * n - 19])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(concs, [str(c) for c in concs])
        ax.set_xlabel("concurrency (workers)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)

    ax = axes[1][2]
    for op, marker in (("save", "o"), ("load", "s")):
        pts = [(c, r["peak_rss_mb"]) for c in concs if (r := ix.get("sidecar", op, 10 * MB, c))]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", marker=marker, label=f"peak RSS, 10 MB {op}")
    ax.plot(concs, [4 * c * 10 + 150 for c in concs], "k--", alpha=0.6, label="target: 4 × in flight + 150 MB")
    ax.set_xscale("log", base=2)
    ax.set_xticks(concs, [str(c) for c in concs])
    ax.set_xlabel("concurrency (workers)")
    ax.set_ylabel("MB")
    ax.set_title("sidecar peak RSS during the 10 MB runs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(data: dict[str, Any], out: Path, docs: Path | None) -> None:
    (out / "summary.md").write_text(markdown(data))
    if data["meta"].get("plan", {}).get("only"):
        # A subset (--only) leaves most panels empty (and log axes with no data fail): no chart, and
        # docs/ keeps the last full run's summary.
        return
    chart(data, out / "chart.png")
    if docs is not None:
        docs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "summary.md", docs / "summary.md")
        shutil.copyfile(out / "chart.png", docs / "chart.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", type=Path)
    parser.add_argument("--docs", type=Path)
    args = parser.parse_args()
    data = json.loads(args.results.read_text())
    write(data, args.results.parent, args.docs)
    print(f"wrote {args.results.parent / 'summary.md'} and chart.png" + (f", copied to {args.docs}" if args.docs else ""))


if __name__ == "__main__":
    main()
