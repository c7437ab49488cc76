"""Fuzz every request message of every RPC through a real sidecar process.

Requests are generated from the protobuf descriptors themselves, so a field
added to the contract is fuzzed without touching this file. The process must
never crash, every error must be a documented status code, and no partial
state may be left behind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from durable.v1 import checkpoint_pb2, idempotency_pb2, instance_pb2, version_pb2
from google.protobuf import descriptor, message_factory
from google.protobuf.descriptor import FieldDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.faults.infra import check_invariants
from tests.faults.report import TALLY
from tests.sidecar.helpers import MAX_MESSAGE, SidecarProcess

TOKEN = "fuzz-token-123"
DOCUMENTED = {
    grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED, grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNAVAILABLE,
}
SERVICES = [
    instance_pb2.DESCRIPTOR.services_by_name["InstanceService"],
    checkpoint_pb2.DESCRIPTOR.services_by_name["CheckpointService"],
    idempotency_pb2.DESCRIPTOR.services_by_name["IdempotencyService"],
    version_pb2.DESCRIPTOR.services_by_name["VersionService"],
]
# A few real identifiers so generated requests also hit existing rows.
KNOWN_IDS = ["wf-fuzz", "order-1", "order-2", "payment", "exec-1", "scope-a", "key-1"]


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=40))
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                        max_leaves=20)


def _bytes_field() -> st.SearchStrategy[bytes]:
    return _mostly(_json_values().map(lambda v: json.dumps(v).encode()), st.one_of(
        st.binary(max_size=300),  # mostly not JSON, often not UTF-8
        st.integers(min_value=1, max_value=200_000).map(lambda n: b"[" * n + b"]" * n),  # deep nesting
        st.sampled_from([b"", b"{}", b"null", b'"\\ud800"', b"\xff\xfe\x00", b'{"a":' + b"1" * 5000 + b"}"]),
        st.integers(min_value=0, max_value=3).map(lambda n: b'{"big": "' + b"x" * (n * 400_000) + b'"}'),
    ))


def _mostly(valid: st.SearchStrategy[Any], weird: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Valid values four times in five, so generated requests get past validation into the deeper code."""
    return st.integers(0, 4).flatmap(lambda n: weird if n == 0 else valid)


def _string_field() -> st.SearchStrategy[str]:
    return _mostly(st.sampled_from(KNOWN_IDS),
                   st.one_of(st.text(max_size=300), st.just(""), st.just("k" * 256),
                             st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=31), max_size=5)))


_INT = {
    FieldDescriptor.TYPE_INT32: _mostly(st.integers(0, 100), st.one_of(st.integers(-(2**31), 2**31 - 1),
                                                                       st.sampled_from([-1, 86_400, 86_401]))),
    FieldDescriptor.TYPE_INT64: _mostly(st.integers(0, 100), st.one_of(st.integers(-(2**63), 2**63 - 1),
                                                                       st.sampled_from([-1, 31_622_401]))),
}


def _field_value(field: descriptor.FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message_strategy(field.message_type, depth + 1)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-5, 50))
    if field.type == FieldDescriptor.TYPE_BYTES:
        return _bytes_field()
    if field.type == FieldDescriptor.TYPE_STRING:
        return _string_field()
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type in _INT:
        return _INT[field.type]
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=False, allow_infinity=False, width=32)
    return st.integers(0, 2**31 - 1)


def message_strategy(desc: descriptor.Descriptor, depth: int = 0) -> st.SearchStrategy[Any]:
    cls = message_factory.GetMessageClass(desc)
    if desc.full_name == "google.protobuf.Timestamp":
        return st.builds(lambda s, n: cls(seconds=s, nanos=n), st.integers(-62135596800, 253402300799),
                         st.integers(0, 999_999_999))
    if depth > 2:
        return st.just(cls())
    parts = {}
    for field in desc.fields:
        value = _field_value(field, depth)
        if field.is_repeated:
            parts[field.name] = st.lists(value, max_size=4 if field.type != FieldDescriptor.TYPE_MESSAGE else 3)
        else:
            parts[field.name] = st.one_of(st.none(), value)

    def build(**values: Any) -> Any:
        msg = cls()
        for name, value in values.items():
            if value is None:
                continue
            field = desc.fields_by_name[name]
            if field.is_repeated:
                target = getattr(msg, name)
                for v in value:
                    if field.type == FieldDescriptor.TYPE_MESSAGE:
                        target.add().CopyFrom(v)
                    else:
                        target.append(v)
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                getattr(msg, name).CopyFrom(value)
            else:
                setattr(msg, name, value)
        return msg

    return st.fixed_dictionaries(parts).map(lambda d: build(**d))


