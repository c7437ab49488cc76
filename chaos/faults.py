"""Faults on a seeded schedule, injected while a wave's deliveries run.

- `n8n-kill`: kill -9 of n8n (regular mode, its whole process group), restarted at once; half of them wait
  (up to 15 s) until a provider call is in flight, so the kill lands inside a side effect;
- `sidecar-kill`: kill -9 of one of the two sidecars, started again after a few seconds;
- `postgres-restart`: the sidecars' throwaway PostgreSQL stopped (fast, or kill -9 of the postmaster and its
  children) and started again;
- `redis-kill`: kill -9 of the sidecars' throwaway Redis, started again (empty) after a few seconds.

In queue mode (n8n main plus two workers on a Redis of the stack's own, see chaos/stack.py) `n8n-kill` gives way
to three kinds:

- `main-kill`: kill -9 of the queue-mode main (the webhooks and the Resume Trigger), restarted at once;
- `worker-kill`: kill -9 of one of the two workers, started again at once; half of them aimed inside a call;
- `worker-freeze`: SIGSTOP of one worker for 6-10 s, longer than the sidecar's session grace (5 s), then
  SIGCONT: its session ends, its instances resume on the other worker, and its woken executions are refused.

With the sidecars on a Patroni cluster (`--database patroni`, the long form: etcd and three PostgreSQL nodes in
synchronous mode, tests/faults/patroni.py) `postgres-restart` gives way to two kinds:

- `patroni-switchover`: a planned switchover to the synchronous standby (Patroni's REST API), until the old
  primary streams again;
- `patroni-primary-kill`: kill -9 of the primary (Patroni and PostgreSQL), until another node leads; the killed
  node starts again after a few seconds and rejoins as a standby.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from chaos.history import FaultFact
from chaos.stack import ChaosStack

# n8n's modes and the sidecars' databases (chaos/stack.py), and the fault kinds that fit each; the sidecars and
# their Redis fit every run.
MODES = ("regular", "queue")
MODE_KINDS = {"regular": ("n8n-kill",), "queue": ("main-kill", "worker-kill", "worker-freeze")}
DATABASES = ("postgres", "patroni")
DATABASE_KINDS = {"postgres": ("postgres-restart",), "patroni": ("patroni-switchover", "patroni-primary-kill")}
SHARED_KINDS = ("sidecar-kill", "redis-kill")
KINDS = ("n8n-kill", "main-kill", "worker-kill", "worker-freeze", "sidecar-kill", "postgres-restart", "redis-kill",
         "patroni-switchover", "patroni-primary-kill")
# How long a frozen worker stays stopped: longer than the sidecar's session grace (5 s), so its session ends.
FREEZE_S = (6.0, 10.0)
# How long a wave's faults are spread over, from its first delivery.
WINDOW_S = (1.0, 12.0)


@dataclass(frozen=True)
class PlannedFault:
    kind: str
    offset_s: float             # after the wave's start
    # n8n-kill, main-kill: "in-call" or "any time"; worker-kill, worker-freeze: "w0"/"w1" and " in-call" or not;
    # sidecar-kill: "a"/"b"; postgres-restart: "fast"/"kill-9"
    target: str
    down_s: float               # how long the part stays down (or frozen) before it is started again (n8n: none)

    @property
    def in_call(self) -> bool:
        return self.target.endswith("in-call")


def kinds_fitting(mode: str, kinds: tuple[str, ...] = KINDS, database: str = "postgres") -> tuple[str, ...]:
    """The kinds (of `kinds`) a wave with n8n in `mode` and the sidecars on `database` can take: its mode's own,
    its database's own and the shared ones."""
    return tuple(k for k in kinds if k in MODE_KINDS[mode] or k in DATABASE_KINDS[database] or k in SHARED_KINDS)


def wave_modes(waves: int, n8n: str) -> list[str]:
    """Each wave's n8n mode: `regular` or `queue` for all, or `both`: the first half (rounded up) regular, the
    rest queue, so one mode change per run. It depends on the run's number of waves only, so `--case` replays
    a case in the mode it met."""
    if n8n in MODES:
        return [n8n] * waves
    if n8n != "both":
        raise ValueError(f"unknown n8n mode {n8n}")
    first = (waves + 1) // 2
    return ["regular"] * first + ["queue"] * (waves - first)


