"""Faults on a seeded schedule, injected while a wave's deliveries run.

- `n8n-kill`: kill -9 of n8n (regular mode, its whole process group), restarted at once; half of them wait
  (up to 15 s) until a provider call is in flight, so the kill lands inside a side effect;
- `sidecar-kill`: kill -9 of one of the two sidecars, started again after a few seconds;
- `postgres-restart`: the sidecars' throwaway PostgreSQL stopped (fast, or kill -9 of the postmaster and its
  children) and started again;
- `redis-kill`: kill -9 of the sidecars' throwaway Redis, started again (empty) after a few seconds.

Still to do (docs/testing.md): queue mode (kill -9 of main and workers, SIGSTOP/SIGCONT of a worker) and,
in the long form, a Patroni switchover and a kill of its primary.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from chaos.history import FaultFact
from chaos.stack import ChaosStack

KINDS = ("n8n-kill", "sidecar-kill", "postgres-restart", "redis-kill")
# How long a wave's faults are spread over, from its first delivery.
WINDOW_S = (1.0, 12.0)


@dataclass(frozen=True)
class PlannedFault:
    kind: str
    offset_s: float             # after the wave's start
    target: str                 # n8n-kill: "in-call" or "any time"; sidecar-kill: "a"/"b"; postgres-restart: "fast"/"kill-9"
    down_s: float               # how long the part stays down before it is started again (n8n: none)


def kinds_for_waves(seed: int, waves: int, per_wave: int, kinds: tuple[str, ...] = KINDS) -> list[list[str]]:
    """Each wave's fault kinds: the kinds in a seeded order, dealt round-robin, so a run of enough waves uses
    every kind."""
    rng = random.Random(f"{seed}:fault-kinds")
    order = list(kinds)
    rng.shuffle(order)
    deck = [order[i % len(order)] for i in range(waves * per_wave)]
    return [deck[w * per_wave:(w + 1) * per_wave] for w in range(waves)]


def schedule(seed: int, wave: int, kinds: list[str]) -> list[PlannedFault]:
    rng = random.Random(f"{seed}:faults:{wave}")
    out = []
    for kind in kinds:
        offset = round(rng.uniform(*WINDOW_S), 2)
        if kind == "n8n-kill":
            out.append(PlannedFault(kind, offset, rng.choice(["in-call", "any time"]), 0.0))
        elif kind == "sidecar-kill":
            out.append(PlannedFault(kind, offset, rng.choice(["a", "b"]), round(rng.uniform(0.5, 4.0), 2)))
        elif kind == "postgres-restart":
            out.append(PlannedFault(kind, offset, rng.choice(["fast", "kill-9"]), round(rng.uniform(0.5, 3.0), 2)))
        else:
            out.append(PlannedFault(kind, offset, "redis", round(rng.uniform(0.5, 5.0), 2)))
    return sorted(out, key=lambda f: f.offset_s)


class Injector:
    """Runs a wave's fault schedule in a thread; each fault's fact is kept once its part serves again."""

    def __init__(self, stack: ChaosStack, wave: int, plan: list[PlannedFault], log: Callable[[str], None]) -> None:
        self.stack, self.wave, self.plan, self.log = stack, wave, plan, log
        self.facts: list[FaultFact] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"faults-{wave}", daemon=True)
        self.t0 = 0.0

    def start(self, t0: float) -> None:
        self.t0 = t0
        self.thread.start()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise RuntimeError(f"wave {self.wave}: the fault injector did not finish in {timeout:.0f} s")
        if self.error is not None:
            raise RuntimeError(f"wave {self.wave}: injecting a fault failed: {self.error!r}") from self.error

    def _run(self) -> None:
        try:
            for fault in self.plan:
                time.sleep(max(0.0, self.t0 + fault.offset_s - time.time()))
                self.facts.append(self.inject(fault))
        except BaseException as exc:  # noqa: BLE001 - reported by join() in the main thread
            self.error = exc

    def inject(self, fault: PlannedFault) -> FaultFact:
        s = self.stack
        if fault.kind == "n8n-kill":
            if fault.target == "in-call":
                deadline = time.monotonic() + 15
                while s.providers.in_flight() == 0 and time.monotonic() < deadline:
                    time.sleep(0.05)
            in_flight = s.providers.in_flight()
            at = time.time()
            s.kill_n8n()
            s.restart_n8n()
            target = f"n8n main ({in_flight} calls in flight)"
        elif fault.kind == "sidecar-kill":
            sidecar = s.sidecars["ab".index(fault.target)]
            at = time.time()
            sidecar.process.kill9()
            time.sleep(fault.down_s)
            sidecar.start()
            target = f"sidecar {fault.target}"
        elif fault.kind == "postgres-restart":
            at = time.time()
            if fault.target == "fast":
                s.pg.stop("fast")
            else:
                s.pg.kill9()
            time.sleep(fault.down_s)
            s.pg.start()
            target = f"postgres ({fault.target})"
        elif fault.kind == "redis-kill":
            at = time.time()
            s.redis.process.kill9()
            time.sleep(fault.down_s)
            s.redis.start()
            target = "redis"
        else:
            raise ValueError(f"unknown fault kind {fault.kind}")
        back = time.time()
        self.log(f"  fault {fault.kind} on {target} at +{at - self.t0:.1f} s, back after {back - at:.1f} s")
        return FaultFact(fault.kind, self.wave, target, at, back)
