"""The sidecar as e2e/harness.py starts it, on a throwaway database: what bench.n8n, bench.n8n_rpcs and
bench.n8n_client each run against (PostgreSQL, Redis, the default lease, log level warning)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

import harness  # e2e/harness.py, on sys.path through bench/__init__.py


@contextlib.contextmanager
def harness_sidecar(work: Path, db_prefix: str, *, metrics_port: int | None = None) -> Iterator[harness.Sidecar]:
    """Started on a new database named from `db_prefix`; closed and the database dropped afterwards."""
    database = harness.create_db(db_prefix)
    sidecar = harness.Sidecar(work, database)
    if metrics_port is not None:
        sidecar.process.env["DURABLE_METRICS_ADDRESS"] = f"127.0.0.1:{metrics_port}"
    sidecar.process.env["DURABLE_LOG_LEVEL"] = "warning"
    try:
        sidecar.start()
        yield sidecar
    finally:
        sidecar.close()
        harness.drop_db(database)


def cpu_ns(pid: int) -> int:
    """The CPU time (ns) every thread of process `pid` has used (/proc/<pid>/task/*/schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass  # a thread that ended meanwhile
    return total


def _gaps(text: str) -> list[float]:
    try:
        return [float(g) for g in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of milliseconds: {text!r}") from None


def order_parser(prog: str, doc: str | None, *, orders: int) -> argparse.ArgumentParser:
    """The options the order replays share: --orders and --gap-ms (pauses between calls, as n8n spaces them)."""
    p = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--orders", type=int, default=orders, help=f"orders per gap (default {orders})")
    p.add_argument("--gap-ms", type=_gaps, default=[0.0, 15.0],
                   help="comma-separated pauses between calls, ms (default 0,15)")
    return p
