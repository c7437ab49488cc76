"""Property-based tests over the whole contract, against a real sidecar process on both backends.

Hypothesis builds requests for every RPC from the proto descriptors (a field
added to the contract is generated without touching this file), mixing
values that pass the boundary with adversarial ones: JSON in UTF-16/32, with
encoded or escaped lone surrogates, a BOM, NaN, 5,000-digit integers, 1e400,
deep nesting or above the size limit; text with NUL, C0, DEL and C1
controls; integers at and past every edge; Timestamps outside their range;
unknown enum values; crafted page tokens; labels that are not semantic
versions. The properties, for every generated request:

- the answer is never INTERNAL or UNKNOWN (nor any code the contract does not name);
- a refused request changed nothing: a checksum of the namespace's durable_*
  rows, read back after every request, only moves on an OK answer.

A second property sends bytes that may not be a message at all (random, or a
real request with a byte changed or cut, e.g. a string that is not UTF-8):
the same two properties hold.

The budget is fixed (DURABLE_PROPERTY_EXAMPLES per RPC and backend, 40 by
default, derandomised so CI runs the same examples every time; set
DURABLE_PROPERTY_RANDOM=1 to explore with fresh seeds).
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
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
from google.protobuf import descriptor, message_factory
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.faults.infra import check_invariants
from tests.faults.report import TALLY
from tests.sidecar.helpers import MAX_MESSAGE, SidecarProcess
from tests.sidecar.snapshot import Snapshotter

TOKEN = "property-token-1"
NAMESPACE = "ns-property"
MAX_STATE_BYTES = 65_536
MAX_BATCH_ITEMS = 5
EXAMPLES = int(os.environ.get("DURABLE_PROPERTY_EXAMPLES", "40"))
RANDOM = os.environ.get("DURABLE_PROPERTY_RANDOM", "") == "1"

# Every code a caller may see; INTERNAL and UNKNOWN are not among them.
DOCUMENTED = {
    grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED, grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNAVAILABLE,
}
# Refusals the server decided: the request must have changed nothing. (A deadline or
# an UNAVAILABLE may come after a commit the caller did not hear of; those may have.)
REFUSED = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED, grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNIMPLEMENTED,
}
SERVICES = [
    instance_pb2.DESCRIPTOR.services_by_name["InstanceService"],
    checkpoint_pb2.DESCRIPTOR.services_by_name["CheckpointService"],
    idempotency_pb2.DESCRIPTOR.services_by_name["IdempotencyService"],
    version_pb2.DESCRIPTOR.services_by_name["VersionService"],
    events_pb2.DESCRIPTOR.services_by_name["EventService"],
    events_pb2.DESCRIPTOR.services_by_name["RecoveryService"],
    session_pb2.DESCRIPTOR.services_by_name["SessionService"],
    limits_pb2.DESCRIPTOR.services_by_name["LimitService"],
]
METHODS = [(svc, m) for svc in SERVICES for m in svc.methods]
# A few real identifiers, so generated requests also reach existing rows.
KNOWN_IDS = ["wf-prop", "order-1", "order-2", "payment", "exec-1", "key-1", "Pay"]


def _mostly(valid: st.SearchStrategy[Any], adversarial: st.SearchStrategy[Any], hostile: bool) -> st.SearchStrategy[Any]:
    """In a hostile request, valid values two times in three; a clean request has valid values only."""
    if not hostile:
        return valid
    return st.integers(0, 2).flatmap(lambda n: adversarial if n == 0 else valid)


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**60), 2**60), st.floats(allow_nan=False,
                        allow_infinity=False), st.text(max_size=20))
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=10)


def _definitions() -> st.SearchStrategy[bytes]:
    node = st.fixed_dictionaries({"name": st.sampled_from([*KNOWN_IDS, "Step\x00", "Step\u0085", "A" * 300]),
                                  "type": st.sampled_from(["n8n-nodes-base.set", "", "n8n-nodes-base.stickyNote"]),
                                  "parameters": _json_values()})
    return st.builds(lambda nodes: json.dumps({"nodes": nodes, "connections": {}}).encode(), st.lists(node, max_size=3))


BAD_JSON = [
    b"", b"{}", b"null", b"[]", b"NaN", b"[Infinity]", b"{", b"\xef\xbb\xbf{}", b'"\\ud800"', b'{"\\udc00": 1}',
    b'{"s": "\xed\xa0\x80"}', '{"a": 1}'.encode("utf-16"), '{"a": 1}'.encode("utf-16-le"), '[1]'.encode("utf-32"),
    b"[" + b"7" * 5000 + b"]", b"[1e400]", b"[-1e309]", b"\x00", b'{"a": "\x00"}', b'"\\u0000"',
]


def _json_field(name: str, hostile: bool) -> st.SearchStrategy[bytes]:
    valid = _definitions() if name == "definition_json" else _json_values().map(lambda v: json.dumps(v).encode())
    return _mostly(valid, st.one_of(
        st.sampled_from(BAD_JSON),
        st.binary(max_size=64),
        st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
        st.just(b'"' + b"x" * (MAX_STATE_BYTES + 1) + b'"'),
    ), hostile)


def _token(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


CRAFTED_TOKENS = [_token([True]), _token([1, 2, 3]), _token(["2020-01-01", True, None]), _token([10**30]), "p1.",
                  "p1.W10.AAAA", "not base64!", "\x00", "=" * 3000, _token({"a": 1})]
CONTROL_TEXT = st.text(alphabet=st.sampled_from(["\x00", "\x01", "\x1f", "\x7f", "\x80", "\x85", "\x9f", "a", "\n"]),
                       min_size=1, max_size=6)


def _string_field(name: str, hostile: bool) -> st.SearchStrategy[str]:
    if name == "page_token":
        return _mostly(st.just(""), st.one_of(st.sampled_from(CRAFTED_TOKENS), st.text(max_size=40)), hostile)
    if name in ("version_label", "label"):
        return _mostly(st.sampled_from(["", "1.0.0", "2.0.0-rc.1", "0.1.2+build.5"]),
                       st.sampled_from(["banana", "1.0", "v1.2.3", "1.2.3\x00", "01.2.3"]), hostile)
    if name == "fingerprint":
        return _mostly(st.sampled_from(["", "ab" * 32]), st.one_of(st.text(max_size=70), st.just("AB" * 32)), hostile)
    valid = st.sampled_from(KNOWN_IDS) if not hostile else st.sampled_from([*KNOWN_IDS, ""])
    return _mostly(valid, st.one_of(CONTROL_TEXT, st.text(max_size=40), st.just("k" * 256), st.just("x" * 5000),
                                    st.just("ok\u2028\ufeff😀")), hostile)


EDGE_INTS = [-1, -(2**31), 2**31 - 1, 2**53, 2**62, 2**63 - 1, -(2**63), 86_400, 86_401, 31_622_401, 600_001]
_INT_BOUNDS = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
}


def _int_field(field: descriptor.FieldDescriptor, hostile: bool) -> st.SearchStrategy[int]:
    low, high = _INT_BOUNDS.get(field.type, (0, 2**31 - 1))
    edges = [v for v in EDGE_INTS if low <= v <= high]
    # Clean: 0 (the default), small counts and sequences, and lengths of time most fields accept.
    clean = st.sampled_from([0, 0, 1, 2, 3, 60, 300, 3600])
    return _mostly(clean, st.one_of(st.sampled_from(edges), st.integers(low, high)), hostile)


def _timestamp(cls: Any, hostile: bool) -> st.SearchStrategy[Any]:
    valid = st.integers(0, 4_102_444_800)  # 1970 to 2100
    invalid = st.sampled_from([-62_135_596_801, 253_402_300_800, 2**62, -(2**62)])
    return st.builds(lambda s, n: cls(seconds=s, nanos=n), _mostly(valid, invalid, hostile),
                     _mostly(st.just(0), st.sampled_from([-1, 1_000_000_000, 999_999_999]), hostile))


def _field_value(field: descriptor.FieldDescriptor, depth: int, hostile: bool) -> st.SearchStrategy[Any]:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return _message(field.message_type, depth + 1, hostile)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return _mostly(st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-5, 50), hostile)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return _json_field(field.name, hostile)
    if field.type == FieldDescriptor.TYPE_STRING:
        return _string_field(field.name, hostile)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _mostly(st.sampled_from([0.0, 0.5, 1.0, 2.0, 10.0]),
                       st.one_of(st.floats(), st.sampled_from([-1.0, 11.0, 1e308, float("nan"), float("inf")])),
                       hostile)
    return _int_field(field, hostile)


def message_strategy(desc: descriptor.Descriptor) -> st.SearchStrategy[Any]:
    """Requests of one type: half clean (every value passes the boundary), half hostile."""
    return st.one_of(_message(desc, 0, False), _message(desc, 0, True))


def _message(desc: descriptor.Descriptor, depth: int, hostile: bool) -> st.SearchStrategy[Any]:
    cls = message_factory.GetMessageClass(desc)
    if desc.full_name == "google.protobuf.Timestamp":
        return _timestamp(cls, hostile)
    if depth > 2:
        return st.just(cls())
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for field in desc.fields:
        value = _field_value(field, depth, hostile)
        if field.is_repeated:
            longest = MAX_BATCH_ITEMS + 1 if hostile else 3
            parts[field.name] = st.lists(value, max_size=longest if field.type != FieldDescriptor.TYPE_MESSAGE else 3)
        elif hostile or field.has_presence:
            parts[field.name] = st.one_of(st.none(), value)  # unset, or set (optional fields and oneofs too)
        else:
            parts[field.name] = value

    def build(values: dict[str, Any]) -> Any:
        msg = cls()
        for name, value in values.items():
            if value is None:
                continue
            field = desc.fields_by_name[name]
            if field.containing_oneof is not None and msg.WhichOneof(field.containing_oneof.name):
                continue  # one member of a oneof at a time
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

    return st.fixed_dictionaries(parts).map(build)


@pytest.fixture(scope="module")
def target(database_url: str) -> Iterator[tuple[SidecarProcess, grpc.Channel, Snapshotter]]:
    proc = SidecarProcess({"DURABLE_DATABASE_URL": database_url,
                           "DURABLE_REDIS_URL": "" if database_url.startswith("sqlite") else "redis://127.0.0.1:6379/0",
                           "DURABLE_AUTH_TOKENS": f"{TOKEN}={NAMESPACE}", "DURABLE_AUTO_MIGRATE": "false",
                           "DURABLE_MAX_STATE_BYTES": str(MAX_STATE_BYTES),
                           "DURABLE_MAX_MESSAGE_BYTES": str(MAX_STATE_BYTES + 2 * 1_048_576),
                           "DURABLE_MAX_BATCH_ITEMS": str(MAX_BATCH_ITEMS),
                           # Nothing may change the rows between two requests but the requests themselves.
                           "DURABLE_REAPER_INTERVAL_SECONDS": "86400",
                           "DURABLE_LOG_LEVEL": "ERROR"})
    proc.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{proc.port}", options=[("grpc.max_send_message_length", MAX_MESSAGE),
                                                                  ("grpc.max_receive_message_length", MAX_MESSAGE)])
    snap = Snapshotter(database_url, NAMESPACE)
    yield proc, ch, snap
    snap.close()
    ch.close()
    proc.stop()


def _call(ch: grpc.Channel, service: descriptor.ServiceDescriptor, method: descriptor.MethodDescriptor,
          request: Any) -> tuple[grpc.StatusCode, str]:
    path = f"/{service.full_name}/{method.name}"
    response_cls = message_factory.GetMessageClass(method.output_type)
    md = (("authorization", f"Bearer {TOKEN}"),)
    try:
        if method.server_streaming:
            stream = ch.unary_stream(path, request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=response_cls.FromString)(request, metadata=md, timeout=10)
            next(iter(stream))
            stream.cancel()
        else:
            ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                           response_deserializer=response_cls.FromString)(request, metadata=md, timeout=10)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""  # type: ignore[attr-defined]


@pytest.mark.parametrize("svc_method", METHODS, ids=[f"{s.name}.{m.name}" for s, m in METHODS])
def test_no_request_gets_internal_and_a_refused_request_changes_nothing(
        target: tuple[SidecarProcess, grpc.Channel, Snapshotter], database_url: str,
        svc_method: tuple[descriptor.ServiceDescriptor, descriptor.MethodDescriptor]) -> None:
    proc, ch, snap = target
    service, method = svc_method
    seen: dict[str, int] = {}
    state = {"before": snap.take()}

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None,
              derandomize=not RANDOM)
    @given(message_strategy(method.input_type))
    def run(request: Any) -> None:
        code, details = _call(ch, service, method, request)
        seen[code.name] = seen.get(code.name, 0) + 1
        assert proc.proc is not None and proc.proc.poll() is None, "the sidecar process died"
        assert code in DOCUMENTED, f"{method.name} answered {code.name}: {details}\n{request}"
        after = snap.take()
        if code in REFUSED:
            changed = sorted(t for t in after if after[t] != state["before"].get(t))
            assert not changed, f"{method.name} refused with {code.name} ({details}) yet changed {changed}\n{request}"
        state["before"] = after

    run()
    assert check_invariants(database_url) == []
    TALLY.add(f"properties {service.name}.{method.name}", faults=sum(seen.values()), operations=sum(seen.values()),
              note=" ".join(f"{k}={v}" for k, v in sorted(seen.items())))


def _raw_requests(desc: descriptor.Descriptor) -> st.SearchStrategy[bytes]:
    """Bytes that may not be a message at all: random, or a real request with a byte changed or cut."""

    def mutate(msg: Any, at: int, byte: int, cut: bool) -> bytes:
        raw = msg.SerializeToString()
        if not raw:
            return bytes([byte])
        i = at % len(raw)
        return raw[:i] if cut else raw[:i] + bytes([byte]) + raw[i + 1:]

    return st.one_of(st.binary(max_size=64),
                     st.builds(mutate, message_strategy(desc), st.integers(0, 10_000), st.sampled_from([0x80, 0xff, 0xed,
                               0xc0, 0x0a, 0x12, 0x00]), st.booleans()))


@pytest.mark.parametrize("svc_method", METHODS, ids=[f"{s.name}.{m.name}" for s, m in METHODS])
def test_bytes_that_are_not_a_valid_message_get_a_documented_code_and_change_nothing(
        target: tuple[SidecarProcess, grpc.Channel, Snapshotter],
        svc_method: tuple[descriptor.ServiceDescriptor, descriptor.MethodDescriptor]) -> None:
    proc, ch, snap = target
    service, method = svc_method
    path = f"/{service.full_name}/{method.name}"
    md = (("authorization", f"Bearer {TOKEN}"),)
    state = {"before": snap.take()}

    @settings(max_examples=max(1, EXAMPLES // 4), deadline=None, suppress_health_check=list(HealthCheck),
              database=None, derandomize=not RANDOM)
    @given(_raw_requests(method.input_type))
    def run(raw: bytes) -> None:
        try:
            if method.server_streaming:
                stream = ch.unary_stream(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)(
                    raw, metadata=md, timeout=10)
                next(iter(stream))
                stream.cancel()
            else:
                ch.unary_unary(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)(
                    raw, metadata=md, timeout=10)
            code, details = grpc.StatusCode.OK, ""
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details() or ""  # type: ignore[attr-defined]
        assert proc.proc is not None and proc.proc.poll() is None, "the sidecar process died"
        assert code in DOCUMENTED, f"{method.name} answered {code.name}: {details}\n{raw!r}"
        after = snap.take()
        if code in REFUSED:
            changed = sorted(t for t in after if after[t] != state["before"].get(t))
            assert not changed, f"{method.name} refused with {code.name} ({details}) yet changed {changed}\n{raw!r}"
        state["before"] = after

    run()


# --- every documented range holds ---------------------------------------------------------------------------------

PROTO_DIR = Path(__file__).resolve().parents[2] / "proto" / "durable" / "v1"
_RANGE = re.compile(r"(-?\d+) to (\d+)(?! characters)")
_FIELD = re.compile(r"^\s*(?:repeated\s+|optional\s+)?([\w.]+)\s+(\w+)\s*=\s*\d+\s*;")
_NUMERIC = {"int32", "int64", "uint32", "uint64", "double", "float"}


def documented_ranges() -> list[tuple[str, str, float, float, str]]:
    """(message, field, low, high, comment) for every numeric field whose comment states "A to B"."""
    out = []
    for path in sorted(PROTO_DIR.glob("*.proto")):
        package = "durable.v1"
        stack: list[str] = []
        comment: list[str] = []
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith("//"):
                comment.append(stripped[2:].strip())
                continue
            if m := re.match(r"message (\w+) \{", stripped):
                stack.append(m.group(1))
            elif stripped.startswith(("oneof ", "enum ")) and stripped.endswith("{"):
                stack.append("")  # a block inside the message: its fields still belong to the message
            elif stripped == "}" and stack:
                stack.pop()
            elif (m := _FIELD.match(line)) and stack and m.group(1) in _NUMERIC:
                text = " ".join(comment)
                if r := _RANGE.search(text):
                    message = ".".join([package] + [s for s in stack if s])
                    out.append((message, m.group(2), float(r.group(1)), float(r.group(2)), text))
            comment = []
    return out


RANGES = documented_ranges()


def _carrier(message: str) -> tuple[descriptor.MethodDescriptor, descriptor.ServiceDescriptor, list[str]]:
    """An RPC whose request is `message`, or holds it in a field (one entry of a repeated one)."""
    audit = audit_pb2.DESCRIPTOR.services_by_name["AuditService"]
    methods = METHODS + [(audit, m) for m in audit.methods]
    for svc, method in methods:
        if method.input_type.full_name == message:
            return method, svc, []
    for svc, method in methods:
        for f in method.input_type.fields:
            if f.message_type is not None and f.message_type.full_name == message:
                return method, svc, [f.name]
    raise AssertionError(f"no RPC takes {message}")


def _fill_identifiers(msg: Any) -> None:
    """Every text field given a valid value, so a request is refused for the field under test, not a missing one."""
    for f in msg.DESCRIPTOR.fields:
        if f.type != FieldDescriptor.TYPE_STRING or f.is_repeated or "token" in f.name:
            continue
        setattr(msg, f.name, "1.0.0" if f.name.endswith("label") else "order-1")


def _out_of_range(low: float, high: float, comment: str, is_float: bool) -> list[float]:
    """Values the comment excludes: above the top, and below the bottom unless that is the documented 0 default."""
    values = [high + (0.5 if is_float else 1)]
    below = low - (0.5 if is_float else 1)
    zero_means = re.search(r"\b0 (means|keeps|resumes)|; 0:|0: (no|the|one)", comment) is not None
    if not (below <= 0 < low and zero_means) or (is_float and 0 < below < low):
        values.append(below)
    return values


def test_the_contract_states_ranges_for_the_fields_it_bounds() -> None:
    """The parser finds them (a guard against a silent zero-case test), poll_interval_ms among them."""
    names = {(m.rsplit(".", 1)[1], f) for m, f, *_ in RANGES}
    assert ("WatchResumableRequest", "poll_interval_ms") in names and ("RetryPolicy", "jitter") in names
    assert len(RANGES) >= 12


@pytest.mark.parametrize("documented", RANGES, ids=[f"{m.rsplit('.', 1)[1]}.{f}" for m, f, *_ in RANGES])
def test_every_documented_range_is_refused_outside_naming_the_field(
        target: tuple[SidecarProcess, grpc.Channel, Snapshotter],
        documented: tuple[str, str, float, float, str]) -> None:
    _, ch, snap = target
    message, field, low, high, comment = documented
    method, service, path = _carrier(message)
    request_cls = message_factory.GetMessageClass(method.input_type)
    request = request_cls()
    _fill_identifiers(request)
    holder = request
    for part in path:
        inner = getattr(holder, part)
        holder = inner.add() if hasattr(inner, "add") else inner
        _fill_identifiers(holder)
    is_float = holder.DESCRIPTOR.fields_by_name[field].type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)
    for v in _out_of_range(low, high, comment, is_float=is_float):
        setattr(holder, field, type(getattr(holder, field))(v))
        before = snap.take()
        code, details = _call(ch, service, method, request)
        assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE), (
            f"{method.name} with {field}={v} (documented {comment!r}) answered {code.name}: {details}")
        assert field in details, f"{method.name} refused {field}={v} without naming it: {details}"
        assert snap.take() == before
