"""chart.png: latency and throughput against state size and concurrency, and the sidecar's peak RSS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.payloads import KB, MB
from bench.report_rows import Index, load_floor, save_floor


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
