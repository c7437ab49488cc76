"""The input boundary: the seven classes of bad input from issue 16, each refused whole and changing nothing.

Every test runs on both backends. "Changed nothing" is read back: a checksum
of every durable_* table's rows of the caller's namespace before and after.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
import uuid
from typing import Any

import grpc
import pytest
from durable.v1 import checkpoint_pb2, idempotency_pb2, instance_pb2, version_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.snapshot import snapshot
from tests.sidecar.storage import fetch

WF = "wf-boundary"
# Not UTF-8 JSON: UTF-16 (with and without BOM), UTF-32, an encoded surrogate, an escaped lone surrogate.
NOT_UTF8_JSON = [
    '{"ok": true}'.encode("utf-16"),
    '{"ok": true}'.encode("utf-16-le"),
    '{"ok": true}'.encode("utf-32"),
    b'{"s": "\xed\xa0\x80"}',
    b'{"s": "\\ud800"}',
    b'{"\\udc00": 1}',
    b"\xef\xbb\xbf{}",
]


def new_key() -> str:
    return f"order-{uuid.uuid4().hex[:10]}"


def namespace(h: Harness, s: Stubs) -> str:
    return h.sidecar.settings.tokens[s.token]


async def refused(h: Harness, s: Stubs, code: grpc.StatusCode, call: Any, *, contains: str = "") -> str:
    """Awaits a call that must fail with `code` and leave the namespace's rows as they were."""
    url = h.sidecar.settings.database_url
    before = await snapshot(url, namespace(h, s))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, (err.value.code(), err.value.details())
    details = err.value.details() or ""
    assert contains in details, details
    assert await snapshot(url, namespace(h, s)) == before, "a refused request changed the database"
    return details


async def start(s: Stubs, key: str, **kw: Any) -> instance_pb2.StartOrResumeResponse:
    return await s.instances.StartOrResume(
        instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=key, execution_id="exec-1", **kw),
        metadata=s.metadata)


async def claim(s: Stubs, *keys: str, holder: str = "exec-1") -> idempotency_pb2.ClaimResponse:
    return await s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[
        idempotency_pb2.ClaimItem(scope="payment", key=k, payload_json=b'{"amount": 1}', holder=holder) for k in keys
    ]), metadata=s.metadata)


def complete(s: Stubs, key: str, attempt: int, result: bytes) -> Any:
    return s.idempotency.Complete(idempotency_pb2.CompleteRequest(scope="payment", key=key, attempt=attempt,
                                                                  result_json=result), metadata=s.metadata)


# 1. The bricked key -------------------------------------------------------------


@pytest.mark.parametrize("result", NOT_UTF8_JSON, ids=range(len(NOT_UTF8_JSON)))
async def test_1_a_complete_with_non_utf8_result_is_refused_before_the_commit_and_the_key_stays_usable(
        harness: Harness, result: bytes) -> None:
    s = harness.alpha
    key = new_key()
    first = (await claim(s, key)).results[0]
    assert first.outcome == idempotency_pb2.CLAIM_OUTCOME_ACQUIRED
    await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, complete(s, key, first.key.attempt, result),
                  contains="result_json")
    # Not bricked: the key is still in progress for its holder, and a batch with a new key is served whole.
    other = new_key()
    again = await claim(s, key, other)
    assert [r.outcome for r in again.results] == [idempotency_pb2.CLAIM_OUTCOME_ACQUIRED] * 2
    assert again.results[0].key.attempt == first.key.attempt
    done = await complete(s, key, first.key.attempt, b'{"charge": "ch_1"}')
    assert done.key.status == idempotency_pb2.KEY_STATUS_COMPLETED
    replay = (await claim(s, key)).results[0]
    assert replay.outcome == idempotency_pb2.CLAIM_OUTCOME_DUPLICATE and replay.key.result_json == b'{"charge": "ch_1"}'


