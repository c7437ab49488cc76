"""CallService/Call: unary calls carried on one open stream answer exactly as the unary calls do, on both backends.

The contract cases the HTTP/JSON face runs (test_http_json._cases: instances,
checkpoints, idempotency, audit, events) run again with every call carried on a
Call stream (tests/sidecar/stream_client.py), and so do session fencing and the
refusals that belong to the stream itself: an unknown method, bytes that are not
the method's message, a bad token, a deadline, a sidecar that stops.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest
from durable.v1 import call_pb2, instance_pb2
from durable_sidecar import app
from prometheus_client import REGISTRY

from tests.conftest import Harness, make_settings
from tests.sidecar import test_sessions
from tests.sidecar.helpers import channel
from tests.sidecar.stream_client import CallStream, StreamStubs
from tests.sidecar.test_checkpoints import WF, new_key
from tests.sidecar.test_http_json import _cases


@pytest.fixture
async def streamed(database_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """A running sidecar whose alpha/beta stubs carry every call on a Call stream."""
    overrides = getattr(request, "param", {}) or {}
    suffix = uuid.uuid4().hex[:12]
    alpha, beta = f"alpha-{suffix}", f"beta-{suffix}"
    sidecar = await app.start(make_settings(database_url, auth_tokens=f"{alpha}=ns-alpha-{suffix},"
                                                                      f"{beta}=ns-beta-{suffix}", **overrides))
    ch = channel(sidecar.port)
    stubs = (StreamStubs(ch, alpha), StreamStubs(ch, beta))
    try:
        yield Harness(sidecar, *stubs)  # type: ignore[arg-type]
    finally:
        for s in stubs:
            await s.close()
        await ch.close()
        await sidecar.stop(grace=0.5)


@pytest.mark.parametrize("case", _cases())
async def test_contract_case_over_the_call_stream(case: Callable[..., Awaitable[None]], streamed: Harness,
                                                  database_url: str) -> None:
    params = inspect.signature(case).parameters
    await case(**({"harness": streamed} | ({"database_url": database_url} if "database_url" in params else {})))


@pytest.mark.parametrize("streamed", [{"session_grace_seconds": test_sessions.GRACE}], indirect=True)
@pytest.mark.parametrize("case", [test_sessions.test_after_expiry_the_old_process_is_fenced_and_the_resumed_execution_wins,
                                  test_sessions.test_closing_a_session_frees_its_leases_and_keys_at_once,
                                  test_sessions.test_a_call_with_an_unknown_session_is_refused_and_changes_nothing])
async def test_session_fencing_over_the_call_stream(case: Callable[..., Awaitable[None]], streamed: Harness) -> None:
    await case(harness=streamed)


async def _raw(harness: Harness, token: str) -> CallStream:
    return CallStream(channel(harness.sidecar.port), [("authorization", f"Bearer {token}")] if token else [])


async def test_many_calls_in_flight_on_one_stream_each_get_their_own_answer(streamed: Harness) -> None:
    s = streamed.alpha
    keys = [new_key() for _ in range(200)]
    replies = await asyncio.gather(*(s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
        workflow_id=WF, instance_key=key, execution_id=f"e-{key}"), metadata=s.metadata) for key in keys))
    assert [r.instance.instance_key for r in replies] == keys
    assert len(s.streams) == 1  # every call went on the one stream


async def test_what_the_stream_refuses_is_answered_per_call_and_the_stream_goes_on(streamed: Harness) -> None:
    token = streamed.alpha.token
    stream = CallStream(channel(streamed.sidecar.port), [("authorization", f"Bearer {token}")])
    start = instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=new_key(), execution_id="e1")
    unknown = await stream.send(call_pb2.CallRequest(method="/durable.v1.InstanceService/Nope",
                                                     request=start.SerializeToString()))
    assert unknown.code == grpc.StatusCode.UNIMPLEMENTED.value[0] and "Nope" in unknown.message
    streaming = await stream.send(call_pb2.CallRequest(method="/durable.v1.InstanceService/WatchResumable"))
    assert streaming.code == grpc.StatusCode.UNIMPLEMENTED.value[0]
    garbage = await stream.send(call_pb2.CallRequest(method="/durable.v1.InstanceService/StartOrResume",
                                                     request=b"\xff\xff\xff"))
    assert garbage.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "not a valid message for StartOrResume" in garbage.message
    ok = await stream.send(call_pb2.CallRequest(method="/durable.v1.InstanceService/StartOrResume",
                                                request=start.SerializeToString()))
    assert ok.code == 0 and instance_pb2.StartOrResumeResponse.FromString(ok.response).instance.instance_key
    await stream.close()


async def test_the_token_is_checked_per_call_and_a_refused_call_changes_nothing(streamed: Harness) -> None:
    key = new_key()
    start = instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=key, execution_id="e1")
    for metadata in ([("authorization", "Bearer wrong")], []):
        stream = CallStream(channel(streamed.sidecar.port), metadata)
        refused = await stream.send(call_pb2.CallRequest(method="/durable.v1.InstanceService/StartOrResume",
                                                         request=start.SerializeToString()))
        assert refused.code == grpc.StatusCode.UNAUTHENTICATED.value[0]
        await stream.close()
    s = streamed.alpha
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                      metadata=s.metadata)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_call_past_its_deadline_is_answered_deadline_exceeded(streamed: Harness) -> None:
    s = streamed.alpha
    # A WaitForCompletion-like long call is not in the contract, so the deadline is the shortest one: 1 ms.
    stream = await s.stream(s.metadata[0][1])
    answers = await asyncio.gather(*(stream.send(call_pb2.CallRequest(
        method="/durable.v1.InstanceService/ListInstances",
        request=instance_pb2.ListInstancesRequest(workflow_id=WF).SerializeToString(), timeout_ms=1))
        for _ in range(50)))
    codes = {a.code for a in answers}
    assert codes <= {0, grpc.StatusCode.DEADLINE_EXCEEDED.value[0]}
    assert grpc.StatusCode.DEADLINE_EXCEEDED.value[0] in codes
    # The stream goes on.
    reply = await s.instances.ListInstances(instance_pb2.ListInstancesRequest(workflow_id=WF), metadata=s.metadata)
    assert reply is not None


async def test_carried_calls_are_counted_by_their_own_method(streamed: Harness) -> None:
    def count(method: str) -> float:
        return REGISTRY.get_sample_value("durable_rpc_total", {"method": method, "code": "OK"}) or 0.0

    s = streamed.alpha
    before = count("StartOrResume")
    await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
        workflow_id=WF, instance_key=new_key(), execution_id="e1"), metadata=s.metadata)
    assert count("StartOrResume") == before + 1
    assert (REGISTRY.get_sample_value("durable_call_streams") or 0) >= 1


async def test_a_stopping_sidecar_answers_unavailable_and_ends_the_stream(database_url: str) -> None:
    token = f"t-{uuid.uuid4().hex[:8]}"
    sidecar = await app.start(make_settings(database_url, auth_tokens=f"{token}=ns-{token}"))
    ch = channel(sidecar.port)
    stream = CallStream(ch, [("authorization", f"Bearer {token}")])
    start = instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=new_key(), execution_id="e1")
    first = await stream.send(call_pb2.CallRequest(method="/durable.v1.InstanceService/StartOrResume",
                                                   request=start.SerializeToString()))
    assert first.code == 0
    stopping = asyncio.create_task(sidecar.stop(grace=5))
    # The stream ends (OK, not cut at the grace's end) and a call sent meanwhile gets UNAVAILABLE or no answer.
    await asyncio.wait_for(stream.reader, 5)
    assert await stream.call.code() == grpc.StatusCode.OK
    await stopping
    await ch.close()


@pytest.mark.parametrize(("token", "code"), [("", grpc.StatusCode.UNAUTHENTICATED),
                                             ("alpha", grpc.StatusCode.INVALID_ARGUMENT)])
async def test_a_message_that_is_not_a_call_request_ends_the_stream_with_a_clear_error(
        streamed: Harness, token: str, code: grpc.StatusCode) -> None:
    metadata = (("authorization", f"Bearer {streamed.alpha.token}"),) if token else ()
    ch = channel(streamed.sidecar.port)
    stream = ch.stream_stream("/durable.v1.CallService/Call", request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)(iter([b"\x0a\xff"]), metadata=metadata)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stream:
            pass
    assert err.value.code() == code, err.value.details()
    await ch.close()
