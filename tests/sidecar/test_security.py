"""Tokens, namespaces and TLS."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import grpc
import pytest
from durable.v1 import checkpoint_pb2, instance_pb2, instance_pb2_grpc
from durable_sidecar import app
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import Harness, make_settings
from tests.sidecar.helpers import Stubs
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start


@pytest.mark.parametrize("metadata", [
    (),
    (("authorization", "Bearer not-a-real-token"),),
    (("authorization", "Basic dXNlcjpwYXNz"),),
    (("authorization", "Bearer "),),
], ids=["missing", "unknown", "wrong-scheme", "empty"])
async def test_wrong_token_refused(harness: Harness, metadata: tuple[tuple[str, str], ...]) -> None:
    s = harness.alpha
    key = new_key()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
            workflow_id=WF, instance_key=key, execution_id="e"), metadata=metadata)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "token" in (err.value.details() or "")
    # Nothing was created: the real token still sees a brand-new instance.
    assert (await start(s, key)).outcome == instance_pb2.START_OUTCOME_STARTED


async def test_health_and_reflection_need_no_token(harness: Harness) -> None:
    ch = harness.alpha.channel
    reply = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    named = await health_pb2_grpc.HealthStub(ch).Check(
        health_pb2.HealthCheckRequest(service="durable.v1.CheckpointService"))
    assert named.status == health_pb2.HealthCheckResponse.SERVING
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stub = reflection_pb2_grpc.ServerReflectionStub(ch)
    services: list[str] = []
    async for resp in stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])):
        services += [s.name for s in resp.list_services_response.service]
    assert "durable.v1.InstanceService" in services and "durable.v1.CheckpointService" in services


async def test_namespace_a_cannot_read_namespace_b(harness: Harness) -> None:
    alpha, beta = harness.alpha, harness.beta
    key = new_key()
    await start(alpha, key)
    await save(alpha, item(key, "payment", {"secret": "alpha only"}))
    for call in (
        beta.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                   metadata=beta.metadata),
        beta.checkpoints.GetLatestCheckpoint(checkpoint_pb2.GetLatestCheckpointRequest(
            workflow_id=WF, instance_key=key, include_state=True), metadata=beta.metadata),
        beta.checkpoints.GetCheckpoint(checkpoint_pb2.GetCheckpointRequest(
            workflow_id=WF, instance_key=key, sequence=1, include_state=True), metadata=beta.metadata),
        beta.checkpoints.ListCheckpoints(checkpoint_pb2.ListCheckpointsRequest(workflow_id=WF, instance_key=key),
                                         metadata=beta.metadata),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    # Beta cannot write into alpha's instance either, nor list it, complete it or prune it.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await save(beta, item(key, "payment", {"evil": True}))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    listed = await beta.instances.ListInstances(instance_pb2.ListInstancesRequest(), metadata=beta.metadata)
    assert key not in [i.instance_key for i in listed.instances]
    pruned = await beta.checkpoints.PruneCheckpoints(checkpoint_pb2.PruneCheckpointsRequest(keep_last=1),
                                                     metadata=beta.metadata)
    assert pruned.deleted_count == 0
    # The same key in beta is a separate instance.
    assert (await start(beta, key)).outcome == instance_pb2.START_OUTCOME_STARTED
    got = await alpha.checkpoints.GetLatestCheckpoint(checkpoint_pb2.GetLatestCheckpointRequest(
        workflow_id=WF, instance_key=key, include_state=True), metadata=alpha.metadata)
    assert got.checkpoint.state_json == b'{"secret": "alpha only"}'


def _make_cert(tmp: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed to make a test certificate"
    key, cert = tmp / "server.key", tmp / "server.crt"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return key, cert


async def test_tls_serves_trusted_clients_and_refuses_plaintext(database_url: str, tmp_path: Path) -> None:
    key_file, cert_file = _make_cert(tmp_path)
    settings = make_settings(database_url, auth_tokens="tls-token-123=ns-tls", tls_cert_file=str(cert_file),
                             tls_key_file=str(key_file))
    sidecar = await app.start(settings)
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=cert_file.read_bytes())
        async with grpc.aio.secure_channel(f"localhost:{sidecar.port}", creds) as ch:
            s = Stubs(ch, "tls-token-123")
            assert (await start(s, new_key())).outcome == instance_pb2.START_OUTCOME_STARTED
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sidecar.port}") as plain:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await instance_pb2_grpc.InstanceServiceStub(plain).GetInstance(
                    instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key="x"), timeout=3)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await sidecar.stop(grace=0.5)