def kinds_for_waves(seed: int, waves: int, per_wave: int, kinds: tuple[str, ...] = KINDS,
                    modes: list[str] | None = None, database: str = "postgres") -> list[list[str]]:
    """Each wave's fault kinds. Per mode, the kinds that fit it (and the database) in a seeded order, dealt
    round-robin to that mode's waves in turn, so a run with enough waves of a mode uses every kind that fits
    it. (Without `modes`, every wave is regular.)"""
    modes = modes if modes is not None else ["regular"] * waves
    decks: dict[str, list[str]] = {}
    dealt: dict[str, int] = {}
    out = []
    for w in range(waves):
        mode = modes[w]
        if mode not in decks:
            # The regular deck keeps the seed's old name, so a regular run deals as it did before queue mode.
            rng = random.Random(f"{seed}:fault-kinds" + ("" if mode == "regular" else f":{mode}")
                                + ("" if database == "postgres" else f":{database}"))
            decks[mode] = list(kinds_fitting(mode, kinds, database))
            rng.shuffle(decks[mode])
            dealt[mode] = 0
        deck, i = decks[mode], dealt[mode]
        out.append([deck[(i + j) % len(deck)] for j in range(per_wave)] if deck else [])
        dealt[mode] = i + per_wave
    return out


def schedule(seed: int, wave: int, kinds: list[str]) -> list[PlannedFault]:
    rng = random.Random(f"{seed}:faults:{wave}")
    out = []
    for kind in kinds:
        offset = round(rng.uniform(*WINDOW_S), 2)
        if kind in ("n8n-kill", "main-kill"):
            out.append(PlannedFault(kind, offset, rng.choice(["in-call", "any time"]), 0.0))
        elif kind == "worker-kill":
            out.append(PlannedFault(kind, offset, rng.choice(["w0", "w1"]) + rng.choice([" in-call", ""]), 0.0))
        elif kind == "worker-freeze":
            out.append(PlannedFault(kind, offset, rng.choice(["w0", "w1"]) + rng.choice([" in-call", ""]),
                                    round(rng.uniform(*FREEZE_S), 2)))
        elif kind == "sidecar-kill":
            out.append(PlannedFault(kind, offset, rng.choice(["a", "b"]), round(rng.uniform(0.5, 4.0), 2)))
        elif kind == "postgres-restart":
            out.append(PlannedFault(kind, offset, rng.choice(["fast", "kill-9"]), round(rng.uniform(0.5, 3.0), 2)))
        elif kind == "patroni-switchover":
            out.append(PlannedFault(kind, offset, "to the synchronous standby", 0.0))
        elif kind == "patroni-primary-kill":
            out.append(PlannedFault(kind, offset, "primary", round(rng.uniform(0.5, 3.0), 2)))
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

    def _wait_for_a_call(self, fault: PlannedFault) -> int:
        """For a fault aimed inside a call: waits (up to 15 s) until a provider call is in flight; the calls in
        flight."""
        if fault.in_call:
            deadline = time.monotonic() + 15
            while self.stack.providers.in_flight() == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
        return self.stack.providers.in_flight()

    def inject(self, fault: PlannedFault) -> FaultFact:
        s = self.stack
        if fault.kind in ("n8n-kill", "main-kill"):
            in_flight = self._wait_for_a_call(fault)
            at = time.time()
            s.kill_n8n()
            s.restart_n8n()
            target = f"n8n {'queue-mode ' if fault.kind == 'main-kill' else ''}main ({in_flight} calls in flight)"
        elif fault.kind == "worker-kill":
            worker = int(fault.target[1])
            in_flight = self._wait_for_a_call(fault)
            at = time.time()
            s.kill_worker(worker)
            s.restart_worker(worker)
            target = f"worker {worker} ({in_flight} calls in flight)"
        elif fault.kind == "worker-freeze":
            worker = int(fault.target[1])
            in_flight = self._wait_for_a_call(fault)
            at = time.time()
            s.freeze_worker(worker)
            try:
                time.sleep(fault.down_s)
            finally:
                s.wake_worker(worker)
            target = f"worker {worker} frozen {fault.down_s:.1f} s ({in_flight} calls in flight)"
        elif fault.kind == "sidecar-kill":
            sidecar = s.sidecars["ab".index(fault.target)]
            at = time.time()
            sidecar.process.kill9()
            time.sleep(fault.down_s)
            sidecar.start()
            target = f"sidecar {fault.target}"
        elif fault.kind == "postgres-restart":
            at = time.time()
            s.restart_postgres(fault.target, fault.down_s)
            target = f"postgres ({fault.target})"
        elif fault.kind == "patroni-switchover":
            at = time.time()
            target = f"patroni {s.patroni_switchover()}"
        elif fault.kind == "patroni-primary-kill":
            at = time.time()
            target = f"patroni {s.patroni_kill_primary(fault.down_s)}"
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
