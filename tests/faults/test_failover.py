"""PostgreSQL failover under load: a Patroni cluster (synchronous mode), two sidecar processes, nothing lost.

Two `durable-sidecar serve` processes share one Patroni cluster through a libpq
multi-host URL (target_session_attrs=read-write). Order workers drive a mixed load
through both (start-or-resume, claim → side effect → complete with the attempt as
fencing token, checkpoint saves, wake-ups or completion) and two claimers deliver the
wake-ups, while the primary node is killed with SIGKILL (Patroni and PostgreSQL) or a
planned switchover runs. Clients retry UNAVAILABLE as the nodes do. Afterwards every
acknowledged write is read back from the new primary. Run by `make faults`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import psycopg
import pytest
from durable.v1 import checkpoint_pb2, idempotency_pb2, instance_pb2
from durable_sidecar.stores.backend import migrate
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.faults.patroni import PatroniCluster, patroni_cluster, tools_missing
from tests.faults.report import TALLY
from tests.sidecar.helpers import Stubs, channel, free_port
from tests.sidecar.test_checkpoints import WF

pytestmark = [
    pytest.mark.failover,
    pytest.mark.postgres_only(reason="a Patroni cluster of PostgreSQL servers; the embedded database has no replicas"),
    pytest.mark.timeout(240),
]


@pytest.fixture(autouse=True, scope="module")
def _tools_installed() -> None:
    # make faults installs them first (make ha-setup): a missing tool fails the run, never skips it.
    missing = tools_missing()
    assert missing is None, missing

T = TypeVar("T")
TOKEN = "failover-token"
NAMESPACE = "ns-failover"
SCOPE = "payment"
WORKERS = 6
LOAD_BEFORE_S = 4.0
LOAD_AFTER_S = 6.0
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class SidecarProc:
    """`durable-sidecar serve` in a child process, logs to a file (a full pipe would block it)."""

    def __init__(self, database_url: str, log: Path) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        self.log = log
        self.env = {**os.environ, "DURABLE_DATABASE_URL": database_url, "DURABLE_REDIS_URL": "",
                    "DURABLE_AUTH_TOKENS": f"{TOKEN}={NAMESPACE}", "DURABLE_LISTEN_ADDRESS": f"127.0.0.1:{self.port}",
                    "DURABLE_METRICS_ADDRESS": f"127.0.0.1:{self.metrics_port}", "DURABLE_LOG_FORMAT": "text", "DURABLE_LOG_LEVEL": "WARNING",
                    "DURABLE_DB_POOL_TIMEOUT_SECONDS": "2", "DURABLE_DB_CONNECT_TIMEOUT_SECONDS": "10",
                    "DURABLE_HEALTH_CHECK_INTERVAL_SECONDS": "0.5"}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "durable_sidecar", "serve"], env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"sidecar exited: {self.log.read_text()[-2000:]}"
            if self.health() == "SERVING":
                return
            time.sleep(0.1)
        raise RuntimeError("sidecar did not become healthy within 30 s")

    def health(self) -> str:
        try:
            with grpc.insecure_channel(f"127.0.0.1:{self.port}") as ch:
                reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
        except grpc.RpcError:
            return "NO_ANSWER"

    def readyz(self) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=0.5) as reply:
                return f"readyz {reply.status}"
        except urllib.error.HTTPError as exc:
            return f"readyz {exc.code}"
        except OSError:
            return "readyz NO_ANSWER"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@dataclass
class Ledger:
    """What the clients were told, to be read back from the database afterwards."""

    instances: set[str] = field(default_factory=set)
    checkpoints: dict[tuple[str, int], str] = field(default_factory=dict)
    completions: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    side_effects: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    wakeups: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    delivered: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    acks_at: list[float] = field(default_factory=list)
    retries: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    wrong: list[str] = field(default_factory=list)
    ops: int = 0

    def acked(self) -> int:
        return (len(self.instances) + len(self.checkpoints) + len(self.completions) + len(self.wakeups)
                + len(self.finished))


async def _retrying(ledger: Ledger, call: Callable[[], Awaitable[T]], budget_s: float = 60.0) -> T:
    """Retries what the nodes retry (UNAVAILABLE, a deadline): every call here is retry-safe by contract."""
    deadline = time.monotonic() + budget_s
    while True:
        ledger.ops += 1
        try:
            reply = await call()
            ledger.acks_at.append(time.monotonic())
            return reply
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in RETRYABLE or time.monotonic() > deadline:
                raise
            ledger.retries[exc.code().name] += 1
            await asyncio.sleep(0.1)


async def _order(s: list[Stubs], n: int, ledger: Ledger) -> None:
    """One order; its steps alternate between the two sidecars, like queue-mode workers behind a balancer."""
    key = f"order-{uuid.uuid4().hex[:12]}"
    exe = f"exec-{key}"

    def at(step: int) -> Stubs:
        return s[(n + step) % len(s)]

    await _retrying(ledger, lambda: at(0).instances.StartOrResume(instance_pb2.StartOrResumeRequest(
        workflow_id=WF, instance_key=key, execution_id=exe, lease_seconds=120), metadata=at(0).metadata, timeout=5))
    ledger.instances.add(key)
    claim = (await _retrying(ledger, lambda: at(1).idempotency.Claim(idempotency_pb2.ClaimRequest(items=[
        idempotency_pb2.ClaimItem(scope=SCOPE, key=key, payload_json=json.dumps({"order": key}).encode(),
                                  holder=exe, lease_seconds=120)]), metadata=at(1).metadata, timeout=5))).results[0]
    if claim.outcome != idempotency_pb2.CLAIM_OUTCOME_ACQUIRED:
        ledger.wrong.append(f"{key}: first claim by its holder answered {claim.outcome}")
        return
    attempt = claim.key.attempt
    ledger.side_effects[key].add(attempt)  # the charge runs once per attempt the caller was handed
    result = json.dumps({"charge": f"ch_{key}"}).encode()
    await _retrying(ledger, lambda: at(2).idempotency.Complete(idempotency_pb2.CompleteRequest(
        scope=SCOPE, key=key, attempt=attempt, result_json=result), metadata=at(2).metadata, timeout=5))
    ledger.completions[key] = (attempt, result)
    state = json.dumps({"order": key, "charged": True}).encode()
    saved = await _retrying(ledger, lambda: at(3).checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(
        items=[checkpoint_pb2.SaveCheckpointItem(workflow_id=WF, instance_key=key, step_name="charged",
                                                 state_json=state, execution_id=exe, node_name="Durable Checkpoint")]),
        metadata=at(3).metadata, timeout=5))
    cp = saved.results[0].checkpoint
    ledger.checkpoints[(key, cp.sequence)] = cp.sha256
    if n % 2:
        await _retrying(ledger, lambda: at(4).instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(
            workflow_id=WF, instance_key=key, execution_id=exe, delay_seconds=1), metadata=at(4).metadata, timeout=5))
        ledger.wakeups.add(key)
    else:
        await _retrying(ledger, lambda: at(4).instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
            workflow_id=WF, instance_key=key, execution_id=exe, result_json=b'{"shipped":true}'),
            metadata=at(4).metadata, timeout=5))
        ledger.finished.add(key)


async def _worker(s: list[Stubs], w: int, stop: asyncio.Event, ledger: Ledger) -> None:
    n = w
    while not stop.is_set():
        await _order(s, n, ledger)
        n += WORKERS


async def _claimer(st: Stubs, name: str, stop: asyncio.Event, ledger: Ledger) -> None:
    """The Resume Trigger's part: claim due wake-ups, resume each with its claim token, finish it."""
    while not stop.is_set():
        reply = await _retrying(ledger, lambda: st.instances.ClaimResumable(instance_pb2.ClaimResumableRequest(
            workflow_ids=[WF], claimant=name, max_instances=20, lease_seconds=10), metadata=st.metadata, timeout=5))
        for r in reply.instances:
            key = r.instance.instance_key
            ledger.delivered[key] += 1
            exe = f"wake-{key}-{ledger.delivered[key]}"
            await _retrying(ledger, lambda k=key, e=exe, t=r.claim_token: st.instances.StartOrResume(
                instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=k, execution_id=e, claim_token=t),
                metadata=st.metadata, timeout=5))
            await _retrying(ledger, lambda k=key, e=exe: st.instances.CompleteInstance(
                instance_pb2.CompleteInstanceRequest(workflow_id=WF, instance_key=k, execution_id=e,
                                                     result_json=b'{"woke":true}'), metadata=st.metadata, timeout=5))
        if not reply.instances:
            await asyncio.sleep(0.2)


