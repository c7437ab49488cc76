"""CallService/Call: a client process's unary calls as messages on one open stream (proto/durable/v1/call.proto).

Each message is handled by its unary method's own handler (transport/dispatch.py),
so authentication, the input boundary, session fencing, metrics, spans and error
mapping are exactly the unary call's. What the stream saves is the call's own
cost: an HTTP/2 stream, its headers and a handler task per call in grpc, on both
sides (measured by `python -m bench.stream_floor`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from durable.v1 import call_pb2
from google.protobuf.message import DecodeError

from .. import errors, metrics
from .auth import Authenticator
from .boundary import Undecodable
from .dispatch import Aborted, Context, Route
from .errors import status_for
from .owners import SESSION_METADATA

log = logging.getLogger(__name__)

# The stream's own metadata a carried call sees: its token. A request id or a trace
# parent belongs to one call, so the stream's (if any) is not given to every call on it.
_STREAM_METADATA = ("authorization",)
# Calls one stream runs at once; past it the sidecar reads no more of the stream until
# one answers (HTTP/2 flow control then holds the client back), as it bounds its tasks.
MAX_IN_FLIGHT = 512


def _answer(call_id: int, code: grpc.StatusCode, message: str) -> call_pb2.CallResponse:
    return call_pb2.CallResponse(id=call_id, code=code.value[0], message=message)


class CallServicer:
    """Serves `Call` over the routes of every unary method (dispatch.routes)."""

    def __init__(self, routes: dict[str, Route], auth: Authenticator, stopping: asyncio.Event) -> None:
        self._routes = routes
        self._auth = auth
        self._stopping = stopping

    async def _one(self, call: call_pb2.CallRequest, metadata: tuple[tuple[str, str], ...]) -> call_pb2.CallResponse:
        route = self._routes.get(call.method)
        if route is None:
            return _answer(call.id, grpc.StatusCode.UNIMPLEMENTED,
                           f"no unary method {call.method or '(empty)'} to carry on the call stream")
        request: Any
        try:
            request = route.request_type.FromString(call.request)
        except DecodeError as exc:
            request = Undecodable(route.method, str(exc))  # refused by the handler, after authentication
        if call.session:
            metadata = (*metadata, (SESSION_METADATA, call.session))
        try:
            if call.timeout_ms:
                async with asyncio.timeout(call.timeout_ms / 1000):
                    response = await route.handler(request, Context(metadata))
            else:
                response = await route.handler(request, Context(metadata))
        except Aborted as aborted:
            return _answer(call.id, aborted.code, aborted.details)
        except TimeoutError:
            return _answer(call.id, grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
        return call_pb2.CallResponse(id=call.id, response=response.SerializeToString())

    async def Call(self, requests: AsyncIterator[call_pb2.CallRequest],  # noqa: N802 - the proto's name
                   context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[call_pb2.CallResponse]:
        metadata = tuple((key, str(value)) for key, value in context.invocation_metadata() or ()
                         if key in _STREAM_METADATA)
        answers: asyncio.Queue[call_pb2.CallResponse | None] = asyncio.Queue()
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        running: set[asyncio.Task[None]] = set()
        refused: list[errors.DomainError] = []

        async def run(call: call_pb2.CallRequest) -> None:
            try:
                answers.put_nowait(await self._one(call, metadata))
            finally:
                slots.release()

        async def read() -> None:
            try:
                async for call in requests:
                    if isinstance(call, Undecodable):
                        # No id to answer: the stream ends, with the error a unary call would get (token first).
                        self._auth.namespace_for(metadata)
                        raise errors.InvalidArgument(f"a message on the call stream is not a CallRequest: "
                                                     f"{call.error}")
                    if self._stopping.is_set():
                        # The client sends it again, to the sidecar that takes over.
                        answers.put_nowait(_answer(call.id, grpc.StatusCode.UNAVAILABLE, "the sidecar is stopping"))
                        continue
                    await slots.acquire()
                    task = asyncio.create_task(run(call))
                    running.add(task)
                    task.add_done_callback(running.discard)
            except errors.DomainError as exc:
                refused.append(exc)
            finally:
                # The client closed its side (or the sidecar stops): the stream ends once what runs has answered.
                if running:
                    await asyncio.wait(set(running))
                answers.put_nowait(None)

        async def end_when_stopping() -> None:
            await self._stopping.wait()
            reader.cancel()

        metrics.CALL_STREAMS.inc()
        reader = asyncio.create_task(read())
        stopper = asyncio.create_task(end_when_stopping())
        try:
            while (answer := await answers.get()) is not None:
                yield answer
        finally:
            metrics.CALL_STREAMS.dec()
            stopper.cancel()
            reader.cancel()
            for task in list(running):
                task.cancel()  # the client went away: as a unary call's handler is cancelled
            await asyncio.gather(reader, return_exceptions=True)
        if refused:
            log.info("call stream refused", extra={"error": str(refused[0])})
            await context.abort(status_for(refused[0]), str(refused[0]))
