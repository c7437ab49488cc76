"""SessionService servicer, and which lease owners each call names (recorded against the caller's session)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from durable.v1 import session_pb2, session_pb2_grpc

from ..services.sessions import SessionService
from ..stores.sessions import SessionRow
from . import convert
from .auth import Authenticator
from .rpc import server_stream, unary


def session(row: SessionRow) -> session_pb2.Session:
    return session_pb2.Session(session_id=row.session_id, host=row.host, pid=row.pid, mode=row.mode,
                               client=row.client, started_at=convert.ts(row.started_at),
                               last_heartbeat_at=convert.ts(row.last_heartbeat_at), ended_at=convert.ts(row.ended_at),
                               end_reason=row.end_reason, leases_freed=row.leases_freed)


class SessionServicer(session_pb2_grpc.SessionServiceServicer):
    def __init__(self, service: SessionService, auth: Authenticator, stopping: asyncio.Event) -> None:
        self.service = service
        self.auth = auth
        self.stopping = stopping

    @unary("OpenSession")
    async def OpenSession(self, request: session_pb2.OpenSessionRequest, ns: str) -> session_pb2.OpenSessionResponse:  # noqa: N802
        row = await self.service.open(ns, host=request.host, pid=request.pid, mode=request.mode,
                                      client=request.client)
        return session_pb2.OpenSessionResponse(session=session(row),
                                               heartbeat_interval_ms=round(self.service.heartbeat_seconds * 1000),
                                               grace_ms=round(self.service.grace_seconds * 1000))

    @unary("Heartbeat")
    async def Heartbeat(self, request: session_pb2.HeartbeatRequest, ns: str) -> session_pb2.HeartbeatResponse:  # noqa: N802
        ended, reason = await self.service.heartbeat(ns, request.session_id, list(request.released_owners),
                                                     list(request.running_owners))
        return session_pb2.HeartbeatResponse(ended=ended, end_reason=reason)

    @server_stream("WatchSession")
    async def WatchSession(self, request: session_pb2.WatchSessionRequest, ns: str) -> AsyncIterator[session_pb2.WatchSessionResponse]:  # noqa: N802
        async for ended, reason in self.service.watch(ns, request.session_id, self.stopping):
            yield session_pb2.WatchSessionResponse(ended=ended, end_reason=reason)

    @unary("CloseSession")
    async def CloseSession(self, request: session_pb2.CloseSessionRequest, ns: str) -> session_pb2.CloseSessionResponse:  # noqa: N802
        return session_pb2.CloseSessionResponse(session=session(await self.service.close(ns, request.session_id)))

    @unary("ListSessions")
    async def ListSessions(self, request: session_pb2.ListSessionsRequest, ns: str) -> session_pb2.ListSessionsResponse:  # noqa: N802
        rows = await self.service.list_sessions(ns, page_size=request.page_size)
        return session_pb2.ListSessionsResponse(sessions=[session(r) for r in rows])
