"""A throwaway Patroni cluster the failover tests own: etcd and three PostgreSQL 15 nodes in synchronous mode.

Everything runs on this machine under a temporary directory on free ports (the
shared PostgreSQL on 5432 is never touched). Debian's `patroni` and `etcd-server`
come from `make ha-setup`. Timeouts are a test cluster's: a leader key lives
`ttl` seconds, so a node that dies is replaced within about ttl + loop_wait.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.faults.infra import PG_BIN
from tests.sidecar.helpers import free_port

# loop_wait + 2 * retry_timeout must stay within ttl (Patroni's own rule).
TTL_SECONDS = 10
LOOP_WAIT_SECONDS = 1
RETRY_TIMEOUT_SECONDS = 3


def tools_missing() -> str | None:
    """Why the cluster cannot run here (None when it can)."""
    for exe in ("patroni", "patronictl", "etcd"):
        if shutil.which(exe) is None:
            return f"{exe} is not installed: run `make ha-setup` (Debian's patroni and etcd-server)"
    if not (PG_BIN / "postgres").exists():
        return f"PostgreSQL binaries not found in {PG_BIN} (set DURABLE_TEST_PG_BIN)"
    return None


def _run_as_postgres() -> dict[str, Any]:
    # initdb and postgres refuse to run as root; CI and sessions run as root.
    if os.geteuid() == 0:
        return {"user": "postgres", "group": "postgres", "extra_groups": []}
    return {}


@dataclass
class PatroniNode:
    name: str
    pg_port: int
    rest_port: int
    data: Path
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().split()[0])
        return None


class PatroniCluster:
    """etcd (one member) and three Patroni-managed PostgreSQL nodes with synchronous replication."""

    def __init__(self, nodes: int = 3, *, max_connections: int = 80) -> None:
        self.max_connections = max_connections
        self.root = Path(tempfile.mkdtemp(prefix="durable-patroni-"))
        os.chmod(self.root, 0o755)
        self.scope = f"durable-{self.root.name[-8:]}"
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.nodes = [self._node(f"pg{i + 1}") for i in range(nodes)]

    def _node(self, name: str) -> PatroniNode:
        home = self.root / name
        home.mkdir()
        if os.geteuid() == 0:
            shutil.chown(home, "postgres", "postgres")
        node = PatroniNode(name, free_port(), free_port(), home / "data", home / "patroni.yml", home / "patroni.log")
        node.config.write_text(json.dumps(self._config(node, home)))  # JSON is YAML
        return node

    def _config(self, node: PatroniNode, home: Path) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "namespace": "/durable-test/",
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{node.rest_port}", "connect_address": f"127.0.0.1:{node.rest_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL_SECONDS,
                    "loop_wait": LOOP_WAIT_SECONDS,
                    "retry_timeout": RETRY_TIMEOUT_SECONDS,
                    # Never promote a replica more than 1 MB behind; in synchronous mode only
                    # the synchronous standby (which has every acknowledged commit) is promoted.
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    # Not strict: with every standby gone the primary keeps writing (availability
                    # over a second copy); the tests keep one standby alive throughout.
                    "synchronous_mode_strict": False,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {"max_connections": self.max_connections, "wal_level": "replica", "hot_standby": "on",
                                       "max_wal_senders": 10, "max_replication_slots": 10, "wal_keep_size": "64MB",
                                       "fsync": "on", "synchronous_commit": "on"},
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"username": "postgres"}],
                "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(node.data),
                "bin_dir": str(PG_BIN),
                "pgpass": str(home / "pgpass"),
                "authentication": {"superuser": {"username": "postgres", "password": "postgres"},
                                   "replication": {"username": "replicator", "password": "replicator"}},
                "parameters": {"unix_socket_directories": str(home)},
                "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }

    # --- lifecycle ------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> None:
        etcd_dir = self.root / "etcd"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        with (self.root / "etcd.log").open("wb") as log:
            self.etcd = subprocess.Popen(
                ["etcd", "--name", "e1", "--data-dir", str(etcd_dir), "--listen-client-urls", client,
                 "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"e1={peer}", "--initial-cluster-state", "new"],
                stdout=log, stderr=subprocess.STDOUT)
        self._wait(lambda: self._get(f"{client}/health") is not None, "etcd answering", 20)
        for node in self.nodes:
            self.start_node(node)
        self.wait_healthy(timeout)

    def start_node(self, node: PatroniNode) -> None:
        env = {**os.environ, "HOME": str(node.config.parent)}
        with node.log.open("ab") as log:
            node.proc = subprocess.Popen(["patroni", str(node.config)], stdout=log, stderr=subprocess.STDOUT, env=env,
                                         cwd=node.config.parent, **_run_as_postgres())

    def wait_healthy(self, timeout: float = 120.0) -> None:
        """A leader, a synchronous standby, and every live node running and streaming."""
        def ok() -> bool:
            members = self.members()
            live = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
            roles = [m.get("role") for m in members]
            return ("leader" in roles and "sync_standby" in roles and len(members) == len(live)
                    and all(m.get("state") in ("running", "streaming") for m in members))
        self._wait(ok, "a leader, a sync standby and all members running", timeout)

    def cleanup(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
            self._kill_postgres(node)
        if self.etcd is not None:
            self.etcd.kill()
            self.etcd.wait(timeout=10)
        if os.environ.get("DURABLE_KEEP_PATRONI"):
            print(f"patroni cluster kept in {self.root}")
            return
        shutil.rmtree(self.root, ignore_errors=True)

    # --- what the tests inject --------------------------------------------------------------

    def kill9_node(self, node: PatroniNode) -> None:
        """The node is gone at once, like a power cut: Patroni, the postmaster and its backends get SIGKILL."""
        pid = node.postmaster_pid()
        if node.proc is not None:
            node.proc.kill()
        self._kill_postgres(node, pid)
        if node.proc is not None:
            node.proc.wait(timeout=10)

    def _kill_postgres(self, node: PatroniNode, pid: int | None = None) -> None:
        pid = pid or node.postmaster_pid()
        if pid is None:
            return
        subprocess.run(["pkill", "-9", "-P", str(pid)], check=False)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def switchover(self, candidate: str) -> None:
        """A planned switchover through the leader's REST API (what `patronictl switchover` calls)."""
        leader = self.leader()
        body = json.dumps({"leader": leader.name, "candidate": candidate}).encode()
        req = urllib.request.Request(f"{leader.rest}/switchover", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as reply:
            assert reply.status == 200, reply.read()

    # --- reading the cluster ----------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                continue
            cluster = self._get(f"{node.rest}/cluster")
            if cluster is not None:
                return list(cluster.get("members", []))
        return []

    def leader(self) -> PatroniNode:
        for m in self.members():
            if m.get("role") == "leader":
                return self.node(m["name"])
        raise AssertionError("the cluster has no leader")

    def sync_standby(self) -> PatroniNode:
        for m in self.members():
            if m.get("role") == "sync_standby":
                return self.node(m["name"])
        raise AssertionError("the cluster has no synchronous standby")

    def node(self, name: str) -> PatroniNode:
        return next(n for n in self.nodes if n.name == name)

    @property
    def url(self) -> str:
        """A libpq multi-host URL: any node, but only the one that accepts writes."""
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)
        return f"postgresql://postgres:postgres@{hosts}/postgres?target_session_attrs=read-write"

    @staticmethod
    def _get(url: str) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                return dict(json.loads(reply.read() or b"{}"))
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def _wait(self, check: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.2)
        logs = "\n".join(f"--- {n.name}\n{n.log.read_text()[-1500:] if n.log.exists() else ''}" for n in self.nodes)
        raise RuntimeError(f"patroni test cluster: no {what} within {timeout}s; members {self.members()}\n{logs}")


@contextlib.contextmanager
def patroni_cluster() -> Iterator[PatroniCluster]:
    cluster = PatroniCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.cleanup()
