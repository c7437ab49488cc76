"""What the benchmark runs against: throwaway databases, a throwaway redis-server, child servers, RSS and CPU probes."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil
import psycopg
from ports import free_port  # e2e/ports.py (on sys.path through bench/__init__.py): the one free-port helper

ADMIN_URL = os.environ.get("DURABLE_BENCH_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
TOKEN = "bench-token-0001"
NAMESPACE = "bench"
MAX_MESSAGE = 64 * 1024 * 1024
GRPC_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]


def _db_url(name: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


@contextlib.contextmanager
def throwaway_database(prefix: str) -> Iterator[str]:
    """A new empty database on the machine's PostgreSQL, dropped (FORCE) afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _db_url(name)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class RedisServer:
    """A redis-server the benchmark owns on a free port: the machine's shared Redis is never stopped."""

    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not on PATH: the benchmark starts its own")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return
            time.sleep(0.05)
        raise RuntimeError("throwaway redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None


class ChildServer:
    """A gRPC server in a child process (the sidecar or the no-op floor) with its log in a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], port: int, log_dir: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.port = port
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 60.0) -> None:
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")
            with contextlib.suppress(grpc.RpcError), grpc.insecure_channel(f"127.0.0.1:{self.port}") as ch:
                reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not become healthy within {timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def sidecar_server(database_url: str, redis_url: str, log_dir: Path, **env: str) -> ChildServer:
    """`durable-sidecar serve` with its default settings, except addresses, the token and the cache."""
    port = free_port()
    child_env = {
        **os.environ,
        "DURABLE_DATABASE_URL": database_url,
        "DURABLE_REDIS_URL": redis_url,
        "DURABLE_LISTEN_ADDRESS": f"127.0.0.1:{port}",
        "DURABLE_METRICS_ADDRESS": "",
        "DURABLE_AUTH_TOKENS": f"{TOKEN}={NAMESPACE}",
        **env,
    }
    return ChildServer("sidecar", [sys.executable, "-m", "durable_sidecar", "serve"], child_env, port, log_dir)


def noop_server(log_dir: Path) -> ChildServer:
    port = free_port()
    return ChildServer("noop", [sys.executable, "-m", "bench.noop_server", str(port)],
                       {**os.environ, "PYTHONPATH": _repo_pythonpath()}, port, log_dir)


def _repo_pythonpath() -> str:
    root = str(Path(__file__).resolve().parent.parent)
    current = os.environ.get("PYTHONPATH", "")
    return f"{root}{os.pathsep}{current}" if current else root


def child_env() -> dict[str, str]:
    """Environment for a child Python process that imports `bench`."""
    return {**os.environ, "PYTHONPATH": _repo_pythonpath()}


class RssSampler:
    """Samples one process's resident set every few milliseconds; `peak()` since the last `reset()`."""

    def __init__(self, pid: int, interval_s: float = 0.005) -> None:
        self._proc = psutil.Process(pid)
        self._interval_s = interval_s
        self._peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self._peak = max(self._peak, self._proc.memory_info().rss)
            self._stop.wait(self._interval_s)

    def rss(self) -> int:
        return int(self._proc.memory_info().rss)

    def reset(self) -> None:
        self._peak = self.rss()

    def peak(self) -> int:
        return self._peak

    def __enter__(self) -> RssSampler:
        self.reset()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def _cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def _busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle, all cores together."""
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0))


def _tree() -> dict[int, psutil.Process]:
    me = psutil.Process()
    return {p.pid: p for p in [me, *me.children(recursive=True)]}


def _postgres_cpu() -> dict[int, float]:
    out = {}
    for p in psutil.process_iter(["name"]):
        if (p.info.get("name") or "").startswith("postgres"):
            with contextlib.suppress(psutil.Error):
                out[p.pid] = _cpu_seconds(p)
    return out


def _delta(start: dict[int, float], end: dict[int, float]) -> float:
    # Per process, so a backend that exits mid-run drops out instead of making the sum go negative;
    # a process that started mid-run counts from zero.
    return sum(max(0.0, cpu - start.get(pid, 0.0)) for pid, cpu in end.items())


def settle(max_wait_s: float = 30.0, busy_below_pct: float = 20.0) -> dict[str, Any]:
    """Before a round the bench compares with others: the machine's state made the same for each.

    PostgreSQL first writes back what the runs before left dirty (`CHECKPOINT`: the batch and
    10 MB runs leave hundreds of MB, and their write-back slowed a later round's floors by half),
    then this waits, up to `max_wait_s`, for a second in which the machine's CPUs are less than
    `busy_below_pct` busy. Nothing is reconfigured. Returns what it did, for the results.
    """
    t0 = time.monotonic()
    checkpoint: float | str
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        checkpoint = round(time.monotonic() - t0, 2)
    except psycopg.errors.InsufficientPrivilege:
        checkpoint = "not allowed for this role (DURABLE_BENCH_ADMIN_URL): skipped"
    cores = psutil.cpu_count() or 1
    busy = 100.0
    while True:
        before = _busy_seconds()
        time.sleep(1.0)
        busy = 100.0 * (_busy_seconds() - before) / cores
        if busy < busy_below_pct or time.monotonic() - t0 >= max_wait_s:
            break
    return {"checkpoint_s": checkpoint, "waited_s": round(time.monotonic() - t0, 1), "busy_pct": round(busy, 1)}


class CpuMeter:
    """CPU seconds of one run: the client (this process), the server child, all PostgreSQL processes, and
    everything else on the machine ("others": what else was running while this run was measured)."""

    def __init__(self, server_pid: int | None) -> None:
        self._server_pid = server_pid
        self._t0 = 0.0
        self._start: dict[str, Any] = {}

    def _now(self) -> dict[str, Any]:
        tree: dict[int, float] = {}
        for pid, proc in _tree().items():
            with contextlib.suppress(psutil.Error):
                tree[pid] = _cpu_seconds(proc)
        return {"tree": tree, "postgres": _postgres_cpu(), "busy": _busy_seconds()}

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._start = self._now()

    def used(self) -> dict[str, float]:
        now, start = self._now(), self._start
        me = os.getpid()
        out = {"client": now["tree"].get(me, 0.0) - start["tree"].get(me, 0.0)}
        if self._server_pid in now["tree"]:
            out["server"] = now["tree"][self._server_pid] - start["tree"].get(self._server_pid, 0.0)
        out["postgres"] = _delta(start["postgres"], now["postgres"])
        ours = _delta(start["tree"], now["tree"]) + out["postgres"]
        out["others"] = max(0.0, now["busy"] - start["busy"] - ours)
        return out

    def others_pct(self, used: dict[str, float]) -> float:
        """Share of the machine's CPU used by processes outside this run (the noise), in per cent."""
        wall = max(time.monotonic() - self._t0, 1e-9)
        return 100.0 * used["others"] / (wall * (psutil.cpu_count() or 1))


class OtherLoad:
    """What else ran during the whole benchmark: CPU of processes outside the benchmark's tree, sampled
    every two seconds so that short-lived processes (a colleague's test run) are seen too."""

    def __init__(self, interval_s: float = 2.0) -> None:
        self._t0 = time.monotonic()
        self._load0 = os.getloadavg()
        self._busy0 = _busy_seconds()
        self._mine: set[int] = set()
        self._seen: dict[int, tuple[str, float, float]] = {}  # pid -> (command, first cpu, last cpu)
        self._sample(first=True)
        self._stop = threading.Event()
        self._interval_s = interval_s
        self._thread = threading.Thread(target=self._loop, name="other-load", daemon=True)
        self._thread.start()

    def _sample(self, first: bool = False) -> None:
        self._mine |= set(_tree())
        for p in psutil.process_iter(["name", "cmdline"]):
            with contextlib.suppress(psutil.Error):
                cpu = _cpu_seconds(p)
                if p.pid in self._seen:
                    cmd, base, _ = self._seen[p.pid]
                    self._seen[p.pid] = (cmd, base, cpu)
                else:
                    cmd = " ".join(" ".join(p.info.get("cmdline") or []).split())[:80] or (p.info.get("name") or "?")
                    self._seen[p.pid] = (cmd, cpu if first else 0.0, cpu)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def report(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()
        elapsed = time.monotonic() - self._t0
        by_cmd: dict[str, float] = {}
        for pid, (cmd, base, last) in self._seen.items():
            if pid in self._mine:
                continue
            key = "postgres (all backends: ours and others')" if cmd.startswith("postgres") else cmd
            by_cmd[key] = by_cmd.get(key, 0.0) + max(0.0, last - base)
        top = sorted(by_cmd.items(), key=lambda kv: -kv[1])[:8]
        cores = psutil.cpu_count() or 1
        return {
            "elapsed_s": elapsed,
            "loadavg_start": self._load0,
            "loadavg_end": os.getloadavg(),
            "machine_busy_pct": round(100.0 * (_busy_seconds() - self._busy0) / (elapsed * cores), 1),
            "other_cpu_s": [{"process": k, "cpu_s": round(v, 1)} for k, v in top if v >= 1.0],
        }


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe_code(root: Path) -> dict[str, Any]:
    """The commit measured and how many sidecar files differed from it (read-only git)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    changed = [ln for ln in git("status", "--porcelain", "--", "sidecar", "proto").splitlines() if ln.strip()]
    return {"commit": git("rev-parse", "--short", "HEAD") or "unknown", "uncommitted_sidecar_files": len(changed)}


def describe_machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        pg = conn.execute("SELECT version()").fetchone()
        settings = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('synchronous_commit', 'fsync', 'shared_buffers', 'wal_level', 'max_wal_size', 'full_page_writes')"
        ).fetchall())
    redis_version = "unknown"
    exe = shutil.which("redis-server")
    if exe:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            redis_version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=5).stdout.strip()
    return {
        "cpu": cpu,
        "cores": psutil.cpu_count(logical=True),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgresql": pg[0] if pg else "unknown",
        "postgresql_settings": settings,
        "redis": redis_version,
        "packages": {p: _version(p) for p in ("grpcio", "protobuf", "psycopg", "psycopg-pool", "redis", "dbos")},
    }
