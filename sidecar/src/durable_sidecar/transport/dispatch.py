"""Unary handlers called without gRPC's own call: the HTTP/JSON face and the call stream share this.

A route is a unary method of the contract and the servicer method gRPC would
call for it (the transport/rpc.py wrapper: auth, the input boundary, session
fencing, metrics, spans, error mapping). Calling it with a `Context` instead of
grpc's gives the very same handling; the wrapper's `abort` raises `Aborted`,
carrying the status code and message the unary call would have ended with.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, message, message_factory


class Aborted(Exception):
    """The handler ended the call with a status other than OK."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class Context:
    """The part of grpc.aio.ServicerContext the handlers use (transport/rpc.py): metadata and abort."""

    __slots__ = ("_metadata",)

    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._metadata = tuple(metadata)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise Aborted(code, details)


@dataclass(frozen=True)
class Route:
    method: str  # /durable.v1.Service/Method
    request_type: type[message.Message]
    handler: Callable[[Any, Any], Awaitable[message.Message]]
    # Marked `idempotency_level = NO_SIDE_EFFECTS` in the proto: a read (the HTTP/JSON face also serves it by GET).
    read_only: bool = False


def routes(servicers: Sequence[tuple[Any, Any]]) -> dict[str, Route]:
    """`(service descriptor, servicer)` pairs -> every unary method's route, from the descriptors alone."""
    out: dict[str, Route] = {}
    for service, servicer in servicers:
        for method in service.methods:
            if method.server_streaming or method.client_streaming:
                continue  # WatchResumable, WatchSession, the call stream itself: gRPC only
            path = f"/{service.full_name}/{method.name}"
            request_type = message_factory.GetMessageClass(method.input_type)
            read_only = method.GetOptions().idempotency_level == descriptor_pb2.MethodOptions.NO_SIDE_EFFECTS
            out[path] = Route(path, request_type, getattr(servicer, method.name), read_only)
    return out


def streaming(services: Sequence[Any]) -> set[str]:
    """The paths of the services' streaming methods (served on gRPC only)."""
    return {f"/{service.full_name}/{method.name}" for service in services for method in service.methods
            if method.server_streaming or method.client_streaming}