def _read_back(url: str, ledger: Ledger) -> tuple[list[str], dict[str, str]]:
    """(acknowledged writes missing or different in the database, status of each instance)."""
    lost: list[str] = []
    with psycopg.connect(url) as conn:
        status = {k: st for k, st in conn.execute(
            "SELECT instance_key, status FROM durable_instances WHERE namespace = %s", (NAMESPACE,))}
        cps = {(k, seq): sha for k, seq, sha in conn.execute(
            "SELECT instance_key, sequence, sha256 FROM durable_checkpoints WHERE namespace = %s", (NAMESPACE,))}
        keys = {k: (st, att, bytes(res) if res is not None else None) for k, st, att, res in conn.execute(
            "SELECT key, status, attempt, result_json FROM durable_idempotency_keys WHERE namespace = %s AND scope = %s",
            (NAMESPACE, SCOPE))}
    lost += [f"instance {k}" for k in ledger.instances if k not in status]
    lost += [f"checkpoint {k}#{seq}" for (k, seq), sha in ledger.checkpoints.items() if cps.get((k, seq)) != sha]
    lost += [f"completion {k}" for k, (att, res) in ledger.completions.items() if keys.get(k) != ("completed", att, res)]
    lost += [f"completed instance {k}" for k in ledger.finished if status.get(k) != "completed"]
    return lost, status


