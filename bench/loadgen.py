"""Closed-loop load generation: N asyncio workers call back to back; latency per call, throughput per window."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# A worker body: given the window, runs calls until `window.done()`, recording each.
WorkerBody = Callable[["Window"], Awaitable[None]]
# One call: returns nothing; its wall time is the measured latency.
Call = Callable[[], Awaitable[Any]]

# A scenario that fails (nearly) every call would otherwise spin for its whole duration.
_MAX_ERRORS = 50


@dataclass
class Window:
    """The warm-up and measurement window shared by the workers of one run.

    A call counts towards latency when it *starts* inside the measurement window
    and towards throughput when it *ends* inside it, so calls still in flight
    when the window closes do not inflate throughput and slow calls are not
    dropped from the percentiles.
    """

    warmup_s: float
    duration_s: float
    min_samples: int = 1
    max_s: float = 600.0
    items_per_call: int = 1
    started_ns: int = 0
    warm_end_ns: int = 0
    end_ns: int = 0
    stop_ns: int = 0
    calls: list[tuple[int, int]] = field(default_factory=list)
    measured: int = 0
    completed: int = 0
    errors: int = 0
    first_error: str = ""

    def start(self) -> None:
        self.started_ns = time.perf_counter_ns()
        self.warm_end_ns = self.started_ns + int(self.warmup_s * 1e9)
        self.end_ns = self.warm_end_ns + int(self.duration_s * 1e9)

    def record(self, start_ns: int, end_ns: int) -> None:
        self.completed += 1
        if end_ns >= self.warm_end_ns:
            self.calls.append((start_ns, end_ns))
            if start_ns >= self.warm_end_ns:
                self.measured += 1

    def failed(self, exc: BaseException) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = f"{type(exc).__name__}: {exc}"[:500]

    def done(self) -> bool:
        if self.stop_ns:
            return True
        now = time.perf_counter_ns()
        hard_stop = now >= self.started_ns + int(self.max_s * 1e9)
        if (now >= self.end_ns and self.measured >= self.min_samples) or hard_stop or (self.errors >= _MAX_ERRORS and self.errors > self.measured):
            self.stop_ns = now
            return True
        return False


@dataclass
class Stats:
    """Latency percentiles (ms) and throughput of one run."""

    samples: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    calls_per_s: float
    items_per_s: float
    window_s: float
    errors: int
    first_error: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence; NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summarise(window: Window) -> Stats:
    stop = window.stop_ns or time.perf_counter_ns()
    lat = sorted((e - s) / 1e6 for s, e in window.calls if window.warm_end_ns <= s < stop)
    completed = sum(1 for _, e in window.calls if window.warm_end_ns <= e <= stop)
    span = max((stop - window.warm_end_ns) / 1e9, 1e-9)
    return Stats(
        samples=len(lat),
        p50_ms=percentile(lat, 0.50),
        p95_ms=percentile(lat, 0.95),
        p99_ms=percentile(lat, 0.99),
        mean_ms=sum(lat) / len(lat) if lat else math.nan,
        max_ms=lat[-1] if lat else math.nan,
        calls_per_s=completed / span,
        items_per_s=completed * window.items_per_call / span,
        window_s=span,
        errors=window.errors,
        first_error=window.first_error,
    )


def timed(call: Call) -> WorkerBody:
    """The usual worker body: time `call` back to back until the window closes."""

    async def body(window: Window) -> None:
        while not window.done():
            start = time.perf_counter_ns()
            try:
                await call()
            except Exception as exc:  # noqa: BLE001 - counted and reported, never hidden
                window.failed(exc)
                continue
            window.record(start, time.perf_counter_ns())

    return body


async def run(bodies: Sequence[WorkerBody], window: Window) -> Stats:
    """Runs one body per worker (so concurrency = len(bodies)) and summarises the window."""
    window.start()
    await asyncio.gather(*(body(window) for body in bodies))
    return summarise(window)
