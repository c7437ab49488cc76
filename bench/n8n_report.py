"""The n8n benchmark's summary (markdown) and chart (matplotlib), from n8n-results.json."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

# Issue 42's targets, on each documented intake wiring, as ratios in one run (the median of the rounds' ratios).
TARGET_P50_RATIO = 1.2
STRETCH_P50_RATIO = 1.1
TARGET_THROUGHPUT_SHARE = 0.80
TARGET_RPCS_PER_ORDER = 4
TARGET_NODE_FACTOR = 2.0
INTAKE_NAMES = {"last": "Respond: When Last Node Finishes", "respond": "Respond to Webhook after Start"}


def _f(v: Any, unit: str = "", digits: int = 1) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.{digits}f}{unit}"
    return f"{v}{unit}"


def _rounds(figures: dict[str, Any], key: str, fmt: str) -> str:
    values = figures.get(f"{key}_rounds") or []
    return f" (rounds: {', '.join(format(v, fmt) for v in values)})" if values else ""


def targets(data: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(target, goal, measured, verdict with margin)."""
    r = data["ratios"]
    out = []
    for intake, figures in (r.get("intakes") or {}).items():
        name = INTAKE_NAMES.get(intake, intake)
        p = figures.get("p50_ratio_c1")
        verdict = "n/a" if p is None else (
            f"met (margin {TARGET_P50_RATIO - p:+.2f}×; stretch {STRETCH_P50_RATIO}× "
            f"{'met' if p <= STRETCH_P50_RATIO else 'not met'})" if p <= TARGET_P50_RATIO
            else f"missed by {p - TARGET_P50_RATIO:.2f}×")
        out.append((f"{name}: durable / plain, p50 per order, one order at a time",
                    f"≤ {TARGET_P50_RATIO}× (stretch {STRETCH_P50_RATIO}×)",
                    _f(p, "×", 2) + _rounds(figures, "p50_ratio_c1", ".2f"), verdict))
        t = figures.get("throughput_share_c8")
        out.append((f"{name}: durable / plain, orders/s at 8 at once", f"≥ {TARGET_THROUGHPUT_SHARE:.0%}",
                    ("n/a" if t is None else f"{t:.0%}") + _rounds(figures, "throughput_share_c8", ".0%"),
                    "n/a" if t is None else (f"met (margin {100 * (t - TARGET_THROUGHPUT_SHARE):+.0f} points)"
                                             if t >= TARGET_THROUGHPUT_SHARE
                                             else f"missed by {100 * (TARGET_THROUGHPUT_SHARE - t):.0f} points")))
        n = figures.get("rpcs_per_order")
        methods = figures.get("rpcs_by_method") or {}
        detail = ", ".join(f"{m} {v:g}" for m, v in methods.items())
        out.append((f"{name}: RPCs per order (the sidecar's durable_rpc_total; the process's session and "
                    f"the Resume Trigger's stream apart)", f"{TARGET_RPCS_PER_ORDER}",
                    _f(n, digits=2) + (f" ({detail})" if detail else ""),
                    "n/a" if n is None else ("met" if round(n, 1) <= TARGET_RPCS_PER_ORDER
                                             else f"missed by {n - TARGET_RPCS_PER_ORDER:.2f}")))
    d, n = r.get("n8n_cpu_ms_per_durable_node_c1"), r.get("n8n_cpu_ms_per_noop_node_c1")
    if d is not None and n is not None:
        # The RPC client's share two ways: the sampled profile's, and the client measured whole (bench/n8n_client.py).
        sampled = (data.get("profiles") or {}).get("n8n", {}).get("grpc_client_ms_per_durable_node")
        whole = client_ms_per_durable_node(data)
        for label, client_label, client in (
                ("n8n CPU per durable node (c1, issue 20)", "RPC client", sampled),
                *([("the same, the RPC client measured whole (bench/n8n_client.py)", "RPC client, whole process",
                    whole)] if whole is not None else [])):
            limit = TARGET_NODE_FACTOR * max(n, 0.0) + (client or 0.0)
            verdict = f"met (margin {limit - d:+.2f} ms)" if d <= limit else f"missed by {d - limit:.2f} ms"
            out.append((label, f"≤ 2 × NoOp node ({_f(n, ' ms', 2)}) + {client_label} ({_f(client, ' ms', 2)})",
                        _f(d, " ms", 2), verdict))
    return out


def client_ms_per_durable_node(data: dict[str, Any]) -> float | None:
    """The nodes' RPC client's whole CPU per order at n8n's spacing (15 ms gaps), per durable node."""
    row = next((c for c in data.get("client") or [] if c.get("gap_ms") == 15.0), None)
    nodes = data["ratios"].get("durable_nodes")
    return row["cpu_ms_per_order"] / nodes if row and nodes else None


