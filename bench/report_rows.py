"""Benchmark results read back: rows by cell, rounds of repeats, the floors a sidecar row is compared with, number formats."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from typing import Any

from bench.payloads import KB

Row = dict[str, Any]


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


def over_stream_floors(op: str) -> Callable[[Round], float | None]:
    """A round's c1 p50 of a sidecar cell carried on a call stream over that round's floors: raw 1 KB INSERT + a
    no-op call carried on a stream (bench/noop_server.py `Stream`)."""
    def figure(rd: Round) -> float | None:
        row, ins = rd.get("sidecar", op, 0, 1), rd.get("floor", "insert", KB, 1)
        grpc = rd.get("floor", "grpc_stream_save", KB, 1)
        return row["p50_ms"] - ins["p50_ms"] - grpc["p50_ms"] if row and ins and grpc else None

    return figure


def stream_floor(ix: Index, c: int) -> tuple[float, float] | None:
    """(p50 ms, calls/s) of raw 1 KB INSERT p50 + a no-op call on a stream p50; the lower of the two rates."""
    ins, grpc = ix.get("floor", "insert", KB, c), ix.get("floor", "grpc_stream_save", KB, c)
    if not ins or not grpc:
        return None
    return ins["p50_ms"] + grpc["p50_ms"], min(ins["calls_per_s"], grpc["calls_per_s"])


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
    if op == "n8n_mix_stream":
        f = stream_floor(ix, c)
        return (*f, "INSERT + no-op call on a stream (1 KB)") if f else None
    if op in ("claim_new", "claim_new_redis_down", "start", "n8n_mix", "limit_pair", "limit_rate"):
        f = save_floor(ix, KB, c)
        return (*f, "INSERT + no-op gRPC (1 KB)") if f else None
    return None
