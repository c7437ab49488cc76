"""The wrapper every RPC handler goes through: auth, request context, error mapping, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import grpc

from .. import errors, metrics, telemetry
from ..logs import instance_key_var, namespace_var, request_id_var
from ..services.sessions import caller_live
from .auth import Authenticator
from .boundary import Boundary, refuse_undecodable
from .errors import status_for
from .owners import OWNERS, SESSION_METADATA, SESSION_METHODS

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class HasAuth(Protocol):
    auth: Authenticator


class Sessions(Protocol):
    """What the wrapper needs of the session service (services/sessions.py)."""

    async def admit(self, namespace: str, session_id: str) -> None: ...

    async def learn(self, namespace: str, owners: list[str], session_id: str) -> None: ...

    def ended_here(self, namespace: str, session_id: str) -> bool: ...


# A generated request id: a random prefix per process and a counter (16 hex characters, as uuid4's were,
# without a getrandom system call and a UUID object per call).
_RID_PREFIX = uuid.uuid4().hex[:8]
_RID_COUNTER = itertools.count(1)

# Above this many JSON bytes in one request, the boundary's checks run off the event loop.
_OFFLOAD_JSON_BYTES = 256 * 1024


def _boundary(servicer: object) -> Boundary | None:
    # app.start gives every servicer the sidecar's one Boundary (attribute `boundary`).
    found = getattr(servicer, "boundary", None)
    return found if isinstance(found, Boundary) else None


async def _admit(boundary: Boundary | None, method: str, namespace: str, request: Any) -> None:
    """The input boundary: the whole request is checked before the handler (and any service) runs."""
    refuse_undecodable(request)
    if boundary is None:
        return
    # The encoded size (computed in C) bounds the JSON bytes: only a large request is walked to count them.
    if request.ByteSize() > _OFFLOAD_JSON_BYTES and boundary.json_bytes(request) > _OFFLOAD_JSON_BYTES:
        await asyncio.to_thread(boundary.admit, method, namespace, request)
    else:
        boundary.admit(method, namespace, request)


def _sessions(servicer: object) -> Sessions | None:
    # app.start gives every servicer the sidecar's one session service (attribute `sessions`).
    return getattr(servicer, "sessions", None)


def _session_of(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    for item in context.invocation_metadata() or ():
        if item[0] == SESSION_METADATA:
            return str(item[1])
    return ""


async def _enter(servicer: object, method: str, namespace: str,
                 context: grpc.aio.ServicerContext[Any, Any]) -> tuple[Sessions | None, str]:
    """The caller's session, refused when it ended (fencing); ('', None) for a call without one."""
    session_id = _session_of(context)
    sessions = _sessions(servicer)
    if not session_id or sessions is None or method in SESSION_METHODS:
        return None, ""
    await sessions.admit(namespace, session_id)
    return sessions, session_id


async def _learn(sessions: Sessions | None, session_id: str, method: str, namespace: str, request: Any,
                 response: Any) -> None:
    """Records the lease owners a successful call named against its session, before it answers."""
    owners = OWNERS.get(method)
    if sessions is not None and owners is not None:
        await sessions.learn(namespace, owners(request, response), session_id)


def _begin(context: grpc.aio.ServicerContext[Any, Any], auth: Authenticator, method: str) -> str:
    """The caller's namespace, once its token is known and its role allows the method."""
    metadata = context.invocation_metadata()
    rid = ""
    for item in metadata or ():
        if item[0] == "x-request-id":
            rid = str(item[1])[:64]
    request_id_var.set(rid or f"{_RID_PREFIX}{next(_RID_COUNTER) & 0xFFFFFFFF:08x}")
    instance_key_var.set("")
    namespace, _ = auth.authorize(metadata, method)
    namespace_var.set(namespace)
    return namespace


def _failure(method: str, exc: BaseException) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, errors.DomainError):
        code = status_for(exc)
        level = logging.WARNING if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED) else logging.INFO
        log.log(level, "rpc refused", extra={"method": method, "code": code.name, "error": str(exc)})
        return code, str(exc)
    log.error("rpc failed unexpectedly", exc_info=exc, extra={"method": method})
    return grpc.StatusCode.INTERNAL, "internal error in the durable sidecar; see its log"


