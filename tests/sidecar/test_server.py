"""Settings, metrics and health endpoints, graceful shutdown and the CLI."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.error
import urllib.request

import grpc
import pytest
from durable.v1 import instance_pb2
from durable_sidecar import app
from durable_sidecar.settings import Settings, SettingsError
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import Harness, make_settings
from tests.sidecar.helpers import Stubs, channel, free_port
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start


def test_every_invalid_setting_is_reported_at_once() -> None:
    env = {
        "DURABLE_DATABASE_URL": "mysql://nope",
        "DURABLE_DB_POOL_MAX": "many",
        "DURABLE_LEASE_SECONDS": "0",
        "DURABLE_AUTH_TOKENS": "short=ns",
        "DURABLE_LOG_FORMAT": "xml",
        "DURABLE_TLS_CERT_FILE": "/no/such/cert.pem",
        "DURABLE_AUTO_MIGRATE": "perhaps",
    }
    with pytest.raises(SettingsError) as err:
        Settings.from_env(env)
    text = str(err.value)
    for name in ("DURABLE_DATABASE_URL", "DURABLE_DB_POOL_MAX", "DURABLE_LEASE_SECONDS", "DURABLE_AUTH_TOKENS",
                 "DURABLE_LOG_FORMAT", "DURABLE_TLS_CERT_FILE", "DURABLE_TLS_KEY_FILE", "DURABLE_AUTO_MIGRATE"):
        assert name in text, name
    assert len(err.value.problems) >= 8


def test_defaults_need_only_a_token() -> None:
    with pytest.raises(SettingsError, match="no token configured"):
        Settings.from_env({})
    settings = Settings.from_env({"DURABLE_AUTH_TOKENS": "abcdefgh1=orders, ijklmnop2=billing"})
    assert settings.tokens == {"abcdefgh1": "orders", "ijklmnop2": "billing"}
    assert settings.lease_seconds == 1800 and settings.max_state_bytes == 16 * 1024 * 1024


def test_serve_with_bad_settings_exits_2_listing_problems() -> None:
    env = {**os.environ, "DURABLE_AUTH_TOKENS": "", "DURABLE_LEASE_SECONDS": "-1"}
    proc = subprocess.run([sys.executable, "-m", "durable_sidecar", "serve"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "DURABLE_LEASE_SECONDS" in proc.stderr and "DURABLE_AUTH_TOKENS" in proc.stderr


def _http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_metrics_liveness_and_readiness_endpoints(database_url: str) -> None:
    port = free_port()
    settings = make_settings(database_url, auth_tokens="metrics-token=ns-metrics", metrics_address=f"127.0.0.1:{port}")
    sidecar = await app.start(settings)
    ch = channel(sidecar.port)
    try:
        s = Stubs(ch, "metrics-token")
        key = new_key()
        await start(s, key)
        await save(s, item(key, "payment", {"a": 1}))
        status, body = await asyncio.to_thread(_http, f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert 'durable_rpc_total{code="OK",method="SaveCheckpoints"}' in body
        assert "durable_rpc_duration_seconds_bucket" in body and "durable_db_pool_connections" in body
        assert (await asyncio.to_thread(_http, f"http://127.0.0.1:{port}/livez"))[0] == 200
        assert (await asyncio.to_thread(_http, f"http://127.0.0.1:{port}/readyz"))[0] == 200
    finally:
        await ch.close()
        await sidecar.stop(grace=0.5)


async def test_graceful_stop_reports_not_serving_and_ends_streams(harness: Harness) -> None:
    s = harness.alpha
    stream = s.instances.WatchResumable(instance_pb2.WatchResumableRequest(
        claimant="n8n", workflow_ids=["wf-idle"], poll_interval_ms=100), metadata=s.metadata)
    first = await stream.read()  # heartbeat: the stream is open
    assert not first.instances
    health = health_pb2_grpc.HealthStub(s.channel)
    watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
    assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
    stopping = asyncio.create_task(harness.sidecar.stop(grace=2))
    assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
    # The open stream finishes on its own (no error) inside the grace period.
    while (msg := await stream.read()) is not grpc.aio.EOF:
        assert not msg.instances
    assert await stream.code() == grpc.StatusCode.OK
    await stopping


def _cli(database_url: str, *args: str, redis_url: str = "") -> subprocess.CompletedProcess[str]:
    """`durable-sidecar ARGS` on this database (and, given, the sidecars' Redis), as an operator runs it."""
    env = {**os.environ, "DURABLE_DATABASE_URL": database_url}
    if redis_url:
        env["DURABLE_REDIS_URL"] = redis_url
    return subprocess.run([sys.executable, "-m", "durable_sidecar", *args], env=env, capture_output=True, text=True,
                          timeout=60)


async def test_cli_lists_and_shows_instances_and_checkpoints(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    await save(s, item(key, "payment", {"paid": True}), item(key, "inventory", {"sku": "A-1"}))
    ns = harness.sidecar.settings.tokens[s.token]
    listed = await asyncio.to_thread(_cli, database_url, "instances", "list", "--namespace", ns)
    assert listed.returncode == 0, listed.stderr
    assert "KEY" in listed.stdout and key in listed.stdout and "inventory" in listed.stdout
    shown = await asyncio.to_thread(_cli, database_url, "instances", "show", WF, key, "--namespace", ns)
    assert shown.returncode == 0 and "last_sequence: 2" in shown.stdout
    cps = await asyncio.to_thread(_cli, database_url, "checkpoints", "list", WF, key, "--namespace", ns)
    assert cps.returncode == 0 and "payment" in cps.stdout and "inventory" in cps.stdout
    one = await asyncio.to_thread(_cli, database_url, "checkpoints", "show", WF, key, "1", "--namespace", ns)
    assert one.returncode == 0 and '"paid": true' in one.stdout
    pruned = await asyncio.to_thread(_cli, database_url, "prune", "--workflow", WF, "--key", key, "--keep-last", "1",
                                     "--namespace", ns)
    assert pruned.returncode == 0 and "deleted 1 checkpoints" in pruned.stdout
    missing = await asyncio.to_thread(_cli, database_url, "instances", "show", WF, "nope", "--namespace", ns)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    empty = await asyncio.to_thread(_cli, database_url, "prune", "--namespace", ns)
    assert empty.returncode == 1 and "keep_last" in empty.stderr
    migrated = await asyncio.to_thread(_cli, database_url, "migrate")
    assert migrated.returncode == 0 and "up to date" in migrated.stdout
