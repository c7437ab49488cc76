"""CheckpointService servicer."""

from __future__ import annotations

from durable.v1 import checkpoint_pb2, checkpoint_pb2_grpc

from ..domain import InstanceRef, Page, PrunePolicy
from ..errors import InvalidArgument
from ..services.checkpoints import CheckpointService, CompleteKey, SaveItem
from ..validation import page_size
from . import convert
from .auth import Authenticator
from .rpc import unary


def _adds_step_result(index: int, mode: int) -> bool:
    if mode in (checkpoint_pb2.STATE_MODE_UNSPECIFIED, checkpoint_pb2.STATE_MODE_REPLACE):
        return False
    if mode == checkpoint_pb2.STATE_MODE_ADD_STEP_RESULT:
        return True
    raise InvalidArgument(f"items[{index}]: state_mode {mode} is not a StateMode this server knows")


class CheckpointServicer(checkpoint_pb2_grpc.CheckpointServiceServicer):
    def __init__(self, service: CheckpointService, auth: Authenticator) -> None:
        self.service = service
        self.auth = auth

    @unary("SaveCheckpoints")
    async def SaveCheckpoints(self, request: checkpoint_pb2.SaveCheckpointsRequest, ns: str) -> checkpoint_pb2.SaveCheckpointsResponse:  # noqa: N802
        items = [
            SaveItem(
                workflow_id=i.workflow_id, instance_key=i.instance_key, step_name=i.step_name, state=i.state_json,
                execution_id=i.execution_id, node_name=i.node_name,
                expected_sequence=i.expected_sequence if i.HasField("expected_sequence") else None,
                lease_seconds=i.lease_seconds,
                add_step_result=_adds_step_result(n, i.state_mode),
                complete_key=CompleteKey(scope=i.complete_key.scope, key=i.complete_key.key,
                                         attempt=i.complete_key.attempt, result_json=i.complete_key.result_json)
                if i.HasField("complete_key") else None,
                json_checked=True,  # the boundary checked every *_json field of the request (transport/rpc.py)
            )
            for n, i in enumerate(request.items)
        ]
        saved = await self.service.save(ns, items)
        return checkpoint_pb2.SaveCheckpointsResponse(
            results=[
                checkpoint_pb2.SaveCheckpointResult(
                    checkpoint=convert.checkpoint(s.checkpoint), deduplicated=s.deduplicated,
                    state_json=s.state or b"",
                    completed_key=convert.idempotency_key(s.completed_key) if s.completed_key is not None else None,
                )
                for s in saved
            ]
        )

    @unary("GetLatestCheckpoint")
    async def GetLatestCheckpoint(self, request: checkpoint_pb2.GetLatestCheckpointRequest, ns: str) -> checkpoint_pb2.GetLatestCheckpointResponse:  # noqa: N802
        cp = await self.service.latest(InstanceRef(ns, request.workflow_id, request.instance_key),
                                       include_state=request.include_state)
        return checkpoint_pb2.GetLatestCheckpointResponse(checkpoint=convert.checkpoint(cp))

    @unary("GetCheckpoint")
    async def GetCheckpoint(self, request: checkpoint_pb2.GetCheckpointRequest, ns: str) -> checkpoint_pb2.GetCheckpointResponse:  # noqa: N802
        cp = await self.service.get(InstanceRef(ns, request.workflow_id, request.instance_key), request.sequence,
                                    include_state=request.include_state)
        return checkpoint_pb2.GetCheckpointResponse(checkpoint=convert.checkpoint(cp))

    @unary("ListCheckpoints")
    async def ListCheckpoints(self, request: checkpoint_pb2.ListCheckpointsRequest, ns: str) -> checkpoint_pb2.ListCheckpointsResponse:  # noqa: N802
        rows, token = await self.service.list_checkpoints(
            InstanceRef(ns, request.workflow_id, request.instance_key),
            Page(page_size(request.page_size), request.page_token),
            include_state=request.include_state,
        )
        return checkpoint_pb2.ListCheckpointsResponse(checkpoints=[convert.checkpoint_pb(r) for r in rows],
                                                      next_page_token=token)

    @unary("PruneCheckpoints")
    async def PruneCheckpoints(self, request: checkpoint_pb2.PruneCheckpointsRequest, ns: str) -> checkpoint_pb2.PruneCheckpointsResponse:  # noqa: N802
        result = await self.service.prune(ns, PrunePolicy(
            workflow_id=request.workflow_id, instance_key=request.instance_key, keep_last=request.keep_last,
            older_than_seconds=request.older_than_seconds, dry_run=request.dry_run,
        ))
        return checkpoint_pb2.PruneCheckpointsResponse(deleted_count=result.deleted_count,
                                                       instance_count=result.instance_count)
