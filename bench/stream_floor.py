"""`python -m bench.stream_floor`: what one long-lived stream would save against a unary call per RPC.

A floor for issue 42's lever "one stream per n8n process carrying the nodes' calls": a grpc.aio echo
server in its own process (as the sidecar serves) and a client on the node package's grpc-js in Node 24
(as n8n runs it) send 1.5 KB messages as unary calls and as messages on one open bidirectional stream,
rounds alternated, back to back and with 15 ms between calls (as n8n spaces a durable order's calls).
Per call: the client's CPU (user + system), the server's CPU (every thread) and the round trip. The
server does nothing, so this is what the transport itself costs either way, not the sidecar's handlers.
Needs `make node-build` (node_modules) and `make n8n-install` (Node 24).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import harness  # e2e/harness.py, on sys.path through bench/__init__.py

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).with_suffix(".js")
GRPC_JS = ROOT / "node-package" / "node_modules" / "@grpc" / "grpc-js"


async def _unary(request: bytes, context: Any) -> bytes:
    return request


async def _cpu(request: bytes, context: Any) -> bytes:
    """The server process's CPU so far (every thread, user + system), in nanoseconds, as ASCII digits."""
    return str(time.process_time_ns()).encode()


async def _stream(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request


async def serve(port: int) -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {
        "Unary": grpc.unary_unary_rpc_method_handler(_unary),
        "Cpu": grpc.unary_unary_rpc_method_handler(_cpu),
        "Stream": grpc.stream_stream_rpc_method_handler(_stream)}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


def run(calls: int, gap_calls: int, rounds: int) -> list[dict[str, Any]]:
    if not GRPC_JS.exists():
        raise SystemExit(f"{GRPC_JS} is missing: run `make node-build` first")
    node = Path(harness.n8n_base_env()["N8N_E2E_NODE_DIR"]) / "bin" / "node"
    port = harness.free_port()
    server = subprocess.Popen([sys.executable, "-m", "bench.stream_floor", "--serve", str(port)],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise SystemExit("the echo server did not start")
        out = subprocess.run([str(node), str(SCRIPT), str(GRPC_JS), str(port), str(calls),
                              str(gap_calls), str(rounds)], check=True, capture_output=True, text=True, timeout=900)
    finally:
        server.terminate()
        server.wait(timeout=10)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stream_floor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=1000, help="calls per back-to-back measurement (default 1000)")
    p.add_argument("--gap-calls", type=int, default=150, help="calls per measurement with 15 ms gaps (default 150)")
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the echo server's own process
    args = p.parse_args(argv)
    if args.serve:
        asyncio.run(serve(args.serve))
        return 0
    rows = run(args.calls, args.gap_calls, args.rounds)
    cells: dict[tuple[str, float], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        print(json.dumps(row), flush=True)
        if "round" in row:
            cells[(row["kind"], row["gap_ms"])].append(row)
    for (kind, gap), cell in sorted(cells.items()):
        print(f"{kind:6} gap {gap:g} ms: median per call of {len(cell)} rounds: client CPU "
              f"{statistics.median(r['client_cpu_ms'] for r in cell):.3f} ms, server CPU "
              f"{statistics.median(r['server_cpu_ms'] for r in cell):.3f} ms, round trip "
              f"{statistics.median(r['wall_ms'] for r in cell):.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
