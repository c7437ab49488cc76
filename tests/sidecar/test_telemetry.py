"""Traces (one server span per RPC, child of the caller's traceparent) and the instance gauges for dashboards."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import grpc
import pytest
from durable.v1 import checkpoint_pb2, idempotency_pb2, instance_pb2
from durable_sidecar import app, metrics, telemetry
from durable_sidecar.stores.gauges import instance_gauges
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import REGISTRY

from tests.conftest import Harness, make_settings

WF = "wf-traced"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.enable(provider)
    try:
        yield exporter
    finally:
        telemetry.disable()
        provider.shutdown()


async def test_one_span_per_rpc_with_identifiers_and_the_callers_parent(harness: Harness,
                                                                        spans: InMemorySpanExporter) -> None:
    s = harness.alpha
    md = (*s.metadata, ("traceparent", TRACEPARENT))
    key = f"order-{uuid.uuid4().hex[:10]}"
    secret = {"card": "4111-secret-state"}
    await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1"), metadata=md)
    await s.checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[checkpoint_pb2.SaveCheckpointItem(
        workflow_id=WF, instance_key=key, step_name="payment", state_json=json.dumps(secret).encode(),
        execution_id="exec-1", node_name="Durable Checkpoint")]), metadata=md)
    await s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[idempotency_pb2.ClaimItem(
        scope="payments", key=key, payload_json=b'{"amount": 1}')]), metadata=md)
    with pytest.raises(grpc.aio.AioRpcError) as refused:  # no traceparent: a root span; refused: an error span
        await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key="missing"),
                                      metadata=s.metadata)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND

    finished = spans.get_finished_spans()
    assert [sp.name for sp in finished] == [
        "durable.v1.InstanceService/StartOrResume", "durable.v1.CheckpointService/SaveCheckpoints",
        "durable.v1.IdempotencyService/Claim", "durable.v1.InstanceService/GetInstance"]
    namespace = harness.sidecar.settings.tokens[s.token]
    for sp in finished[:3]:
        assert sp.kind == SpanKind.SERVER
        assert sp.parent is not None and sp.parent.is_remote
        assert f"{sp.context.trace_id:032x}" == TRACE_ID and f"{sp.parent.span_id:016x}" == PARENT_SPAN_ID
        assert sp.attributes is not None
        assert sp.attributes["durable.namespace"] == namespace
        assert sp.attributes["rpc.grpc.status_code"] == 0 and sp.status.status_code != StatusCode.ERROR
    start, save, claim, get = (dict(sp.attributes or {}) for sp in finished)
    assert start["durable.workflow_id"] == WF and start["durable.instance_key"] == key
    assert save["durable.step"] == "payment" and save["durable.instance_key"] == key and save["durable.items"] == 1
    assert claim["durable.idempotency.scope"] == "payments" and claim["durable.idempotency.key"] == key
    assert finished[3].parent is None and get["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert finished[3].status.status_code == StatusCode.ERROR
    # Identifiers only: no state, payload or result in any attribute.
    everything = json.dumps([dict(sp.attributes or {}) for sp in finished])
    assert "4111-secret-state" not in everything and "amount" not in everything


async def test_traces_off_by_default_record_nothing(harness: Harness) -> None:
    assert harness.sidecar.settings.traces_enabled is False
    assert telemetry.start_rpc("GetInstance", (("traceparent", TRACEPARENT),)) is None


def _sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


async def test_instance_gauges_count_running_waiting_stalled_and_the_oldest_stalled(harness: Harness) -> None:
    s = harness.alpha
    started = []
    for i in range(4):
        key = f"gauge-{uuid.uuid4().hex[:8]}-{i}"
        reply = await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
            workflow_id=WF, instance_key=key, execution_id="exec-1", lease_seconds=1 if i < 2 else 300),
            metadata=s.metadata)
        started.append((key, reply))
    # One waits for a wake-up already due.
    await s.instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(
        workflow_id=WF, instance_key=started[3][0], execution_id="exec-1", delay_seconds=0), metadata=s.metadata)
    await asyncio.sleep(2.2)  # the two 1-second leases lapse: stalled

    backend = "postgres" if not harness.sidecar.settings.embedded else "sqlite"
    by_ns = await instance_gauges(harness.sidecar.db, backend)
    ns = harness.sidecar.settings.tokens[s.token]
    g = by_ns[ns]
    assert (g.running, g.waiting, g.stalled, g.due_wake_ups) == (1, 1, 2, 1)
    assert 1.0 <= g.oldest_stalled_seconds < 60

    metrics.set_instance_gauges(by_ns)
    assert _sample("durable_instances", namespace=ns, state="stalled") == 2
    assert _sample("durable_instances", namespace=ns, state="running") == 1
    assert _sample("durable_wake_ups_due", namespace=ns) == 1
    oldest = _sample("durable_oldest_stalled_instance_age_seconds", namespace=ns)
    assert oldest is not None and oldest >= 1.0
    metrics.set_instance_gauges({})  # a namespace with nothing running drops out
    assert _sample("durable_instances", namespace=ns, state="stalled") is None


async def test_the_sidecar_refreshes_the_gauges_periodically(database_url: str) -> None:
    settings = make_settings(database_url, auth_disabled=True, metrics_address="127.0.0.1:0",
                             instance_gauges_interval_seconds=1)
    sidecar = await app.start(settings)
    try:
        assert any(t.get_name() == "instance-gauges" for t in sidecar.background)
        before = _sample("durable_instance_gauges_updated_timestamp_seconds") or 0
        for _ in range(30):
            await asyncio.sleep(0.1)
            if (_sample("durable_instance_gauges_updated_timestamp_seconds") or 0) > before:
                break
        assert (_sample("durable_instance_gauges_updated_timestamp_seconds") or 0) > before
    finally:
        await sidecar.stop(grace=0.2)
