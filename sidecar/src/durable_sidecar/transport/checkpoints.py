"""CheckpointService servicer."""

from __future__ import annotations

from datetime import datetime

from durable.v1 import checkpoint_pb2, checkpoint_pb2_grpc
from google.protobuf.timestamp_pb2 import Timestamp

from ..domain import InstanceRef, Page, PrunePolicy, SavedCheckpoint
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


def _save_response(saved: list[SavedCheckpoint]) -> checkpoint_pb2.SaveCheckpointsResponse:
    """The reply, each result's checkpoint filled in place (convert.checkpoint_pb's fields).

    A hundred results: a Checkpoint message built apart and copied into its result cost twice the time, and
    the items of a batch share one creation time, converted once.
    """
    response = checkpoint_pb2.SaveCheckpointsResponse()
    add = response.results.add
    stamps: dict[datetime, Timestamp | None] = {}
    for s in saved:
        cp = s.checkpoint
        result = add(deduplicated=s.deduplicated, state_json=s.state or b"")
        out = result.checkpoint
        out.workflow_id = cp.workflow_id
        out.instance_key = cp.instance_key
        out.sequence = cp.sequence
        out.step_name = cp.step_name
        out.state_json = cp.state or b""
        out.sha256 = cp.sha256
        out.size_bytes = cp.size_bytes
        out.stored_bytes = cp.stored_bytes
        out.execution_id = cp.execution_id
        out.node_name = cp.node_name
        if cp.file_count:
            out.file_count = cp.file_count
        stamp = stamps.get(cp.created_at)
        if stamp is None:
            stamp = stamps[cp.created_at] = convert.ts(cp.created_at)
        if stamp is not None:
            out.created_at.CopyFrom(stamp)
        if s.completed_key is not None:
            result.completed_key.CopyFrom(convert.idempotency_key(s.completed_key))
        if s.completed_instance is not None:
            result.completed_instance.CopyFrom(convert.instance(s.completed_instance))
        if s.next_claim is not None:
            result.next_claim.CopyFrom(convert.claim_result(s.next_claim))
    return response


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
                complete_instance=i.complete_instance,
                claim_next=convert.claim_item(i.claim_next) if i.HasField("claim_next") else None,
                search_fields=i.search_fields_json,
                files=convert.file_refs(i.files) if i.files else (),
                json_checked=True,  # the boundary checked every *_json field of the request (transport/rpc.py)
            )
            for n, i in enumerate(request.items)
        ]
        saved = await self.service.save(ns, items)
        return _save_response(saved)

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
