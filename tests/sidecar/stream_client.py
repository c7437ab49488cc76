"""A test client that carries unary calls on CallService/Call streams, with the gRPC stubs' call shape.

`stubs.instances.StartOrResume(request, metadata=...)` sends the request as one
message of an open Call stream (one stream per token, as the nodes keep one per
process) and returns the response message; an answer with an error code becomes
grpc.aio.AioRpcError with that code, so the same test cases run over unary gRPC,
HTTP/JSON and the call stream.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from durable.v1 import (
    call_pb2,
)
from google.protobuf import message, message_factory

from bench.call_stream import CallStream, rpc_error
from tests.sidecar.http_client import ContractStubs

_CODES = {code.value[0]: code for code in grpc.StatusCode}


class StreamService:
    def __init__(self, stubs: StreamStubs, service: Any) -> None:
        self._stubs = stubs
        self._service = service

    def __getattr__(self, name: str) -> Callable[..., Awaitable[message.Message]]:
        method = self._service.methods_by_name[name]
        response_type = message_factory.GetMessageClass(method.output_type)
        path = f"/{self._service.full_name}/{name}"

        async def call(request: message.Message, metadata: Sequence[tuple[str, str]] = (),
                       timeout: float | None = None, **_: Any) -> message.Message:
            given = dict(metadata)
            stream = await self._stubs.stream(given.get("authorization", ""))
            answer = await stream.send(call_pb2.CallRequest(
                method=path, request=request.SerializeToString(), session=given.get("durable-session", ""),
                timeout_ms=int(timeout * 1000) if timeout else 0))
            if answer.code:
                raise rpc_error(_CODES[answer.code], answer.message)
            return response_type.FromString(answer.response)

        return call


@dataclass
class StreamStubs(ContractStubs):
    channel: grpc.aio.Channel
    token: str
    streams: dict[str, CallStream] = field(default_factory=dict)

    async def stream(self, authorization: str) -> CallStream:
        """The open stream of a token (opened on its first call), as a process keeps one per credential."""
        found = self.streams.get(authorization)
        if found is None or found.reader.done():
            found = CallStream(self.channel, [("authorization", authorization)] if authorization else [])
            self.streams[authorization] = found
        return found

    async def close(self) -> None:
        for stream in self.streams.values():
            if not stream.reader.done():
                await stream.close()

    def _service(self, file: Any, name: str) -> StreamService:
        return StreamService(self, file.DESCRIPTOR.services_by_name[name])