@pytest.fixture(scope="module")
def fuzz_target(database_url: str) -> Iterator[tuple[SidecarProcess, grpc.Channel]]:
    proc = SidecarProcess({"DURABLE_DATABASE_URL": database_url, "DURABLE_REDIS_URL": "redis://127.0.0.1:6379/0",
                           "DURABLE_AUTH_TOKENS": f"{TOKEN}=ns-fuzz", "DURABLE_AUTO_MIGRATE": "false",
                           "DURABLE_MAX_STATE_BYTES": "1048576", "DURABLE_MAX_MESSAGE_BYTES": "4194304",
                           "DURABLE_LOG_LEVEL": "ERROR"})
    proc.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{proc.port}", options=[("grpc.max_send_message_length", MAX_MESSAGE),
                                                                  ("grpc.max_receive_message_length", MAX_MESSAGE)])
    yield proc, ch
    ch.close()
    proc.stop()


def _call(ch: grpc.Channel, service: descriptor.ServiceDescriptor, method: descriptor.MethodDescriptor,
          request: Any, timeout: float = 10.0) -> grpc.StatusCode:
    path = f"/{service.full_name}/{method.name}"
    response_cls = message_factory.GetMessageClass(method.output_type)
    try:
        if method.server_streaming:
            stream = ch.unary_stream(path, request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=response_cls.FromString)(
                request, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=timeout)
            next(iter(stream))
            stream.cancel()
            return grpc.StatusCode.OK
        ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                       response_deserializer=response_cls.FromString)(
            request, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=timeout)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()  # type: ignore[attr-defined]
        if code not in DOCUMENTED:
            raise AssertionError(f"{path} answered {code.name}: {exc.details()}") from None  # type: ignore[attr-defined]
        return code


METHODS = [(svc, m) for svc in SERVICES for m in svc.methods]


@pytest.mark.parametrize("svc_method", METHODS, ids=[f"{s.name}.{m.name}" for s, m in METHODS])
def test_fuzzed_requests_get_documented_codes_and_never_crash(
        fuzz_target: tuple[SidecarProcess, grpc.Channel], database_url: str,
        svc_method: tuple[descriptor.ServiceDescriptor, descriptor.MethodDescriptor]) -> None:
    proc, ch = fuzz_target
    service, method = svc_method
    seen: dict[str, int] = {}

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(message_strategy(method.input_type))
    def run(request: Any) -> None:
        code = _call(ch, service, method, request, timeout=5.0 if method.server_streaming else 10.0)
        seen[code.name] = seen.get(code.name, 0) + 1
        assert proc.proc is not None and proc.proc.poll() is None, "the sidecar process died"

    run()
    reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert check_invariants(database_url) == []
    TALLY.add(f"fuzz {service.name}.{method.name}", faults=sum(seen.values()), operations=sum(seen.values()),
              note=" ".join(f"{k}={v}" for k, v in sorted(seen.items())))


def test_zero_deadlines_and_cancellation_leave_no_partial_state(
        fuzz_target: tuple[SidecarProcess, grpc.Channel], database_url: str) -> None:
    proc, ch = fuzz_target
    md = (("authorization", f"Bearer {TOKEN}"),)
    inst = instance_pb2.StartOrResumeRequest(workflow_id="wf-cancel", instance_key="order-c", execution_id="exec-1")
    ch.unary_unary("/durable.v1.InstanceService/StartOrResume", request_serializer=lambda m: m.SerializeToString(),
                   response_deserializer=instance_pb2.StartOrResumeResponse.FromString)(inst, metadata=md, timeout=10)
    save = ch.unary_unary("/durable.v1.CheckpointService/SaveCheckpoints",
                          request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=checkpoint_pb2.SaveCheckpointsResponse.FromString)
    calls = 0
    for i in range(60):
        req = checkpoint_pb2.SaveCheckpointsRequest(items=[checkpoint_pb2.SaveCheckpointItem(
            workflow_id="wf-cancel", instance_key="order-c", step_name=f"s{i}", state_json=b'{"x": %d}' % i,
            execution_id="exec-1")] * 1)
        calls += 1
        if i % 2:
            future = save.future(req, metadata=md, timeout=5)
            future.cancel()
        else:
            try:
                save(req, metadata=md, timeout=0.0005)
            except grpc.RpcError as exc:
                assert exc.code() in DOCUMENTED  # type: ignore[attr-defined]
    assert proc.proc is not None and proc.proc.poll() is None
    reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert check_invariants(database_url) == []
    TALLY.add("zero deadlines and cancellations", faults=calls, operations=calls)
