"""A Python client of CallService/Call (proto/durable/v1/call.proto): calls as messages on one open stream.

What the nodes' grpc-js client does (node-package/shared/grpc/call-stream.ts), for the
benchmark's n8n mix cell as the nodes send it, its no-op floor, and the sidecar tests
(tests/sidecar/stream_client.py).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

import grpc
from durable.v1 import call_pb2, call_pb2_grpc


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


class CallStream:
    """One open Call stream: writes calls, matches answers to them by id."""

    def __init__(self, channel: grpc.aio.Channel, metadata: Sequence[tuple[str, str]],
                 method: str = "/durable.v1.CallService/Call") -> None:
        if method == "/durable.v1.CallService/Call":
            self.call = call_pb2_grpc.CallServiceStub(channel).Call(metadata=tuple(metadata))
        else:  # the no-op floor's stream (bench/noop_server.py): the same messages, no handler behind them
            self.call = channel.stream_stream(method, request_serializer=call_pb2.CallRequest.SerializeToString,
                                              response_deserializer=call_pb2.CallResponse.FromString)(
                metadata=tuple(metadata))
        self._pending: dict[int, asyncio.Future[call_pb2.CallResponse]] = {}
        self._ids = itertools.count(1)
        self._writing = asyncio.Lock()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        error = rpc_error(grpc.StatusCode.UNAVAILABLE, "the call stream ended")
        try:
            async for answer in self.call:
                waiting = self._pending.pop(answer.id, None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(answer)
        except grpc.aio.AioRpcError as exc:
            error = exc
        for waiting in self._pending.values():
            if not waiting.done():
                waiting.set_exception(error)
        self._pending.clear()

    async def send(self, request: call_pb2.CallRequest) -> call_pb2.CallResponse:
        """Sends one call (its id set here) and waits for its answer."""
        request.id = next(self._ids)
        waiting = asyncio.get_running_loop().create_future()
        self._pending[request.id] = waiting
        async with self._writing:  # grpc.aio allows one write at a time per call
            await self.call.write(request)
        return await waiting

    async def close(self) -> None:
        await self.call.done_writing()
        await self.reader
