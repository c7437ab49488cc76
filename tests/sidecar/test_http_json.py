"""The contract over HTTP/JSON (the Connect protocol's unary JSON form): the same cases over both encodings.

`client` is parametrized: a harness whose alpha/beta are gRPC stubs, or HTTP/JSON
clients with the same call shape (tests/sidecar/http_client.py). The contract
cases of test_instances, test_checkpoints and test_idempotency that take only
`harness` (and `database_url`) run through it unchanged.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from durable.v1 import (
    audit_pb2,
    checkpoint_pb2,
    events_pb2,
    idempotency_pb2,
    instance_pb2,
    limits_pb2,
    session_pb2,
    version_pb2,
)
from durable_sidecar import app, telemetry
from durable_sidecar.settings import SettingsError
from google.protobuf import json_format
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conftest import Harness, make_settings
from tests.sidecar import test_audit, test_checkpoints, test_events, test_idempotency, test_instances, test_limits
from tests.sidecar.helpers import Stubs, channel
from tests.sidecar.http_client import HttpStubs
from tests.sidecar.test_security import _make_cert

# Not repeated over HTTP/JSON, with the reason.
_GRPC_ONLY = {
    "test_watch_resumable_streams_claims_and_heartbeats": "server streaming stays gRPC-only",
    "test_signals_and_redrives_wake_the_resume_trigger_stream_at_once": "server streaming stays gRPC-only",
    "test_the_resume_trigger_stream_claims_a_wake_up_at_its_time_not_at_its_next_poll": "server streaming stays gRPC-only",
    "test_side_effect_runs_once_over_1000_deliveries_including_while_in_flight": "load, not encoding (gRPC run only)",
    "test_concurrent_batches_over_the_same_instances_neither_deadlock_nor_skip": "load, not encoding (gRPC run only)",
    "test_cli_keys_show_list_and_forced_release": "the CLI, not an encoding",
    "test_cli_retries_resumes_and_cancels_with_actor_and_reason": "the CLI, not an encoding",
    "test_gauges_count_waiting_and_suspended_instances_and_due_timeouts": "the gauge query, not an encoding",
    "test_10mb_state_round_trip": "size limits are the boundary's, tested on gRPC; 10 MB as base64 JSON is slow here",
    "test_racing_callers_never_exceed_the_places": "load, not encoding (gRPC run only)",
    "test_a_burst_ends_at_its_maximum_wait_however_busy": "timing of bursts, not encoding (gRPC run only)",
    "test_limit_metrics_count_answers_and_show_waiters_per_limit": "the metrics, not an encoding",
}


def _cases() -> list[Any]:
    out = []
    for module in (test_instances, test_checkpoints, test_idempotency, test_audit, test_events, test_limits):
        for name, fn in vars(module).items():
            if not name.startswith("test_") or not inspect.iscoroutinefunction(fn) or name in _GRPC_ONLY:
                continue
            if getattr(fn, "pytestmark", None):
                continue  # parametrized harnesses and marks: run by their own module
            if set(inspect.signature(fn).parameters) <= {"harness", "database_url"} and \
                    "harness" in inspect.signature(fn).parameters:
                out.append(pytest.param(fn, id=f"{module.__name__.rsplit('.', 1)[-1]}::{name}"))
    return out


@pytest.fixture(params=["grpc", "http"])
async def client(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[Harness]:
    """A running sidecar with both faces; its alpha/beta stubs speak the encoding of the parameter."""
    suffix = uuid.uuid4().hex[:12]
    alpha, beta = f"alpha-{suffix}", f"beta-{suffix}"
    settings = make_settings(database_url, auth_tokens=f"{alpha}=ns-alpha-{suffix},{beta}=ns-beta-{suffix}",
                             http_listen_address="127.0.0.1:0")
    sidecar = await app.start(settings)
    assert sidecar.http_server is not None
    try:
        if request.param == "grpc":
            ch = channel(sidecar.port)
            try:
                yield Harness(sidecar, Stubs(ch, alpha), Stubs(ch, beta))  # type: ignore[arg-type]
            finally:
                await ch.close()
        else:
            base = f"http://127.0.0.1:{sidecar.http_server.port}"
            async with aiohttp.ClientSession() as session:
                yield Harness(sidecar, HttpStubs(session, base, alpha), HttpStubs(session, base, beta))  # type: ignore[arg-type]
    finally:
        await sidecar.stop(grace=0.5)


@pytest.mark.parametrize("case", _cases())
async def test_contract_case_over_both_encodings(case: Callable[..., Awaitable[None]], client: Harness,
                                                 database_url: str) -> None:
    params = inspect.signature(case).parameters
    await case(**({"harness": client} | ({"database_url": database_url} if "database_url" in params else {})))


def test_the_shared_cases_cover_the_three_services() -> None:
    ids = [p.id for p in _cases()]
    for module in ("test_instances", "test_checkpoints", "test_idempotency"):
        assert sum(i.startswith(module + "::") for i in ids) >= 3, module


# --- what only HTTP has: the Connect wire format, status codes, routing ----------------------------


@pytest.fixture
async def http(database_url: str) -> AsyncIterator[tuple[str, str, app.Sidecar]]:
    settings = make_settings(database_url, auth_tokens="http-token-123=ns-http", http_listen_address="127.0.0.1:0")
    sidecar = await app.start(settings)
    assert sidecar.http_server is not None
    try:
        yield f"http://127.0.0.1:{sidecar.http_server.port}", "http-token-123", sidecar
    finally:
        await sidecar.stop(grace=0.5)


async def _post(url: str, body: Any, *, token: str = "", content_type: str = "application/json",
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
    sent = {"Content-Type": content_type, **(headers or {})}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with aiohttp.ClientSession() as session, session.post(url, data=data, headers=sent) as reply:
        return reply.status, await reply.json(content_type=None)


async def test_connect_unary_json_round_trip_and_errors(http: tuple[str, str, app.Sidecar]) -> None:
    base, token, _ = http
    key = f"order-{uuid.uuid4().hex[:8]}"
    start = f"{base}/durable.v1.InstanceService/StartOrResume"
    status, body = await _post(start, {"workflowId": "wf-http", "instanceKey": key, "executionId": "e1"}, token=token)
    assert status == 200 and body["outcome"] == "START_OUTCOME_STARTED" and body["instance"]["instanceKey"] == key
    # proto field names are accepted too; bytes are base64 (protobuf's JSON mapping).
    state = json.dumps({"paid": True}).encode()
    status, body = await _post(f"{base}/durable.v1.CheckpointService/SaveCheckpoints", {"items": [{
        "workflow_id": "wf-http", "instance_key": key, "step_name": "pay", "execution_id": "e1",
        "node_name": "n", "state_json": base64.b64encode(state).decode()}]}, token=token)
    assert status == 200 and body["results"][0]["checkpoint"]["sequence"] == "1"

    get = f"{base}/durable.v1.InstanceService/GetInstance"
    status, body = await _post(get, {"workflowId": "wf-http", "instanceKey": "nope"}, token=token)
    assert status == 404 and set(body) == {"code", "message"} and body["code"] == "not_found" and body["message"]
    status, body = await _post(get, {"workflowId": "wf-http", "instanceKey": key})
    assert (status, body["code"]) == (401, "unauthenticated")
    status, body = await _post(get, {"workflowId": "wf-http", "instanceKey": key}, token="wrong-token-1")
    assert (status, body["code"]) == (401, "unauthenticated")
    # Malformed JSON and unknown fields: invalid_argument, after authentication.
    assert (await _post(get, b"{not json", token=token))[0] == 400
    assert (await _post(get, b"{not json"))[0] == 401
    status, body = await _post(get, {"workflowId": "wf-http", "bogus": 1}, token=token)
    assert (status, body["code"]) == (400, "invalid_argument")
    status, body = await _post(get, {"workflowId": "", "instanceKey": ""}, token=token)
    assert (status, body["code"]) == (400, "invalid_argument")
    # Routing: the unary methods of durable.v1; a streaming one or an unknown name is 404 unimplemented (what a
    # Connect client reports as unimplemented), naming what was asked for.
    status, body = await _post(f"{base}/durable.v1.InstanceService/WatchResumable", {}, token=token)
    assert (status, body["code"]) == (404, "unimplemented") and "streaming method" in body["message"]
    status, body = await _post(f"{base}/durable.v1.InstanceService/Nope", {}, token=token)
    assert (status, body["code"]) == (404, "unimplemented") and "Nope" in body["message"]
    assert "WatchResumable" not in body["message"]
    assert (await _post(get, {}, token=token, content_type="text/plain"))[0] == 415
    # A write is never served by GET (405, Allow: POST).
    async with aiohttp.ClientSession() as session, session.get(start) as reply:
        assert reply.status == 405 and reply.headers["Allow"] == "POST"


async def test_connect_binary_protobuf_get_for_reads_and_the_call_timeout(http: tuple[str, str, app.Sidecar]) -> None:
    """The rest of Connect's unary protocol: the binary codec both ways, the GET form of the methods the proto
    marks free of side effects (JSON or binary, base64url or plain), and Connect-Timeout-Ms, which the sidecar
    itself enforces (a call waiting longer ends with deadline_exceeded)."""
    base, token, _ = http
    key = f"order-{uuid.uuid4().hex[:8]}"
    auth = {"Authorization": f"Bearer {token}"}
    start = f"{base}/durable.v1.InstanceService/StartOrResume"
    request = instance_pb2.StartOrResumeRequest(workflow_id="wf-http", instance_key=key, execution_id="e1")
    async with aiohttp.ClientSession() as session:
        async with session.post(start, data=request.SerializeToString(),
                                headers={**auth, "Content-Type": "application/proto"}) as reply:
            assert reply.status == 200 and reply.content_type == "application/proto"
            started = instance_pb2.StartOrResumeResponse.FromString(await reply.read())
        assert started.outcome == instance_pb2.START_OUTCOME_STARTED and started.instance.instance_key == key
        # An undecodable binary body is invalid_argument (JSON error body), after authentication.
        async with session.post(start, data=b"\xff\xff\xff", headers={**auth, "Content-Type": "application/proto"}) as reply:
            assert reply.status == 400 and (await reply.json())["code"] == "invalid_argument"

        get = f"{base}/durable.v1.InstanceService/GetInstance"
        wanted = instance_pb2.GetInstanceRequest(workflow_id="wf-http", instance_key=key)
        as_json = json.dumps({"workflowId": "wf-http", "instanceKey": key})
        as_b64 = base64.urlsafe_b64encode(wanted.SerializeToString()).decode().rstrip("=")
        for query, binary in (({"encoding": "json", "message": as_json}, False),
                              ({"encoding": "proto", "message": as_b64, "base64": "1"}, True),
                              ({"encoding": "json", "message": base64.urlsafe_b64encode(as_json.encode()).decode(),
                                "base64": "1", "connect": "v1"}, False)):
            async with session.get(get, params=query, headers=auth) as reply:
                assert reply.status == 200, await reply.text()
                got = (instance_pb2.GetInstanceResponse.FromString(await reply.read()) if binary else
                       json_format.Parse(await reply.read(), instance_pb2.GetInstanceResponse()))
                assert got.instance.instance_key == key
        async with session.get(get, params={"encoding": "xml", "message": as_json}, headers=auth) as reply:
            assert reply.status == 415
        async with session.get(get, params={"encoding": "json", "message": as_json}) as reply:
            assert reply.status == 401  # GET needs the token as much as POST
        async with session.put(get, data=as_json, headers={**auth, "Content-Type": "application/json"}) as reply:
            assert reply.status == 405 and reply.headers["Allow"] == "POST, GET"

        # Connect-Timeout-Ms: a place held, a second caller that would wait 30 s in its call is ended by the sidecar.
        limits = f"{base}/durable.v1.LimitService/AcquireSlot"
        place = {"workflowId": "wf-http", "limitName": "http-timeout", "limitKey": "one", "maxHolders": 1}
        other = f"{key}-other"
        assert (await _post(start, {"workflowId": "wf-http", "instanceKey": other, "executionId": "e2"},
                            token=token))[0] == 200
        assert (await _post(limits, {**place, "instanceKey": key, "executionId": "e1"}, token=token))[0] == 200
        loop = asyncio.get_running_loop()
        began = loop.time()
        status, body = await _post(limits, {**place, "instanceKey": other, "executionId": "e2", "maxWaitMs": 30000},
                                   token=token, headers={"Connect-Timeout-Ms": "600"})
        assert (status, body["code"]) == (504, "deadline_exceeded") and "600 ms" in body["message"]
        assert loop.time() - began < 10
        status, body = await _post(get, {"workflowId": "wf-http", "instanceKey": key}, token=token,
                                   headers={"Connect-Timeout-Ms": "soon"})
        assert (status, body["code"]) == (400, "invalid_argument")
        status, body = await _post(get, {"workflowId": "wf-http", "instanceKey": key}, token=token,
                                   headers={"Connect-Timeout-Ms": "5000"})
        assert status == 200 and body["instance"]["instanceKey"] == key


def test_the_reads_are_marked_free_of_side_effects_in_the_proto() -> None:
    """Every Get/List/Count method (and nothing that writes) carries idempotency_level = NO_SIDE_EFFECTS, so
    Connect clients may send it by GET."""
    from durable_sidecar.transport.auth import ROLES, Role
    from google.protobuf import descriptor_pb2

    for module in (instance_pb2, checkpoint_pb2, idempotency_pb2, version_pb2, events_pb2, session_pb2,
                   limits_pb2, audit_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                marked = method.GetOptions().idempotency_level == descriptor_pb2.MethodOptions.NO_SIDE_EFFECTS
                read = ROLES[method.name] is Role.READ and not method.server_streaming
                assert marked == read, (method.full_name, marked, read)


async def test_http_calls_are_traced_with_the_callers_parent(http: tuple[str, str, app.Sidecar]) -> None:
    base, token, _ = http
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.enable(provider)
    try:
        trace_id = uuid.uuid4().hex
        status, _ = await _post(f"{base}/durable.v1.InstanceService/StartOrResume",
                                {"workflowId": "wf-http", "instanceKey": "traced", "executionId": "e"}, token=token,
                                headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
        assert status == 200
        (span,) = exporter.get_finished_spans()
        assert f"{span.context.trace_id:032x}" == trace_id and span.attributes is not None
        assert span.attributes["durable.namespace"] == "ns-http" and span.attributes["durable.instance_key"] == "traced"
    finally:
        telemetry.disable()
        provider.shutdown()


async def test_http_face_is_off_by_default_and_its_address_is_validated(database_url: str) -> None:
    assert make_settings(database_url, auth_disabled=True).http_listen_address == ""
    with pytest.raises(SettingsError, match="DURABLE_HTTP_LISTEN_ADDRESS"):
        make_settings(database_url, auth_disabled=True, http_listen_address="not-an-address")
    with pytest.raises(SettingsError, match="DURABLE_HTTP_LISTEN_ADDRESS"):
        make_settings(database_url, auth_disabled=True, listen_address="127.0.0.1:7000",
                      http_listen_address="127.0.0.1:7000")


async def test_http_face_serves_tls_with_the_grpc_certificate(database_url: str, tmp_path: Path) -> None:
    key_file, cert_file = _make_cert(tmp_path)
    settings = make_settings(database_url, auth_tokens="tls-token-123=ns-tls", tls_cert_file=str(cert_file),
                             tls_key_file=str(key_file), http_listen_address="127.0.0.1:0")
    sidecar = await app.start(settings)
    try:
        assert sidecar.http_server is not None
        port = sidecar.http_server.port
        trusted = ssl.create_default_context(cafile=str(cert_file))
        async with aiohttp.ClientSession() as session:
            async with session.post(f"https://localhost:{port}/durable.v1.InstanceService/StartOrResume",
                                    json={"workflowId": "wf-tls", "instanceKey": "k1", "executionId": "e"},
                                    headers={"Authorization": "Bearer tls-token-123"}, ssl=trusted) as reply:
                assert reply.status == 200
                assert (await reply.json())["outcome"] == instance_pb2.StartOutcome.Name(
                    instance_pb2.START_OUTCOME_STARTED)
            with pytest.raises(aiohttp.ClientError):
                async with session.post(f"http://127.0.0.1:{port}/durable.v1.InstanceService/GetInstance",
                                        json={}, timeout=aiohttp.ClientTimeout(total=5)) as plain:
                    await plain.read()
    finally:
        await sidecar.stop(grace=0.5)

