"""The stack a chaos run starts once: a throwaway PostgreSQL and Redis, two sidecars on them, n8n in regular
mode (its own database on the machine's PostgreSQL) with our package and a credential listing both sidecars,
and the fake providers. Everything it starts it stops, also on failure."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
import psycopg
from harness import CREDENTIAL_ID, NAMESPACE, TOKEN, N8n, Process, Sidecar, create_db, drop_db, http, tail
from ports import free_port

from chaos.generator import Case
from chaos.providers import Providers
from tests.faults.infra import ThrowawayPostgres

REPO = Path(__file__).resolve().parents[1]


class Redis:
    """redis-server on a free loopback port, no persistence: the sidecars' cache, killed and started again."""

    def __init__(self, work: Path) -> None:
        self.port = free_port()
        self.process = Process("redis", ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                         "--save", "", "--appendonly", "no"], dict(os.environ), work / "redis.log")

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
    def __init__(self, work: Path, providers: Providers) -> None:
        self.work, self.providers = work, providers
        self.pg = ThrowawayPostgres(max_connections=100)
        self.redis = Redis(work)
        self.sidecars: list[Sidecar] = []
        self.n8n_db = ""
        self.n8n: N8n | None = None
        self.main: Process | None = None
        self.api_key = ""

    # --- start and stop ---

    def start(self) -> None:
        self.pg.start()
        self.redis.start()
        for name in ("a", "b"):
            folder = self.work / f"sidecar-{name}"
            folder.mkdir()
            sidecar = Sidecar(folder, "postgres")
            # Sidecar's own env dict is the process's: point it at the throwaway PostgreSQL and Redis.
            sidecar.base_env.update({"DURABLE_DATABASE_URL": self.pg.url, "DURABLE_REDIS_URL": self.redis.url,
                                     "DURABLE_CONSOLE_ENABLED": "false"})
            sidecar.start()
            self.sidecars.append(sidecar)
        self.n8n_db = create_db("n8n_chaos")
        package_dir = Path(os.environ.get("DURABLE_E2E_PACKAGE_DIR", str(REPO / "node-package")))
        self.n8n = N8n(self.work, self.n8n_db, package_dir)
        self._credential()
        self.main = self.n8n.start_main()
        self.api_key = self.n8n.create_api_key("chaos")

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

    # --- reading the sidecars' database ---

    @contextlib.contextmanager
    def db(self) -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(self.pg.url, connect_timeout=10) as conn:
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
        out["postgres"] = tail(self.pg.root / "log", 100)
        return out


def decode(blob: bytes | None, encoding: int = 0) -> dict[str, Any]:
    """A stored JSON state or result (zlib-compressed when encoding is 1)."""
    if blob is None:
        return {}
    raw = zlib.decompress(bytes(blob)) if encoding == 1 else bytes(blob)
    value = json.loads(raw or b"{}")
    return value if isinstance(value, dict) else {"value": value}
