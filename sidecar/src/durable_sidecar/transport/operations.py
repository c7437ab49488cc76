"""OperationService servicer: bulk actions by filter (services/operations.py)."""

from __future__ import annotations

from durable.v1 import operations_pb2, operations_pb2_grpc

from ..domain import InstanceFilter, Page
from ..domain_operations import BulkAction, Operation, OperationStatus
from ..errors import InvalidArgument
from ..services.operations import OperationService
from ..validation import page_size
from . import convert
from .auth import Authenticator, Role, caller_role
from .instances import statuses
from .rpc import unary

_ACTIONS = {operations_pb2.BULK_ACTION_RETRY: BulkAction.RETRY, operations_pb2.BULK_ACTION_RESUME: BulkAction.RESUME,
            operations_pb2.BULK_ACTION_CANCEL: BulkAction.CANCEL, operations_pb2.BULK_ACTION_MOVE: BulkAction.MOVE,
            operations_pb2.BULK_ACTION_REPLAY: BulkAction.REPLAY}
_ACTION_TO_PB = {a: pb for pb, a in _ACTIONS.items()}
_STATUS_TO_PB = {OperationStatus.RUNNING: operations_pb2.OPERATION_STATUS_RUNNING,
                 OperationStatus.PAUSED: operations_pb2.OPERATION_STATUS_PAUSED,
                 OperationStatus.CANCELLED: operations_pb2.OPERATION_STATUS_CANCELLED,
                 OperationStatus.COMPLETED: operations_pb2.OPERATION_STATUS_COMPLETED}


def selector(msg: operations_pb2.BulkSelector) -> InstanceFilter:
    return convert.instance_filter(msg, statuses=statuses(list(msg.statuses)), stalled_only=msg.stalled_only)


def operation(op: Operation) -> operations_pb2.Operation:
    return operations_pb2.Operation(
        id=op.id, action=_ACTION_TO_PB[op.action], status=_STATUS_TO_PB[op.status], selector_json=op.selector_json,
        actor=op.actor, reason=op.reason, matched_at_start=op.matched_at_start, acted=op.acted, skipped=op.skipped,
        created_at=convert.ts(op.created_at), updated_at=convert.ts(op.updated_at),
        finished_at=convert.ts(op.finished_at), last_workflow_id=op.last_workflow_id,
        last_instance_key=op.last_instance_key, last_skip=op.last_skip, to_version=op.to_version,
        replay_from_step=op.replay_from_step)


class OperationServicer(operations_pb2_grpc.OperationServiceServicer):
    def __init__(self, service: OperationService, auth: Authenticator) -> None:
        self.service = service
        self.auth = auth

    @unary("PreviewOperation")
    async def PreviewOperation(self, request: operations_pb2.PreviewOperationRequest, ns: str) -> operations_pb2.PreviewOperationResponse:  # noqa: N802
        count, sample = await self.service.preview(ns, selector(request.selector), sample_size=request.sample_size)
        return operations_pb2.PreviewOperationResponse(count=count, sample=[convert.instance(i) for i in sample])

    @unary("StartOperation")
    async def StartOperation(self, request: operations_pb2.StartOperationRequest, ns: str) -> operations_pb2.StartOperationResponse:  # noqa: N802
        action = _ACTIONS.get(request.action)
        if action is None:
            raise InvalidArgument("action is required: BULK_ACTION_RETRY, BULK_ACTION_RESUME, BULK_ACTION_CANCEL, "
                                  "BULK_ACTION_MOVE or BULK_ACTION_REPLAY")
        op = await self.service.start(ns, action, selector(request.selector), actor=request.actor,
                                      reason=request.reason, to_version=request.to_version,
                                      replay_from_step=request.replay_from_step,
                                      may_move=caller_role.get() >= Role.ADMIN)
        return operations_pb2.StartOperationResponse(operation=operation(op))

    @unary("GetOperation")
    async def GetOperation(self, request: operations_pb2.GetOperationRequest, ns: str) -> operations_pb2.GetOperationResponse:  # noqa: N802
        return operations_pb2.GetOperationResponse(operation=operation(await self.service.get(ns, request.id)))

    @unary("ListOperations")
    async def ListOperations(self, request: operations_pb2.ListOperationsRequest, ns: str) -> operations_pb2.ListOperationsResponse:  # noqa: N802
        ops, token = await self.service.list(ns, Page(page_size(request.page_size), request.page_token))
        return operations_pb2.ListOperationsResponse(operations=[operation(o) for o in ops], next_page_token=token)

    @unary("PauseOperation")
    async def PauseOperation(self, request: operations_pb2.OperationActionRequest, ns: str) -> operations_pb2.OperationActionResponse:  # noqa: N802
        return operations_pb2.OperationActionResponse(
            operation=operation(await self.service.pause(ns, request.id, actor=request.actor)))

    @unary("ContinueOperation")
    async def ContinueOperation(self, request: operations_pb2.OperationActionRequest, ns: str) -> operations_pb2.OperationActionResponse:  # noqa: N802
        return operations_pb2.OperationActionResponse(
            operation=operation(await self.service.continue_(ns, request.id, actor=request.actor)))

    @unary("CancelOperation")
    async def CancelOperation(self, request: operations_pb2.OperationActionRequest, ns: str) -> operations_pb2.OperationActionResponse:  # noqa: N802
        return operations_pb2.OperationActionResponse(
            operation=operation(await self.service.cancel(ns, request.id, actor=request.actor)))
