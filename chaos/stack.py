"""The stack a chaos run starts once: a throwaway PostgreSQL and Redis, two sidecars on them, n8n (its own
database on the machine's PostgreSQL) with our package and a credential listing both sidecars, and the fake
providers. n8n runs in regular mode (one process) or queue mode (a main and two workers, Bull on a second Redis
of the stack's own); `use_mode` switches between them on the same n8n database. Everything it starts it stops,
also on failure."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
import psycopg
from harness import CREDENTIAL_ID, NAMESPACE, TOKEN, N8n, Process, Sidecar, create_db, drop_db, http, tail, wait_until
from ports import free_port

from chaos.model import Case
from chaos.providers import Providers
from tests.faults.infra import ThrowawayPostgres
from tests.faults.patroni import PatroniCluster

REPO = Path(__file__).resolve().parents[1]
# Workers in queue mode: two, so the instances of a killed or frozen one resume on the other.
WORKERS = 2


class Redis:
    """redis-server on a free loopback port, no persistence: the sidecars' cache, killed and started again."""

    def __init__(self, work: Path, name: str = "redis") -> None:
        self.port = free_port()
        self.process = Process(name, ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no"], dict(os.environ), work / f"{name}.log")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process.start()
        harness.wait_until("redis to answer PING", self.pings, timeout=20, interval=0.1)

    def pings(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        return False


class ChaosStack:
    def __init__(self, work: Path, providers: Providers, database: str = "postgres") -> None:
        self.work, self.providers, self.database = work, providers, database
        # The sidecars' database: one throwaway PostgreSQL, or (the long form) a throwaway Patroni cluster.
        self.patroni = PatroniCluster(max_connections=100) if database == "patroni" else None
        self.pg = ThrowawayPostgres(max_connections=100) if self.patroni is None else None
        self.redis = Redis(work)
        self.sidecars: list[Sidecar] = []
        self.n8n_db = ""
        self.n8n: N8n | None = None
        self.main: Process | None = None
        self.mode = "regular"
        # Bull's Redis in queue mode: the stack's own, apart from the sidecars' (which redis-kill empties).
        self.queue_redis: Redis | None = None
        self.workers: list[Process] = []
        self.api_key = ""

    # --- start and stop ---

    @property
    def db_url(self) -> str:
        if self.patroni is not None:
            return self.patroni.url
        assert self.pg is not None
        return self.pg.url

    def start(self, mode: str = "regular") -> None:
        if self.patroni is not None:
            self.patroni.start()
        else:
            assert self.pg is not None
            self.pg.start()
        self.redis.start()
        for name in ("a", "b"):
            folder = self.work / f"sidecar-{name}"
            folder.mkdir()
            sidecar = Sidecar(folder, "postgres")
            # Sidecar's own env dict is the process's: point it at the throwaway PostgreSQL and Redis.
            sidecar.base_env.update({"DURABLE_DATABASE_URL": self.db_url, "DURABLE_REDIS_URL": self.redis.url,
                                     "DURABLE_CONSOLE_ENABLED": "false"})
            sidecar.start()
            self.sidecars.append(sidecar)
        self.n8n_db = create_db("n8n_chaos")
        package_dir = Path(os.environ.get("DURABLE_E2E_PACKAGE_DIR", str(REPO / "node-package")))
        self.n8n = N8n(self.work, self.n8n_db, package_dir)
        self._credential()
        self.use_mode(mode)
        self.api_key = self.n8n.create_api_key("chaos")

    def use_mode(self, mode: str) -> None:
        """n8n in `mode` ("regular" or "queue"): stops what runs in the other mode (SIGTERM, drained), starts
        the main (and in queue mode the workers) on the same database, encryption key and user folder."""
        assert self.n8n is not None
        if self.main is not None and self.mode == mode:
            return
        for p in [*self.workers, *([self.main] if self.main else [])]:
            p.stop()
        self.workers, self.main, self.mode = [], None, mode
        queue_env = {"EXECUTIONS_MODE": "queue", "QUEUE_HEALTH_CHECK_ACTIVE": "false",
                     "QUEUE_BULL_REDIS_HOST": "127.0.0.1", "QUEUE_BULL_PREFIX": f"chaos-{uuid.uuid4().hex[:8]}"}
        if mode == "queue":
            if self.queue_redis is None:
                self.queue_redis = Redis(self.work, "redis-queue")
                self.queue_redis.start()
            self.n8n.env.update({**queue_env, "QUEUE_BULL_REDIS_PORT": str(self.queue_redis.port)})
        else:
            for k in [*queue_env, "QUEUE_BULL_REDIS_PORT"]:
                self.n8n.env.pop(k, None)
        self.main = self.n8n.start_main()
        if mode == "queue":
            self.workers = [self._start_worker() for _ in range(WORKERS)]

    def _credential(self) -> None:
        """One credential listing both sidecars, every other field at its default (Call Deadline 30 s)."""
        assert self.n8n is not None
        a, b = self.sidecars
        path = self.work / "credentials.json"
        path.write_text(json.dumps([{
            "id": CREDENTIAL_ID, "type": "durableSidecarApi", "name": "Durable Sidecar (chaos)",
            "data": {"host": f"127.0.0.1:{a.port}, 127.0.0.1:{b.port}", "port": a.port, "tls": False, "token": TOKEN},
        }]))
        self.n8n.cli("import:credentials", f"--input={path}")

    def close(self) -> None:
        if self.n8n is not None:
            self.n8n.stop_all()
        for s in self.sidecars:
            s.close()
        self.redis.process.stop()
        if self.queue_redis is not None:
            self.queue_redis.process.stop()
        if self.patroni is not None:
            self.patroni.cleanup()
        if self.pg is not None:
            self.pg.cleanup()
        if self.n8n_db:
            drop_db(self.n8n_db)

    # --- workflows ---

    def publish(self, cases: list[Case]) -> None:
        """Imports every workflow of the cases with one CLI call, publishes each through n8n's public API
        (sub-workflows first), and waits until n8n serves each case's webhook."""
        assert self.n8n is not None
        workflows = [wf for c in cases for wf in c.workflows]
        path = self.work / f"import-{cases[0].index}.json"
        path.write_text(json.dumps(workflows))
        self.n8n.cli("import:workflow", f"--input={path}")
        for wf in workflows:
            status, reply = http("POST", f"{self.n8n.url}/api/v1/workflows/{wf['id']}/activate", {},
                                 headers={"X-N8N-API-KEY": self.api_key}, timeout=60)
            if status != 200:
                # (A workflow n8n's public API will not activate, e.g. a sub-workflow: its CLI publishes it.)
                try:
                    self.n8n.cli("publish:workflow", f"--id={wf['id']}")
                except RuntimeError as exc:
                    raise RuntimeError(f"publishing {wf['id']}: HTTP {status}: {reply[:2000]!r}; CLI: {exc}") from exc
        for c in cases:
            self.n8n.wait_webhook(c.path, timeout=120)

    def retire(self, cases: list[Case]) -> None:
        """Unpublishes a checked wave's workflows, so a long run's n8n holds only the running wave's triggers."""
        assert self.n8n is not None
        for wf in (wf for c in cases for wf in reversed(c.workflows)):
            http("POST", f"{self.n8n.url}/api/v1/workflows/{wf['id']}/deactivate", {},
                 headers={"X-N8N-API-KEY": self.api_key}, timeout=60)

    def webhook_url(self, case: Case) -> str:
        assert self.n8n is not None
        return f"{self.n8n.url}/webhook/{case.path}"

    # --- faults ---

    def kill_n8n(self) -> None:
        assert self.main is not None
        self.main.kill9()

    def restart_n8n(self) -> None:
        assert self.n8n is not None
        self.main = self.n8n.start_main()

    def _start_worker(self) -> Process:
        assert self.n8n is not None
        w = self.n8n.process("worker", env={"N8N_LOG_LEVEL": "info"})  # it says when it is ready
        w.start()
        wait_until(f"{w.name} to be ready", lambda: "worker is now ready" in w.log.read_text(errors="replace"),
                   timeout=180, interval=0.3)
        return w

    def kill_worker(self, i: int) -> None:
        self.workers[i].kill9()

    def restart_worker(self, i: int) -> None:
        self.workers[i] = self._start_worker()

    def freeze_worker(self, i: int) -> None:
        """SIGSTOP to the worker's whole process group (its task runner too)."""
        proc = self.workers[i].proc
        assert proc is not None
        os.killpg(proc.pid, signal.SIGSTOP)

    def wake_worker(self, i: int) -> None:
        proc = self.workers[i].proc
        assert proc is not None
        os.killpg(proc.pid, signal.SIGCONT)

    def restart_postgres(self, how: str, down_s: float) -> None:
        """The throwaway PostgreSQL stopped (`fast`) or killed (`kill-9`), and started again after `down_s`."""
        assert self.pg is not None
        if how == "fast":
            self.pg.stop("fast")
        else:
            self.pg.kill9()
        time.sleep(down_s)
        self.pg.start()

    def patroni_switchover(self) -> str:
        """A planned switchover to the synchronous standby; returns once the old primary streams again."""
        assert self.patroni is not None
        old, new = self.patroni.leader().name, self.patroni.sync_standby().name
        self.patroni.switchover(new)
        wait_until(f"{new} to lead", lambda: self._leader() == new, timeout=60, interval=0.2)
        self.patroni.wait_healthy(120)
        return f"switchover {old} → {new}"

    def patroni_kill_primary(self, down_s: float) -> str:
        """kill -9 of the primary (Patroni and PostgreSQL); once another node leads, the killed node starts again
        after `down_s` and rejoins; returns once the cluster is whole."""
        assert self.patroni is not None
        node = self.patroni.leader()
        self.patroni.kill9_node(node)
        wait_until("another node to lead", lambda: self._leader() not in ("", node.name), timeout=90, interval=0.2)
        new = self._leader()
        time.sleep(down_s)
        self.patroni.start_node(node)
        self.patroni.wait_healthy(180)
        return f"primary {node.name} killed, {new} leads"

    def _leader(self) -> str:
        assert self.patroni is not None
        return next((str(m["name"]) for m in self.patroni.members() if m.get("role") == "leader"), "")

    # --- reading the sidecars' database ---

    @contextlib.contextmanager
    def db(self) -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(self.db_url, connect_timeout=10) as conn:
            yield conn

    def operator_retry(self, workflow_id: str, key: str) -> None:
        """`durable-sidecar instances retry`, as an operator runs it."""
        self.sidecars[0].cli("instances", "retry", workflow_id, key, "--reason", "chaos: the provider is back",
                             "--actor", "chaos", "--namespace", NAMESPACE)

    def logs(self) -> dict[str, str]:
        """The tail of every log, for a failure's folder."""
        out = {f"sidecar-{n}": tail(s.process.log, 200) for n, s in zip("ab", self.sidecars, strict=False)}
        if self.n8n is not None:
            for p in self.n8n.processes:
                out[p.name] = tail(p.log, 300)
        out["redis"] = tail(self.redis.process.log, 50)
        if self.queue_redis is not None:
            out["redis-queue"] = tail(self.queue_redis.process.log, 50)
        if self.pg is not None:
            out["postgres"] = tail(self.pg.root / "log", 100)
        if self.patroni is not None:
            for node in self.patroni.nodes:
                out[f"patroni-{node.name}"] = tail(node.log, 100)
        return out


def decode(blob: bytes | None, encoding: int = 0) -> dict[str, Any]:
    """A stored JSON state or result (zlib-compressed when encoding is 1)."""
    if blob is None:
        return {}
    raw = zlib.decompress(bytes(blob)) if encoding == 1 else bytes(blob)
    value = json.loads(raw or b"{}")
    return value if isinstance(value, dict) else {"value": value}
