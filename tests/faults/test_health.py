"""Honest health: gRPC health and /readyz say NOT_SERVING while PostgreSQL is down and recover by themselves.

Against a PostgreSQL cluster the test creates and stops itself (initdb on a
free port); the machine's shared PostgreSQL is never touched.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable

import pytest
from durable.v1 import instance_pb2
from durable_sidecar import app
from durable_sidecar.stores.backend import migrate
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import make_settings
from tests.faults.infra import throwaway_postgres
from tests.sidecar.helpers import Stubs, channel

pytestmark = pytest.mark.postgres_only(
    reason="an outage of the database server: the embedded database is a file inside the sidecar, it has no server "
           "to stop")

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def _readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> float:
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"gave up waiting: {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_health_and_readyz_follow_the_database_and_recover_by_themselves() -> None:
    with throwaway_postgres() as pg:
        await migrate(pg.url)
        sidecar = await app.start(make_settings(
            pg.url, redis_url="", auth_tokens="health-token=ns-health", metrics_address="127.0.0.1:0",
            health_check_interval_seconds=0.2, db_pool_timeout_seconds=1.0, db_connect_timeout_seconds=2.0))
        ch = channel(sidecar.port)
        stub = health_pb2_grpc.HealthStub(ch)
        s = Stubs(ch, "health-token")
        assert sidecar.metrics_server is not None
        port = sidecar.metrics_server.port

        async def status(service: str = "") -> int:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            return int(reply.status)

        async def ready() -> int:
            return await asyncio.to_thread(_readyz, port)

        try:
            assert await status() == SERVING and await ready() == 200
            await asyncio.to_thread(pg.stop, "fast")

            async def down() -> bool:
                return await status() == NOT_SERVING and await status("durable.v1.InstanceService") == NOT_SERVING

            await _until("health NOT_SERVING during the outage", down)
            assert await ready() == 503
            await asyncio.to_thread(pg.start)

            async def up() -> bool:
                return await status() == SERVING

            took = await _until("health SERVING again without a restart", up)
            assert await ready() == 200
            started = await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
                workflow_id="wf-health", instance_key="order-1", execution_id="exec-1"), metadata=s.metadata, timeout=10)
            assert started.outcome == instance_pb2.START_OUTCOME_STARTED
            assert took < 10, f"health took {took:.1f}s to recover after PostgreSQL accepted connections"
        finally:
            await ch.close()
            await sidecar.stop(grace=0.5)


async def test_the_sidecar_finds_postgresql_that_starts_a_moment_after_it() -> None:
    """Start-up keeps trying (documented pool options, no patch) until the connect timeout, not only once."""
    with throwaway_postgres() as pg:
        await migrate(pg.url)
        await asyncio.to_thread(pg.stop, "fast")
        starting = asyncio.create_task(app.start(make_settings(
            pg.url, redis_url="", auth_tokens="late-token=ns-late", db_connect_timeout_seconds=15.0)))
        await asyncio.sleep(2.0)
        assert not starting.done()
        await asyncio.to_thread(pg.start)
        sidecar = await asyncio.wait_for(starting, timeout=15)
        try:
            assert await sidecar.db.ping()
        finally:
            await sidecar.stop(grace=0.5)
