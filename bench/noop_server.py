"""The no-op gRPC floor: a `grpc.aio` server in its own process that answers without doing any work.

Two raw-bytes methods mirror the sidecar's message shapes: `Save` takes a
request as large as a SaveCheckpoints request and answers a small fixed reply;
`Load` takes a small request naming a size and answers that many bytes.
`Stream` is the floor of a call carried on an open stream, as the nodes send
theirs (durable.v1.CallService/Call): each CallRequest is answered at once with
a CallResponse carrying `Save`'s reply. Run: `python -m bench.noop_server PORT`.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
from durable.v1 import call_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from bench.infra import GRPC_OPTIONS

SERVICE = "bench.v1.Noop"
SAVE_METHOD = f"/{SERVICE}/Save"
LOAD_METHOD = f"/{SERVICE}/Load"
STREAM_METHOD = f"/{SERVICE}/Stream"
# About the size of a SaveCheckpointsResponse for one item (checkpoint metadata).
SAVE_REPLY = b"r" * 160

_replies: dict[int, bytes] = {}


async def _save(request: bytes, context: Any) -> bytes:
    return SAVE_REPLY


async def _load(request: bytes, context: Any) -> bytes:
    size = int.from_bytes(request[:8], "big")
    reply = _replies.get(size)
    if reply is None:
        reply = _replies[size] = b"x" * size
    return reply


async def _stream(requests: AsyncIterator[call_pb2.CallRequest], context: Any) -> AsyncIterator[call_pb2.CallResponse]:
    async for call in requests:
        yield call_pb2.CallResponse(id=call.id, response=SAVE_REPLY)


async def serve(port: int) -> None:
    server = grpc.aio.server(options=GRPC_OPTIONS)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {
        "Save": grpc.unary_unary_rpc_method_handler(_save),
        "Load": grpc.unary_unary_rpc_method_handler(_load),
        "Stream": grpc.stream_stream_rpc_method_handler(
            _stream, request_deserializer=call_pb2.CallRequest.FromString,
            response_serializer=call_pb2.CallResponse.SerializeToString),
    })])
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    await done.wait()
    await server.stop(0.5)


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
