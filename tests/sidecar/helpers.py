"""Test helpers: throwaway databases, throwaway Redis servers, subprocess sidecars, gRPC clients."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import grpc
import psycopg
from durable.v1 import (
    audit_pb2_grpc,
    checkpoint_pb2_grpc,
    events_pb2_grpc,
    files_pb2_grpc,
    idempotency_pb2_grpc,
    instance_pb2_grpc,
    limits_pb2_grpc,
    operations_pb2_grpc,
    session_pb2_grpc,
    version_pb2_grpc,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ports import free_port  # e2e/ports.py (pytest's pythonpath): the one free-port helper

ADMIN_URL = os.environ.get("DURABLE_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("DURABLE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
MAX_MESSAGE = 64 * 1024 * 1024


def db_url(name: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


def create_database() -> str:
    """Creates an empty database and returns its URL."""
    name = f"durable_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return db_url(name)


def drop_database(url: str) -> None:
    name = url.rpartition("/")[2]
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class RedisServer:
    """A redis-server the test owns, on a free port; never the machine's shared one."""

    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        assert exe, "redis-server is not installed: the tests need it on PATH"
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


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Stubs:
    channel: grpc.aio.Channel
    token: str
    port: int = 0  # the sidecar's, where a test needs a channel of its own (0: not given)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    @property
    def instances(self) -> instance_pb2_grpc.InstanceServiceStub:
        return instance_pb2_grpc.InstanceServiceStub(self.channel)

    @property
    def checkpoints(self) -> checkpoint_pb2_grpc.CheckpointServiceStub:
        return checkpoint_pb2_grpc.CheckpointServiceStub(self.channel)

    @property
    def idempotency(self) -> idempotency_pb2_grpc.IdempotencyServiceStub:
        return idempotency_pb2_grpc.IdempotencyServiceStub(self.channel)

    @property
    def versions(self) -> version_pb2_grpc.VersionServiceStub:
        return version_pb2_grpc.VersionServiceStub(self.channel)

    @property
    def files(self) -> files_pb2_grpc.FileServiceStub:
        return files_pb2_grpc.FileServiceStub(self.channel)

    @property
    def operations(self) -> operations_pb2_grpc.OperationServiceStub:
        return operations_pb2_grpc.OperationServiceStub(self.channel)

    @property
    def audit(self) -> audit_pb2_grpc.AuditServiceStub:
        return audit_pb2_grpc.AuditServiceStub(self.channel)

    @property
    def events(self) -> events_pb2_grpc.EventServiceStub:
        return events_pb2_grpc.EventServiceStub(self.channel)

    @property
    def limits(self) -> limits_pb2_grpc.LimitServiceStub:
        return limits_pb2_grpc.LimitServiceStub(self.channel)

    @property
    def recovery(self) -> events_pb2_grpc.RecoveryServiceStub:
        return events_pb2_grpc.RecoveryServiceStub(self.channel)

    @property
    def sessions(self) -> session_pb2_grpc.SessionServiceStub:
        return session_pb2_grpc.SessionServiceStub(self.channel)

    def in_session(self, session_id: str) -> tuple[tuple[str, str], ...]:
        """The metadata of a call made by the n8n process of this session."""
        return (*self.metadata, ("durable-session", session_id))


def channel(port: int) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        f"127.0.0.1:{port}",
        options=[("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE),
                 # Own subchannels: a channel opened after a crash must not inherit the old one's backoff.
                 ("grpc.use_local_subchannel_pool", 1)],
    )


class SidecarProcess:
    """`durable-sidecar serve` in a child process, for crash tests (kill -9)."""

    def __init__(self, env: dict[str, str], *, unset: tuple[str, ...] = (), cwd: str | None = None) -> None:
        """env adds to (and unset removes from) this process's environment; cwd is the child's working directory."""
        self.port = free_port()
        self.env = {**os.environ, **env, "DURABLE_LISTEN_ADDRESS": f"127.0.0.1:{self.port}",
                    "DURABLE_METRICS_ADDRESS": "", "DURABLE_LOG_FORMAT": "text"}
        for name in unset:
            self.env.pop(name, None)
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "durable_sidecar", "serve"], env=self.env, cwd=self.cwd,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"sidecar exited with {self.proc.returncode}: {err[-2000:]}")
            with contextlib.suppress(grpc.RpcError), grpc.insecure_channel(f"127.0.0.1:{self.port}") as ch:
                reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            time.sleep(0.1)
        raise RuntimeError("sidecar did not become healthy within 30 s")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@contextlib.asynccontextmanager
async def two_sidecar_processes(token: str, namespace: str) -> AsyncIterator[tuple[str, list[Stubs]]]:
    """Two `durable-sidecar serve` processes on one new PostgreSQL database and a throwaway Redis: (its URL, a stub
    per process, both with the token). The first starts (and migrates) before the second; all is removed after."""
    url = create_database()
    procs: list[SidecarProcess] = []
    channels: list[grpc.aio.Channel] = []
    with redis_server() as redis:
        try:
            env = {"DURABLE_DATABASE_URL": url, "DURABLE_REDIS_URL": redis.url,
                   "DURABLE_AUTH_TOKENS": f"{token}={namespace}"}
            procs = [SidecarProcess(env), SidecarProcess(env)]
            for proc in procs:
                await asyncio.to_thread(proc.start)
            channels = [channel(p.port) for p in procs]
            yield url, [Stubs(ch, token) for ch in channels]
        finally:
            for ch in channels:
                await ch.close()
            for p in procs:
                p.stop()
            drop_database(url)
