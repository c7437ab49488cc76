"""A test client for the HTTP/JSON face with the gRPC stubs' call shape (tests/sidecar/helpers.py Stubs).

`stubs.instances.StartOrResume(request, metadata=...)` posts the request as
protobuf JSON to /durable.v1.InstanceService/StartOrResume and returns the
response message; an error body becomes grpc.aio.AioRpcError with the gRPC code
its Connect code names, so the same test cases run over both encodings.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc
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
from google.protobuf import json_format, message, message_factory

_CODES = {code.name.lower(): code for code in grpc.StatusCode}
_CODES["canceled"] = grpc.StatusCode.CANCELLED


class HttpService:
    def __init__(self, session: aiohttp.ClientSession, base_url: str, service: Any) -> None:
        self._session = session
        self._base = base_url
        self._service = service

    def __getattr__(self, name: str) -> Callable[..., Awaitable[message.Message]]:
        method = self._service.methods_by_name[name]
        response_type = message_factory.GetMessageClass(method.output_type)
        url = f"{self._base}/{self._service.full_name}/{name}"

        async def call(request: message.Message, metadata: Sequence[tuple[str, str]] = (), timeout: float | None = None,
                       **_: Any) -> message.Message:
            headers = {"Content-Type": "application/json", **dict(metadata)}
            body = json_format.MessageToJson(request, indent=None)
            async with self._session.post(url, data=body.encode(), headers=headers,
                                          timeout=aiohttp.ClientTimeout(total=timeout or 120)) as reply:
                payload = await reply.json(content_type=None)
                if reply.status != 200:
                    code = _CODES.get(str(payload.get("code")), grpc.StatusCode.UNKNOWN)
                    raise grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                               details=str(payload.get("message", "")))
                return json_format.ParseDict(payload, response_type())

        return call


class ContractStubs:
    """The gRPC stubs' shape (tests/sidecar/helpers.py Stubs) for another encoding: `_service` gives one service."""

    token: str

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    def in_session(self, session_id: str) -> tuple[tuple[str, str], ...]:
        """The metadata of a call made by the n8n process of this session."""
        return (*self.metadata, ("durable-session", session_id))

    def _service(self, file: Any, name: str) -> Any:
        raise NotImplementedError

    @property
    def instances(self) -> Any:
        return self._service(instance_pb2, "InstanceService")

    @property
    def checkpoints(self) -> Any:
        return self._service(checkpoint_pb2, "CheckpointService")

    @property
    def idempotency(self) -> Any:
        return self._service(idempotency_pb2, "IdempotencyService")

    @property
    def versions(self) -> Any:
        return self._service(version_pb2, "VersionService")

    @property
    def audit(self) -> Any:
        return self._service(audit_pb2, "AuditService")

    @property
    def events(self) -> Any:
        return self._service(events_pb2, "EventService")

    @property
    def limits(self) -> Any:
        return self._service(limits_pb2, "LimitService")

    @property
    def recovery(self) -> Any:
        return self._service(events_pb2, "RecoveryService")

    @property
    def sessions(self) -> Any:
        return self._service(session_pb2, "SessionService")


@dataclass
class HttpStubs(ContractStubs):
    session: aiohttp.ClientSession
    base_url: str
    token: str

    def _service(self, file: Any, name: str) -> Any:
        return HttpService(self.session, self.base_url, file.DESCRIPTOR.services_by_name[name])
