"""VersionService servicer."""

from __future__ import annotations

from durable.v1 import version_pb2, version_pb2_grpc

from ..domain import MoveSelector, Page
from ..services.versions import VersionService
from ..validation import page_size
from . import convert
from .auth import Authenticator
from .instances import statuses
from .rpc import unary


class VersionServicer(version_pb2_grpc.VersionServiceServicer):
    def __init__(self, service: VersionService, auth: Authenticator) -> None:
        self.service = service
        self.auth = auth

    @unary("RegisterVersion")
    async def RegisterVersion(self, request: version_pb2.RegisterVersionRequest, ns: str) -> version_pb2.RegisterVersionResponse:  # noqa: N802
        registered = await self.service.register(
            ns, request.workflow_id, request.definition_json, n8n_version_id=request.n8n_version_id,
            label=request.label, note=request.note, actor=request.actor,
        )
        return version_pb2.RegisterVersionResponse(version=convert.version(registered.version),
                                                   created=registered.created)

    @unary("SyncVersionFromN8n")
    async def SyncVersionFromN8n(self, request: version_pb2.SyncVersionFromN8nRequest, ns: str) -> version_pb2.SyncVersionFromN8nResponse:  # noqa: N802
        registered = await self.service.sync_from_n8n(ns, request.workflow_id, actor=request.actor)
        return version_pb2.SyncVersionFromN8nResponse(version=convert.version(registered.version),
                                                      created=registered.created)

    @unary("GetVersion")
    async def GetVersion(self, request: version_pb2.GetVersionRequest, ns: str) -> version_pb2.GetVersionResponse:  # noqa: N802
        found = await self.service.get(ns, request.workflow_id, request.version)
        return version_pb2.GetVersionResponse(version=convert.version(found))

    @unary("ListVersions")
    async def ListVersions(self, request: version_pb2.ListVersionsRequest, ns: str) -> version_pb2.ListVersionsResponse:  # noqa: N802
        rows, token = await self.service.list_versions(ns, request.workflow_id,
                                                       Page(page_size(request.page_size), request.page_token))
        return version_pb2.ListVersionsResponse(versions=[convert.version(v) for v in rows], next_page_token=token)

    @unary("MoveInstances")
    async def MoveInstances(self, request: version_pb2.MoveInstancesRequest, ns: str) -> version_pb2.MoveInstancesResponse:  # noqa: N802
        sel = request.selector
        moves = await self.service.move_instances(
            ns,
            MoveSelector(workflow_id=sel.workflow_id, instance_keys=tuple(sel.instance_keys),
                         statuses=statuses(list(sel.statuses)), from_version=sel.from_version),
            to_version=request.to_version, dry_run=request.dry_run, reason=request.reason, actor=request.actor,
        )
        return version_pb2.MoveInstancesResponse(moves=[convert.instance_move(m) for m in moves],
                                                 dry_run=request.dry_run)

    @unary("ListChangeLog")
    async def ListChangeLog(self, request: version_pb2.ListChangeLogRequest, ns: str) -> version_pb2.ListChangeLogResponse:  # noqa: N802
        rows, token = await self.service.change_log(ns, request.workflow_id, request.instance_key,
                                                    Page(page_size(request.page_size), request.page_token))
        return version_pb2.ListChangeLogResponse(entries=[convert.change(e) for e in rows], next_page_token=token)
