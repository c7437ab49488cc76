"""AuditService servicer: an instance's audit trail and instance counts (read-only)."""

from __future__ import annotations

from durable.v1 import audit_pb2, audit_pb2_grpc

from ..domain import InstanceEvent, InstanceRef, InstanceStatus, Page
from ..services.audit import AuditService
from ..validation import page_size
from . import convert
from .auth import Authenticator, caller_role
from .rpc import unary


def event(e: InstanceEvent) -> audit_pb2.InstanceEvent:
    return audit_pb2.InstanceEvent(id=e.id, kind=e.kind, actor=e.actor, execution_id=e.execution_id,
                                   detail=e.detail, created_at=convert.ts(e.created_at))


class AuditServicer(audit_pb2_grpc.AuditServiceServicer):
    def __init__(self, service: AuditService, auth: Authenticator) -> None:
        self.service = service
        self.auth = auth

    @unary("ListInstanceEvents")
    async def ListInstanceEvents(self, request: audit_pb2.ListInstanceEventsRequest, ns: str) -> audit_pb2.ListInstanceEventsResponse:  # noqa: N802
        rows, token = await self.service.list_events(InstanceRef(ns, request.workflow_id, request.instance_key),
                                                     Page(page_size(request.page_size), request.page_token))
        return audit_pb2.ListInstanceEventsResponse(events=[event(e) for e in rows], next_page_token=token)

    @unary("CountInstances")
    async def CountInstances(self, request: audit_pb2.CountInstancesRequest, ns: str) -> audit_pb2.CountInstancesResponse:  # noqa: N802
        counts = await self.service.count_instances(ns, convert.instance_filter(request))
        return audit_pb2.CountInstancesResponse(
            counts=[audit_pb2.StatusCount(status=convert.status(s), count=counts.by_status[s]) for s in InstanceStatus],
            stalled=counts.stalled, total=sum(counts.by_status.values()),
        )

    @unary("GetCaller")
    async def GetCaller(self, request: audit_pb2.GetCallerRequest, ns: str) -> audit_pb2.GetCallerResponse:  # noqa: N802
        return audit_pb2.GetCallerResponse(namespace=ns, role=caller_role.get().label)

    @unary("ListWorkflows")
    async def ListWorkflows(self, request: audit_pb2.ListWorkflowsRequest, ns: str) -> audit_pb2.ListWorkflowsResponse:  # noqa: N802
        rows, token = await self.service.list_workflows(ns, Page(page_size(request.page_size), request.page_token))
        return audit_pb2.ListWorkflowsResponse(workflows=[audit_pb2.WorkflowSummary(
            workflow_id=w.workflow_id, versions=w.versions, latest_version=w.latest_version,
            latest_label=w.latest_label, instances=w.instances) for w in rows], next_page_token=token)