async def test_1_a_key_bricked_before_the_boundary_still_answers_and_never_internal(harness: Harness) -> None:
    """A completed row whose result is UTF-16 (written before this fix) replays; caching it cannot fail the call."""
    s = harness.alpha
    key, fresh = new_key(), new_key()
    first = (await claim(s, key)).results[0]
    await complete(s, key, first.key.attempt, b'{"x": 1}')
    url = harness.sidecar.settings.database_url
    await fetch(url, "UPDATE durable_idempotency_keys SET result_json = %s WHERE namespace = %s AND key = %s",
                '{"x": 1}'.encode("utf-16"), namespace(harness, s), key)
    reply = await claim(s, key, fresh)
    assert [r.outcome for r in reply.results] == [idempotency_pb2.CLAIM_OUTCOME_DUPLICATE,
                                                  idempotency_pb2.CLAIM_OUTCOME_ACQUIRED]
    assert reply.results[0].key.result_json == '{"x": 1}'.encode("utf-16")


# 2. Checkpoint states that n8n cannot read back ------------------------------------


async def test_2_states_in_utf16_utf32_or_with_surrogates_are_refused(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    for state in NOT_UTF8_JSON:
        item = checkpoint_pb2.SaveCheckpointItem(workflow_id=WF, instance_key=key, step_name="pay", state_json=state,
                                                 execution_id="exec-1")
        good = checkpoint_pb2.SaveCheckpointItem(workflow_id=WF, instance_key=key, step_name="ok", state_json=b"{}",
                                                 execution_id="exec-1")
        await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT,
                      s.checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[good, item]),
                                                    metadata=s.metadata), contains="items[1].state_json")
    # The same for the start item and a definition.
    for field in ("start_item_json", "definition_json"):
        await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, start(s, new_key(), **{field: NOT_UTF8_JSON[0]}),
                      contains=field)


# 3. NUL characters in text fields ---------------------------------------------------


async def test_3_nul_in_any_text_field_is_invalid_argument(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    got = (await claim(s, key)).results[0]
    definition = {"nodes": [{"name": "Pay\x00", "type": "n8n-nodes-base.set"}], "connections": {}}
    calls = [
        s.idempotency.Release(idempotency_pb2.ReleaseRequest(scope="payment", key=key, attempt=got.key.attempt,
                                                             error_message="boom\x00"), metadata=s.metadata),
        s.instances.FailInstance(instance_pb2.FailInstanceRequest(workflow_id=WF, instance_key=key, execution_id="exec-1",
                                                                  error_message="card declined\x00"), metadata=s.metadata),
        s.instances.CancelInstance(instance_pb2.CancelInstanceRequest(workflow_id=WF, instance_key=key, actor="ops",
                                                                      reason="dup\x00"), metadata=s.metadata),
        s.versions.RegisterVersion(version_pb2.RegisterVersionRequest(
            workflow_id=WF, definition_json=json.dumps({"nodes": [], "connections": {}}).encode(), note="v\x00"),
            metadata=s.metadata),
        s.versions.RegisterVersion(version_pb2.RegisterVersionRequest(
            workflow_id=WF, definition_json=json.dumps(definition).encode()), metadata=s.metadata),
        s.instances.ListInstances(instance_pb2.ListInstancesRequest(workflow_id=WF, instance_key_prefix="order-\x00"),
                                  metadata=s.metadata),
        s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key="a\x00b"),
                                metadata=s.metadata),
    ]
    for call in calls:
        await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, call, contains="control characters")
    # Tabs and line breaks stay allowed in free text.
    failed = await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1", error_message="line 1\nline 2\tend"), metadata=s.metadata)
    assert failed.instance.error_message == "line 1\nline 2\tend"


# 4. Crafted page tokens ----------------------------------------------------------------


