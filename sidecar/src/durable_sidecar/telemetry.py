"""OpenTelemetry traces: one server span per RPC, parented by the caller's W3C traceparent.

Off by default (DURABLE_TRACES_ENABLED). When on, `configure` builds an SDK
TracerProvider whose OTLP/gRPC exporter reads the standard OTEL_* variables
(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*, ...). Spans carry identifiers only
(namespace, workflow id, instance key, step, idempotency scope and key), never
state, results or payloads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from durable.v1 import checkpoint_pb2, idempotency_pb2, instance_pb2, version_pb2
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

log = logging.getLogger(__name__)

TRACER_NAME = "durable_sidecar"

# Method name (as given to transport/rpc.py's wrappers) -> full service name; the names are unique across services.
_SERVICE_OF: dict[str, str] = {
    method.name: service.full_name
    for file in (instance_pb2.DESCRIPTOR, checkpoint_pb2.DESCRIPTOR, idempotency_pb2.DESCRIPTOR, version_pb2.DESCRIPTOR)
    for service in file.services_by_name.values()
    for method in service.methods
}

# Request field -> span attribute. Only identifiers: never state, results or payloads.
_FIELDS = (
    ("workflow_id", "durable.workflow_id"),
    ("instance_key", "durable.instance_key"),
    ("step_name", "durable.step"),
    ("scope", "durable.idempotency.scope"),
    ("key", "durable.idempotency.key"),
)

_tracer: trace.Tracer | None = None


def enable(provider: trace.TracerProvider) -> None:
    """Traces every RPC from now on through `provider` (tests pass one with an in-memory exporter)."""
    global _tracer
    _tracer = provider.get_tracer(TRACER_NAME)


def disable() -> None:
    global _tracer
    _tracer = None


def configure(enabled: bool) -> Callable[[], None] | None:
    """With tracing on: an SDK provider with a batching OTLP exporter; returns its shutdown (flushes)."""
    if not enabled:
        return None
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over our default name.
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": "durable-sidecar"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    enable(provider)
    log.info("traces on: OTLP exporter", extra={"endpoint": os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "default")})

    def shutdown() -> None:
        disable()
        provider.shutdown()

    return shutdown


def start_rpc(method: str, metadata: Sequence[tuple[str, Any]] | None) -> Span | None:
    """A server span for one RPC, child of the caller's `traceparent` metadata when there is one."""
    tracer = _tracer
    if tracer is None:
        return None
    carrier = {str(k).lower(): str(v) for k, v in metadata or () if isinstance(v, str)}
    parent = propagate.extract(carrier)
    service = _SERVICE_OF.get(method, "durable.v1")
    return tracer.start_span(
        f"{service}/{method}", context=parent, kind=SpanKind.SERVER,
        attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": method},
    )


def _identifiers(request: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    fields = getattr(getattr(request, "DESCRIPTOR", None), "fields_by_name", {})
    for name, attribute in _FIELDS:
        if name in fields and fields[name].type == fields[name].TYPE_STRING:
            value = getattr(request, name)
            if value:
                out[attribute] = value
    return out


def end_rpc(span: Span | None, *, namespace: str, request: Any, code: grpc.StatusCode, message: str = "") -> None:
    """Identifiers of the request (of its one item, for a batch of one), the status code, then the end."""
    if span is None:
        return
    try:
        if namespace:
            span.set_attribute("durable.namespace", namespace)
        attributes = _identifiers(request)
        items = getattr(request, "items", None)
        fields = getattr(getattr(request, "DESCRIPTOR", None), "fields_by_name", {})
        if "items" in fields and items is not None:
            span.set_attribute("durable.items", len(items))
            if len(items) == 1:
                attributes.update(_identifiers(items[0]))
        for key, value in attributes.items():
            span.set_attribute(key, value)
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code is not grpc.StatusCode.OK:
            span.set_status(Status(StatusCode.ERROR, f"{code.name}: {message}"[:200]))
    finally:
        span.end()