def unary(method: str) -> Callable[
    [Callable[[Any, Req, str], Awaitable[Resp]]],
    Callable[[Any, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]],
]:
    """Wraps `handler(self, request, namespace)`; the handler never sees the gRPC context."""

    def wrap(handler: Callable[[Any, Req, str], Awaitable[Resp]]) -> Callable[
        [Any, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]
    ]:
        @functools.wraps(handler)
        async def run(self: HasAuth, request: Req, context: grpc.aio.ServicerContext[Req, Resp]) -> Resp:
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            message = namespace = ""
            span = telemetry.start_rpc(method, context.invocation_metadata())
            try:
                namespace = _begin(context, self.auth, method)
                boundary = _boundary(self)
                await _admit(boundary, method, namespace, request)
                sessions, session_id = await _enter(self, method, namespace, context)
                response = await handler(self, request, namespace)
                await _learn(sessions, session_id, method, namespace, request, response)
                if boundary is not None:
                    boundary.seal(method, namespace, response)
                return response
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED  # the client went away or its deadline passed
                raise
            except Exception as exc:  # noqa: BLE001 - mapped below, never leaked
                code, message = _failure(method, exc)
            finally:
                metrics.RPC_TOTAL.labels(method, code.name).inc()
                metrics.RPC_SECONDS.labels(method).observe(time.perf_counter() - started)
                telemetry.end_rpc(span, namespace=namespace, request=request, code=code, message=message)
            await context.abort(code, message)
            raise AssertionError("abort raises")

        return run

    return wrap


def server_stream(method: str, *, watch: bool = True) -> Callable[
    [Callable[[Any, Req, str], AsyncIterator[Resp]]],
    Callable[[Any, Req, grpc.aio.ServicerContext[Req, Resp]], AsyncIterator[Resp]],
]:
    def wrap(handler: Callable[[Any, Req, str], AsyncIterator[Resp]]) -> Callable[
        [Any, Req, grpc.aio.ServicerContext[Req, Resp]], AsyncIterator[Resp]
    ]:
        @functools.wraps(handler)
        async def run(self: HasAuth, request: Req, context: grpc.aio.ServicerContext[Req, Resp]) -> AsyncIterator[Resp]:
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            message = namespace = ""
            span = telemetry.start_rpc(method, context.invocation_metadata())
            try:
                namespace = _begin(context, self.auth, method)
                boundary = _boundary(self)
                await _admit(boundary, method, namespace, request)
                sessions, session_id = await _enter(self, method, namespace, context)
                if sessions is not None:
                    live = sessions  # bound for the closure below (mypy: not None)
                    caller_live.set(lambda: not live.ended_here(namespace, session_id))
                # One tenant's watch streams are limited so they cannot slow the other namespaces (a download
                # is no watch: it ends once its file is sent).
                with (boundary.streams.stream(namespace) if boundary is not None and watch
                      else contextlib.nullcontext()):
                    async for item in handler(self, request, namespace):
                        await _learn(sessions, session_id, method, namespace, request, item)
                        if sessions is not None and sessions.ended_here(namespace, session_id):
                            # Its owners were just freed (their session had ended): the process watches again
                            # in its new session, and what this item claimed is free for a live one.
                            raise errors.FailedPrecondition(
                                f"session ended, so this stream stops and what it last claimed was freed; open it "
                                f"again in a new session (session {session_id})")
                        yield item
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except Exception as exc:  # noqa: BLE001 - mapped below, never leaked
                code, message = _failure(method, exc)
            finally:
                metrics.RPC_TOTAL.labels(method, code.name).inc()
                metrics.RPC_SECONDS.labels(method).observe(time.perf_counter() - started)
                telemetry.end_rpc(span, namespace=namespace, request=request, code=code, message=message)
            if code is not grpc.StatusCode.OK:
                await context.abort(code, message)

        return run

    return wrap


def client_stream(method: str) -> Callable[
    [Callable[[Any, AsyncIterator[Req], str], Awaitable[Resp]]],
    Callable[[Any, AsyncIterator[Req], grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]],
]:
    """Wraps `handler(self, requests, namespace)` of a client-streaming method (FileService.UploadFile): the
    caller is authorized before the first message is read, and each message is refused if it is undecodable."""

    def wrap(handler: Callable[[Any, AsyncIterator[Req], str], Awaitable[Resp]]) -> Callable[
        [Any, AsyncIterator[Req], grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]
    ]:
        @functools.wraps(handler)
        async def run(self: HasAuth, requests: AsyncIterator[Req],
                      context: grpc.aio.ServicerContext[Req, Resp]) -> Resp:
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            message = namespace = ""
            span = telemetry.start_rpc(method, context.invocation_metadata())

            async def decoded() -> AsyncIterator[Req]:
                async for request in requests:
                    refuse_undecodable(request)
                    yield request

            try:
                namespace = _begin(context, self.auth, method)
                return await handler(self, decoded(), namespace)
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED  # the client went away mid-stream: nothing was stored
                raise
            except Exception as exc:  # noqa: BLE001 - mapped below, never leaked
                code, message = _failure(method, exc)
            finally:
                metrics.RPC_TOTAL.labels(method, code.name).inc()
                metrics.RPC_SECONDS.labels(method).observe(time.perf_counter() - started)
                telemetry.end_rpc(span, namespace=namespace, request=None, code=code, message=message)
            await context.abort(code, message)
            raise AssertionError("abort raises")

        return run

    return wrap