def _b64(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


CRAFTED_TOKENS = [
    _b64([True]), _b64(["x"]), _b64(["2020-01-01T00:00:00", True, None]), _b64([10**30]),
    _b64({"a": 1}), "not base64!", "p1.", "p1.W10.AAAA", "p1.W10", "\u00e9" * 10, "=" * 3000,
]


async def test_4_crafted_page_tokens_are_invalid_argument_on_every_list(harness: Harness) -> None:
    s = harness.alpha
    keys = [new_key() for _ in range(3)]
    for key in keys:
        await start(s, key)
        await s.checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[
            checkpoint_pb2.SaveCheckpointItem(workflow_id=WF, instance_key=keys[0], step_name=f"s-{key}",
                                              state_json=b"{}", execution_id="exec-1")]), metadata=s.metadata)
    await claim(s, *keys)
    for _ in range(2):
        await s.versions.RegisterVersion(version_pb2.RegisterVersionRequest(workflow_id=WF, definition_json=json.dumps(
            {"nodes": [{"name": uuid.uuid4().hex, "type": "t"}], "connections": {}}).encode()), metadata=s.metadata)

    def lists(token: str) -> list[Any]:
        md = s.metadata
        return [
            s.instances.ListInstances(instance_pb2.ListInstancesRequest(workflow_id=WF, page_size=1, page_token=token),
                                      metadata=md),
            s.checkpoints.ListCheckpoints(checkpoint_pb2.ListCheckpointsRequest(
                workflow_id=WF, instance_key=keys[0], page_size=1, page_token=token), metadata=md),
            s.idempotency.ListKeys(idempotency_pb2.ListKeysRequest(scope="payment", page_size=1, page_token=token),
                                   metadata=md),
            s.versions.ListVersions(version_pb2.ListVersionsRequest(workflow_id=WF, page_size=1, page_token=token),
                                    metadata=md),
            s.versions.ListChangeLog(version_pb2.ListChangeLogRequest(workflow_id=WF, page_size=1, page_token=token),
                                     metadata=md),
        ]

    real = [(await call).next_page_token for call in lists("")]
    assert all(real), "every list has a second page"
    for token in CRAFTED_TOKENS:
        for call in lists(token):
            await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, call, contains="page_token")
    # A real token pages; the same token on another list, or for another namespace, is refused.
    for i, call in enumerate(lists("")):
        await call
        follow = lists(real[i])[i]
        await follow
        other = lists(real[(i + 1) % len(real)])[i]
        await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, other, contains="page_token")
    beta = harness.beta
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await beta.instances.ListInstances(instance_pb2.ListInstancesRequest(workflow_id=WF, page_token=real[0]),
                                           metadata=beta.metadata)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# 5. Times out of range ---------------------------------------------------------------------


async def test_5_times_and_durations_out_of_range_are_invalid_argument(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    for seconds, nanos in ((253_402_300_800, 0), (-62_135_596_801, 0), (0, -1), (2**62, 0), (0, 1_000_000_000)):
        ts = Timestamp(seconds=seconds, nanos=nanos)
        await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, s.instances.ScheduleWakeUp(
            instance_pb2.ScheduleWakeUpRequest(workflow_id=WF, instance_key=key, execution_id="exec-1", wake_at=ts),
            metadata=s.metadata), contains="wake_at")
    for older in (2**62, 2**63 - 1, -1):
        await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, s.checkpoints.PruneCheckpoints(
            checkpoint_pb2.PruneCheckpointsRequest(workflow_id=WF, older_than_seconds=older, dry_run=True),
            metadata=s.metadata), contains="older_than_seconds")
    # The far edge of the range is a valid (if patient) wake-up.
    edge = Timestamp(seconds=253_402_300_799)
    woke = await s.instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1", wake_at=edge), metadata=s.metadata)
    assert woke.instance.wake_at.seconds >= 253_402_300_798


# 6. version_label must be a semantic version ----------------------------------------------------


async def test_6_a_version_label_that_is_not_a_semantic_version_is_refused(harness: Harness) -> None:
    s = harness.alpha
    for label in ("banana", "1.0", "v1.2.3", "1.2.3\u0085"):
        await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, start(s, new_key(), version_label=label),
                      contains="version_label")
    started = await start(s, new_key(), version_label="2.0.0-rc.1")
    assert started.instance.version_label == "2.0.0-rc.1"


# 7. C1 controls, big integers, the size of CompleteInstance's result ------------------------------


async def test_7_c1_controls_in_identifiers_are_refused(harness: Harness) -> None:
    s = harness.alpha
    for bad in ("order\u0085", "order\u009f", "order\u007f", "order\u0001"):
        await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, start(s, bad), contains="control characters")


async def test_7_a_valid_big_integer_is_json_and_is_stored_as_sent(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    state = b'{"n": ' + b"7" * 5000 + b"}"
    saved = await s.checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[
        checkpoint_pb2.SaveCheckpointItem(workflow_id=WF, instance_key=key, step_name="big", state_json=state,
                                          execution_id="exec-1")]), metadata=s.metadata)
    assert saved.results[0].checkpoint.size_bytes == len(state)
    # A fingerprint needs a number JavaScript can hold: beyond the double range there is no canonical form.
    await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, s.idempotency.Claim(idempotency_pb2.ClaimRequest(
        items=[idempotency_pb2.ClaimItem(scope="payment", key=new_key(), payload_json=state)]), metadata=s.metadata),
        contains="double range")