def _unavailability(acks_at: list[float], fault_at: float) -> float:
    """The longest time no call succeeded on either sidecar, in the window around the fault."""
    times = sorted(t for t in acks_at if t >= fault_at - 2.0)
    gaps = [b - a for a, b in itertools.pairwise(times) if b >= fault_at]
    return max(gaps, default=0.0)


@pytest.fixture
def cluster() -> Iterator[PatroniCluster]:
    with patroni_cluster() as c:
        asyncio.run(migrate(c.url))
        yield c


@pytest.fixture
async def sidecars(cluster: PatroniCluster) -> AsyncIterator[list[SidecarProc]]:
    procs = [SidecarProc(cluster.url, cluster.root / f"sidecar{i}.log") for i in range(2)]
    try:
        for p in procs:
            await asyncio.to_thread(p.start)
        yield procs
    finally:
        for p in procs:
            await asyncio.to_thread(p.stop)


async def _failover_under_load(cluster: PatroniCluster, sidecars: list[SidecarProc],
                               inject: Callable[[], None], name: str) -> dict[str, Any]:
    channels = [channel(p.port) for p in sidecars]
    stubs = [Stubs(ch, TOKEN) for ch in channels]
    ledger = Ledger()
    stop = asyncio.Event()
    health_seen: dict[int, set[str]] = defaultdict(set)

    async def watch_health() -> None:
        while not stop.is_set():
            for i, p in enumerate(sidecars):
                health_seen[i].add(await asyncio.to_thread(p.health))
                health_seen[i].add(await asyncio.to_thread(p.readyz))
            await asyncio.sleep(0.3)

    try:
        old_leader = cluster.leader().name
        tasks = [asyncio.create_task(_worker(stubs, w, stop, ledger)) for w in range(WORKERS)]
        claimers = [asyncio.create_task(_claimer(st, f"claimer-{i}", stop, ledger)) for i, st in enumerate(stubs)]
        watcher = asyncio.create_task(watch_health())
        await asyncio.sleep(LOAD_BEFORE_S)
        fault_at = time.monotonic()
        await asyncio.to_thread(inject)
        # Load runs on until the cluster has a new leader and a while after.
        while True:
            with contextlib.suppress(AssertionError):
                if cluster.leader().name != old_leader:
                    break
            assert time.monotonic() - fault_at < 60, "no new leader within 60 s"
            await asyncio.sleep(0.2)
        promoted_s = time.monotonic() - fault_at
        await asyncio.sleep(LOAD_AFTER_S)
        stop.set()
        await asyncio.gather(*tasks)
        # Every acknowledged wake-up is delivered and finished (a claim whose answer was lost
        # in the switch is delivered again after its 10 s lease).
        deadline = time.monotonic() + 30
        stop_claimers = asyncio.Event()
        claimers2 = [asyncio.create_task(_claimer(st, f"drain-{i}", stop_claimers, ledger))
                     for i, st in enumerate(stubs)]
        await asyncio.gather(*claimers)
        while time.monotonic() < deadline:
            _, status = await asyncio.to_thread(_read_back, cluster.url, ledger)
            if all(status.get(k) == "completed" for k in ledger.wakeups):
                break
            await asyncio.sleep(0.5)
        stop_claimers.set()
        await asyncio.gather(*claimers2)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        lost, status = await asyncio.to_thread(_read_back, cluster.url, ledger)
        lost += [f"wake-up {k}" for k in ledger.wakeups if status.get(k) != "completed"]
        duplicates = [k for k, attempts in ledger.side_effects.items() if len(attempts) > 1]
        window = _unavailability(ledger.acks_at, fault_at)
        health_after = [await asyncio.to_thread(p.health) for p in sidecars]
        readyz_after = [await asyncio.to_thread(p.readyz) for p in sidecars]
        figures = {"acked": ledger.acked(), "lost": lost, "duplicates": duplicates, "window_s": round(window, 2),
                   "promoted_s": round(promoted_s, 2), "retries": dict(ledger.retries), "wrong": ledger.wrong,
                   "orders": len(ledger.instances), "wakeups": len(ledger.wakeups),
                   "redelivered": sum(1 for v in ledger.delivered.values() if v > 1),
                   "health_seen": {i: sorted(v) for i, v in health_seen.items()}, "health_after": health_after + readyz_after,
                   "old_leader": old_leader, "new_leader": cluster.leader().name}
        print(f"\n{name}: {json.dumps(figures, default=str)[:3000]}")
        TALLY.add(name, faults=1, operations=ledger.ops, lost=len(lost), duplicates=len(duplicates),
                  note=(f"acknowledged writes={figures['acked']} unavailability={window:.2f}s "
                        f"new leader after {promoted_s:.2f}s retries={dict(ledger.retries)}"))
        assert ledger.wrong == []
        assert lost == [], lost[:20]
        assert duplicates == []
        assert health_after == ["SERVING", "SERVING"] and readyz_after == ["readyz 200", "readyz 200"]
        assert ledger.acked() > 50
        return figures
    finally:
        stop.set()
        for ch in channels:
            await ch.close()


async def test_kill9_of_the_primary_node_under_load_loses_nothing(cluster: PatroniCluster,
                                                                  sidecars: list[SidecarProc]) -> None:
    def kill_primary() -> None:
        cluster.kill9_node(cluster.leader())

    figures = await _failover_under_load(cluster, sidecars, kill_primary, "Patroni: kill -9 of the primary node")
    # No primary for ~ttl seconds: health and /readyz said so, and came back by themselves (asserted above).
    for seen in figures["health_seen"].values():
        assert {"NOT_SERVING", "readyz 503"} <= set(seen), figures["health_seen"]
    assert figures["window_s"] < 30, figures  # aim: under 15 s (Patroni ttl 10 s + loop_wait 1 s)


async def test_switchover_under_load_loses_nothing(cluster: PatroniCluster, sidecars: list[SidecarProc]) -> None:
    def switchover() -> None:
        cluster.switchover(candidate=cluster.sync_standby().name)

    figures = await _failover_under_load(cluster, sidecars, switchover, "Patroni: planned switchover")
    assert figures["window_s"] < 15, figures  # aim: under 3 s