def markdown(data: dict[str, Any]) -> str:
    meta, rows, r = data["meta"], data["rows"], data["ratios"]
    lines = ["# n8n benchmark: what durability costs per order", ""]
    if meta.get("quick"):
        lines += ["**Quick/smoke run: too short for the targets; the figures only show that it runs.**", ""]
    lines += [f"n8n {meta.get('n8n')} (Node 24, PostgreSQL), one sidecar, the fake services of e2e/; "
              f"commit {meta['code']['commit']}; `{meta['command']}`; {meta['started']} to {meta['finished']}. "
              f"Machine busy {meta['other_load']['machine_busy_pct']} % on average "
              f"(load {', '.join(f'{x:.1f}' for x in meta['other_load']['loadavg_start'])} at the start).", "",
              "Workflows, each intake wiring node-package/README.md documents (\"Answer the sender only after "
              "the Resume Point\"), plain and durable side by side: **plain** = Webhook (Respond: When Last Node "
              "Finishes) → 3 HTTP Request calls; **durable** = the same order wired as the README documents it: "
              "Webhook and Resume Trigger into one Resume Point (step outputs for the first two calls, Finished "
              f"and Busy → a No Operation node), per call Claim → call (Idempotency-Key header) → Save (Done "
              f"Before → the same Save), the last Save with Complete Instance ({r['durable_nodes']} durable nodes "
              "per order); **plain-respond** / **durable-respond** = the same with Respond: Using 'Respond to "
              "Webhook' Node, the Respond to Webhook right after the Webhook (plain) or on the Resume Point's "
              "Start (durable), each ending with an HTTP call that reports the order done to the fake services "
              "(those orders are measured from the delivery to that report); **control** = plain "
              f"+ {r['durable_nodes']} No Operation nodes. Interleaved rounds "
              f"({meta['plan']['rounds']} × {meta['plan']['orders']} orders per window, the workflows' order "
              "rotating), closed loop; a target's ratio is the median of the rounds' ratios"
              + ("; after the warm-up PostgreSQL wrote back its dirty buffers (`CHECKPOINT`) and the bench waited "
                 "for a quiet second (bench/infra.py `settle`)" if meta["plan"].get("settle") else "") + ".", "",
              "## Targets (issue 42; the last two rows issue 20)", "", "| target | goal | measured | verdict |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in targets(data)]
    lines += ["", "## Per workflow", "",
              "| workflow | orders at once | orders | p50 ms | p95 ms | orders/s | n8n CPU ms/order | sidecar CPU "
              "ms/order | PostgreSQL CPU ms/order | RPCs/order | execution record B | errors |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    order = ["plain", "durable", "control", "plain-respond", "durable-respond"]
    for row in sorted(rows, key=lambda x: (x["concurrency"], order.index(x["workflow"]) if x["workflow"] in order else 9)):
        cpu = row["cpu_ms_per_order"]
        lines.append(f"| {row['workflow']} | {row['concurrency']} | {row['orders']} | {_f(row['p50_ms'])} | "
                     f"{_f(row['p95_ms'])} | {_f(row['orders_per_s'])} | {_f(cpu.get('n8n'))} | "
                     f"{_f(cpu.get('sidecar'))} | {_f(cpu.get('postgres'))} | {_f(row['rpcs_per_order'])} | "
                     f"{_f(row['execution_data_bytes'], digits=0)} | {row['errors']} |")
    lines += ["", "## Durable over plain", ""]
    for c in (1, 8):
        parts = [f"{who} {_f(r.get(f'extra_cpu_ms_per_order_{who}_c{c}'), ' ms', 2)}"
                 for who in ("n8n", "sidecar", "postgres")]
        lines.append(f"- at {c} order(s) at a time, extra CPU per order: " + ", ".join(parts)
                     + f"; n8n CPU per durable node {_f(r.get(f'n8n_cpu_ms_per_durable_node_c{c}'), ' ms', 2)}, "
                     f"per No Operation node {_f(r.get(f'n8n_cpu_ms_per_noop_node_c{c}'), ' ms', 2)}")
    if data.get("client"):
        measured = ", ".join(f"{_f(c['cpu_ms_per_order'], ' ms', 2)} per order ({_f(c['cpu_ms_per_rpc'], ' ms', 3)} per RPC) "
                             f"with {c['gap_ms']:g} ms between calls" for c in data["client"])
        lines.append(f"- the nodes' RPC client measured whole (bench/n8n_client.py: the order's "
                     f"{data['client'][0]['rpcs_per_order']} RPCs through the bundled client in Node 24 without n8n, "
                     f"process CPU user+system against a control that only sleeps): {measured}")
    prof = data.get("profiles") or {}
    if prof.get("n8n"):
        lines += ["", "## Profile of n8n running the durable workflow (node --cpu-prof)", "",
                  "| where | share of n8n's samples |", "|---|---:|"]
        lines += [f"| {c['name']} | {c['share']:.1%} |" for c in prof["n8n"].get("categories", [])]
    by = prof.get("n8n_by_workflow") or {}
    if by.get("durable") and by.get("plain"):
        names = [c["name"] for c in by["durable"].get("inclusive", [])]
        lines += ["", "## n8n CPU per order by part of the stack, one order at a time (profiled; parts overlap)", "",
                  "| part (inclusive) | plain ms/order | control ms/order | durable ms/order | durable − plain |",
                  "|---|---:|---:|---:|---:|"]

        def per_order(kind: str, name: str) -> float:
            row = next((c for c in by.get(kind, {}).get("inclusive", []) if c["name"] == name), None)
            return row["ms"] / max(1, by[kind]["orders"]) if row else 0.0

        lines.append(f"| everything n8n did (busy) | {by['plain'].get('ms_per_order')} | "
                     f"{(by.get('control') or {}).get('ms_per_order')} | {by['durable'].get('ms_per_order')} | "
                     f"{(by['durable'].get('ms_per_order') or 0) - (by['plain'].get('ms_per_order') or 0):+.1f} |")
        for name in names:
            a, k, d = per_order("plain", name), per_order("control", name), per_order("durable", name)
            lines.append(f"| {name} | {a:.1f} | {k:.1f} | {d:.1f} | {d - a:+.1f} |")
    if prof.get("sidecar"):
        lines += ["", "## Profile of the sidecar (py-spy)", "", "| where | share |", "|---|---:|"]
        lines += [f"| {c['name']} | {c['share']:.1%} |" for c in prof["sidecar"].get("categories", [])[:8]]
    lines += ["", "CPU per order is psutil's user+system time of each process tree over the measured windows divided "
              "by the orders; PostgreSQL is every postgres process (the sidecar's and n8n's databases share the "
              "server). RPCs per order come from the sidecar's durable_rpc_total; the execution record is the mean "
              "octet_length of n8n's execution_data.data for the workflow's successful executions.", ""]
    return "\n".join(lines)


def chart(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["rows"]
    kinds = [k for k in ("plain", "control", "durable", "plain-respond", "durable-respond")
             if any(r["workflow"] == k for r in rows)]
    colors = {"plain": "#4c72b0", "control": "#999999", "durable": "#dd8452", "plain-respond": "#7b9fd4",
              "durable-respond": "#f0a877"}
    by = {(r["workflow"], r["concurrency"]): r for r in rows}
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, (title, getter) in zip(axes, [
            ("p50 per order, 1 at a time (ms)", lambda k: by.get((k, 1), {}).get("p50_ms")),
            ("orders/s, 8 at a time", lambda k: by.get((k, 8), {}).get("orders_per_s")),
            ("n8n CPU per order, 1 at a time (ms)",
             lambda k: by.get((k, 1), {}).get("cpu_ms_per_order", {}).get("n8n"))], strict=False):
        values = [getter(k) or 0 for k in kinds]
        bars = ax.bar(kinds, values, color=[colors[k] for k in kinds])
        ax.bar_label(bars, fmt="%.1f")
        ax.tick_params(axis="x", labelrotation=20)
        ax.set_title(title)
    r = data["ratios"]
    fig.suptitle("durability inside n8n, median of the rounds: " + "; ".join(
        f"{intake}: p50 ×{f.get('p50_ratio_c1')} at c1, {(f.get('throughput_share_c8') or 0):.0%} of plain at c8"
        for intake, f in (r.get("intakes") or {}).items()))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(data: dict[str, Any], out: Path, docs: Path | None) -> None:
    (out / "n8n-summary.md").write_text(markdown(data))
    chart(data, out / "n8n-chart.png")
    if docs is not None:
        docs.mkdir(parents=True, exist_ok=True)
        shutil.copy(out / "n8n-summary.md", docs / "n8n-summary.md")
        shutil.copy(out / "n8n-chart.png", docs / "n8n-chart.png")


if __name__ == "__main__":
    results = Path(sys.argv[1])
    write(json.loads(results.read_text()), results.parent, Path(sys.argv[2]) if len(sys.argv) > 2 else None)