@pytest.mark.parametrize("harness", [{"max_state_bytes": 65_536}], indirect=True)
async def test_7_complete_instance_result_is_capped_like_states(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key)
    big = b'"' + b"x" * 70_000 + b'"'
    await refused(harness, s, grpc.StatusCode.RESOURCE_EXHAUSTED, s.instances.CompleteInstance(
        instance_pb2.CompleteInstanceRequest(workflow_id=WF, instance_key=key, execution_id="exec-1", result_json=big),
        metadata=s.metadata), contains="DURABLE_MAX_STATE_BYTES")
    done = await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1", result_json=b'{"ok": true}'), metadata=s.metadata)
    assert done.instance.result_json == b'{"ok": true}'


async def test_unknown_enum_values_and_negative_numbers_are_invalid_argument(harness: Harness) -> None:
    s = harness.alpha
    await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, s.instances.ListInstances(
        instance_pb2.ListInstancesRequest(workflow_id=WF, statuses=[42]), metadata=s.metadata), contains="statuses")
    await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, s.checkpoints.GetCheckpoint(
        checkpoint_pb2.GetCheckpointRequest(workflow_id=WF, instance_key="k", sequence=-5), metadata=s.metadata),
        contains="sequence")
    await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, s.versions.GetVersion(
        version_pb2.GetVersionRequest(workflow_id=WF, version=2**60), metadata=s.metadata), contains="version")


# Fair streams -----------------------------------------------------------------------------------


@pytest.mark.parametrize("harness", [{"watch_streams_per_namespace": 2, "watch_min_poll_interval_ms": 300}],
                         indirect=True)
async def test_open_watch_streams_are_limited_per_namespace_and_polls_have_a_floor(harness: Harness) -> None:
    s, other = harness.alpha, harness.beta

    def watch(stubs: Stubs) -> Any:
        return stubs.instances.WatchResumable(instance_pb2.WatchResumableRequest(
            claimant="n8n", workflow_ids=[WF], poll_interval_ms=100), metadata=stubs.metadata)

    first, second = watch(s), watch(s)
    stamps: list[float] = []
    for stream in (first, second):
        await stream.read()  # open: the first poll answered
    for _ in range(3):
        await first.read()
        stamps.append(time.monotonic())
    # 100 ms asked for, the floor is 300 ms.
    assert min(b - a for a, b in itertools.pairwise(stamps)) > 0.25
    third = watch(s)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await third.read()
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "DURABLE_WATCH_STREAMS_PER_NAMESPACE" in (err.value.details() or "")
    # Another namespace is not affected; a closed stream frees its place.
    theirs = watch(other)
    await theirs.read()
    first.cancel()
    for _ in range(100):
        fourth = watch(s)
        try:
            await fourth.read()
            break
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            await asyncio.sleep(0.05)
    else:
        raise AssertionError("a cancelled stream never freed its place")
    for stream in (second, theirs, fourth):
        stream.cancel()


# Requests gRPC cannot decode ---------------------------------------------------------------------------


