"""`python -m bench.n8n_client`: what the nodes' gRPC client costs n8n per durable order, measured whole.

bench/n8n_client.js sends the durable order's 4 RPCs (as bench/n8n_rpcs.py does) through the node
package's own bundled client, in Node.js 24 as n8n runs it, and reads the process's CPU (user + system,
every thread: JavaScript, garbage collection, libuv and the kernel's socket work) around them, against a
control that only sleeps the same gaps. A sampled profile of n8n charges the client only the JavaScript
frames it catches; this is the whole price, the yardstick for "the RPC client's share" of a durable node.
Needs `make node-build` (dist/) and `make n8n-install` (Node 24). `--gap-ms` as n8n spaces the calls.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import harness  # e2e/harness.py, on sys.path through bench/__init__.py

from bench.harness_sidecar import harness_sidecar, order_parser

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = Path(__file__).with_suffix(".js")


def run(orders: int, gaps_ms: list[float], rounds: int = 3) -> list[dict[str, Any]]:
    transport = ROOT / "node-package" / "dist" / "shared" / "transport.js"
    if not transport.exists():
        raise SystemExit(f"{transport} is missing: run `make node-build` first")
    node = Path(harness.n8n_base_env()["N8N_E2E_NODE_DIR"]) / "bin" / "node"
    rows = []
    with harness.work_dir() as work, harness_sidecar(work, "durable_bench_client") as sidecar:
        for gap in gaps_ms:
            out = subprocess.run([str(node), str(SCRIPT), "127.0.0.1", str(sidecar.port), harness.TOKEN,
                                  str(orders), f"{gap:g}", str(rounds)],
                                 check=True, capture_output=True, text=True, timeout=900)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = order_parser("python -m bench.n8n_client", __doc__, orders=100)
    p.add_argument("--rounds", type=int, default=3, help="rounds, each with its control (default 3)")
    args = p.parse_args(argv)
    for row in run(args.orders, args.gap_ms, args.rounds):
        print(f"gap {row['gap_ms']:g} ms: the client costs the process {row['cpu_ms_per_order']:.2f} ms CPU per order "
              f"({row['cpu_ms_per_rpc']:.3f} per RPC; rounds {[round(v, 2) for v in row['rounds_cpu_ms']['rpcs']]} "
              f"against control {[round(v, 2) for v in row['rounds_cpu_ms']['control']]}), "
              f"{row['wall_ms_per_order']:.1f} ms wall per order", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