async def test_a_request_that_is_not_a_valid_message_is_invalid_argument_not_unknown(harness: Harness) -> None:
    """A string field that is not UTF-8 on the wire, or a corrupt message, never reaches a service."""
    s = harness.alpha
    call = s.channel.unary_unary("/durable.v1.InstanceService/StartOrResume", request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)
    good = instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key="order-x", execution_id="exec-1")
    bad_utf8 = good.SerializeToString().replace(b"order-x", b"order\xff\xfe")
    for raw in (bad_utf8, b"\xff\xff\xff", b"\x0a\x05ab"):
        details = await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, call(raw, metadata=s.metadata),
                                contains="not a valid message")
        assert "StartOrResume" in details
    # Authentication still comes first.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call(b"\xff\xff\xff")
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_every_durable_method_refuses_an_undecodable_request_invalid_argument(harness: Harness) -> None:
    """DecodeGuard covers every service's methods, the server streams included."""
    from durable_sidecar.app import SERVICE_NAMES
    from google.protobuf import descriptor_pool

    s = harness.alpha
    pool = descriptor_pool.Default()
    methods = [(service, m) for service in SERVICE_NAMES for m in pool.FindServiceByName(service).methods]
    assert len(methods) > 30, methods
    for service, m in methods:
        path = f"/{service}/{m.name}"
        if m.client_streaming:  # the call stream and FileService.UploadFile
            stream = s.channel.stream_stream(path, request_serializer=lambda b: b,
                                             response_deserializer=lambda b: b)(iter([b"\xff\xff\xff"]),
                                                                                metadata=s.metadata)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in stream:
                    pass
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (path, err.value.details())
            # The call stream ends on a message that is no CallRequest; an upload names its method.
            assert ("not a CallRequest" if m.server_streaming else m.name) in (err.value.details() or "")
            continue
        factory = s.channel.unary_stream if m.server_streaming else s.channel.unary_unary
        call = factory(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            if m.server_streaming:
                async for _ in call(b"\xff\xff\xff", metadata=s.metadata):
                    pass
            else:
                await call(b"\xff\xff\xff", metadata=s.metadata)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (path, err.value.code(), err.value.details())
        assert m.name in (err.value.details() or ""), (path, err.value.details())


def test_a_boolean_never_passes_for_a_cursor_number_even_behind_the_signature() -> None:
    from durable_sidecar.errors import InvalidArgument
    from durable_sidecar.stores.paging import decode_cursor, encode_cursor

    assert decode_cursor(encode_cursor([7]), 1) == [7]
    for crafted in ([True], [False], ["2020-01-01", True, "k"]):
        with pytest.raises(InvalidArgument):
            decode_cursor(_b64(crafted), len(crafted))


# Issue 15: the fields of waits, signals, retry policies and operator actions ----------------------


async def test_wait_signal_retry_and_operator_fields_are_checked_at_the_boundary(harness: Harness) -> None:
    from durable.v1 import common_pb2, events_pb2

    s = harness.alpha
    key = new_key()
    await start(s, key)
    ev, rec = s.events, s.recovery

    def sig(**kw: Any) -> Any:
        fields = {"workflow_id": WF, "instance_key": key, "event_name": "delivered", "dedupe_id": "d-1", **kw}
        return ev.SignalInstance(events_pb2.SignalInstanceRequest(**fields), metadata=s.metadata)

    for call, contains in [
        (sig(event_name="deli\x00vered"), "control characters"),
        (sig(dedupe_id="d\x85"), "control characters"),
        (sig(sender="carrier\x00"), "control characters"),
        (sig(payload_json='{"a": 1}'.encode("utf-16")), "payload_json"),
        (rec.RetryInstance(events_pb2.RetryInstanceRequest(workflow_id=WF, instance_key=key, actor="ops\x00",
                                                           reason="x"), metadata=s.metadata), "control characters"),
        (rec.ResumeInstance(events_pb2.ResumeInstanceRequest(workflow_id=WF, instance_key=key, actor="ops",
                                                             reason="why\x00"), metadata=s.metadata),
         "control characters"),
        (ev.AwaitEvent(events_pb2.AwaitEventRequest(workflow_id=WF, instance_key=key, execution_id="exec-1",
                                                    event_name="delivered", deadline=Timestamp(seconds=2**62)),
                       metadata=s.metadata), "deadline"),
        (ev.AwaitEvent(events_pb2.AwaitEventRequest(workflow_id=WF, instance_key=key, execution_id="exec-1",
                                                    event_name="delivered", timeout_seconds=2**62),
                       metadata=s.metadata), "timeout_seconds"),
        (ev.ListEvents(events_pb2.ListEventsRequest(workflow_id=WF, instance_key=key, page_token=CRAFTED_TOKENS[0]),
                       metadata=s.metadata), "page_token"),
    ]:
        await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, call, contains=contains)
    for bad in (float("nan"), float("inf"), -1.0):
        for field in ("backoff_multiplier", "jitter"):
            await refused(harness, s, grpc.StatusCode.INVALID_ARGUMENT, start(
                s, key, retry_policy=common_pb2.RetryPolicy(**{field: bad})), contains=f"retry_policy.{field}")
