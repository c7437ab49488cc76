"""InstanceService servicer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from durable.v1 import instance_pb2, instance_pb2_grpc

from ..domain import InstanceRef, InstanceStatus, Page
from ..errors import InvalidArgument
from ..services.instances import InstanceService
from ..services.search_fields import SearchFieldService, fields_json
from ..services.sessions import SessionService
from ..validation import page_size
from . import convert
from .auth import Authenticator
from .rpc import server_stream, unary
from .sessions import session


def statuses(values: list[int]) -> tuple[InstanceStatus, ...]:
    try:
        return tuple(convert.STATUS_FROM_PB[v] for v in values)
    except KeyError:
        raise InvalidArgument("statuses contains an unknown status") from None


class InstanceServicer(instance_pb2_grpc.InstanceServiceServicer):
    def __init__(self, service: InstanceService, auth: Authenticator, stopping: asyncio.Event,
                 sessions: SessionService | None = None, search: SearchFieldService | None = None) -> None:
        self.service = service
        self.search = search
        self.auth = auth
        self.stopping = stopping
        # Who holds a lease: the n8n process of its owner (GetInstance.lease_holder).
        self.holders = sessions

    @unary("StartOrResume")
    async def StartOrResume(self, request: instance_pb2.StartOrResumeRequest, ns: str) -> instance_pb2.StartOrResumeResponse:  # noqa: N802
        result = await self.service.start_or_resume(
            InstanceRef(ns, request.workflow_id, request.instance_key),
            execution_id=request.execution_id,
            lease_seconds=request.lease_seconds,
            version_label=request.version_label,
            pinned_version=request.pinned_version,
            definition_json=request.definition_json,
            claim_token=request.claim_token,
            include_state=request.include_state,
            start_item_json=request.start_item_json,
            retry_policy=convert.retry_policy_from(request.retry_policy) if request.HasField("retry_policy") else None,
            claim_on_start=convert.claim_item(request.claim_on_start) if request.HasField("claim_on_start") else None,
            wait_seconds=request.wait_seconds,
            check_delivery=request.check_delivery,
            search_fields=request.search_fields_json,
            workflow_fingerprint=request.workflow_fingerprint,
        )
        return instance_pb2.StartOrResumeResponse(
            outcome=convert.OUTCOME_TO_PB[result.outcome],
            instance=convert.instance(result.instance),
            latest_checkpoint=convert.checkpoint(result.latest),
            current_version=result.current_version,
            version_mismatch=result.version_mismatch,
            bound_version=convert.version(result.bound) if result.bound is not None else None,
            start_item_json=result.start_item or b"",
            event=convert.event(result.event),
            wait_outcome=convert.reason(result.wait_outcome),
            start_claim=convert.claim_result(result.start_claim) if result.start_claim is not None else None,
        )

    @unary("GetInstance")
    async def GetInstance(self, request: instance_pb2.GetInstanceRequest, ns: str) -> instance_pb2.GetInstanceResponse:  # noqa: N802
        inst, latest = await self.service.get(InstanceRef(ns, request.workflow_id, request.instance_key))
        holder = None
        if inst.lease_owner and self.holders is not None:
            found = (await self.holders.holders(ns, [inst.lease_owner])).get(inst.lease_owner)
            holder = session(found) if found is not None else None
        return instance_pb2.GetInstanceResponse(instance=convert.instance(inst), latest_checkpoint=convert.checkpoint(latest),
                                                lease_holder=holder)

    @unary("ListInstances")
    async def ListInstances(self, request: instance_pb2.ListInstancesRequest, ns: str) -> instance_pb2.ListInstancesResponse:  # noqa: N802
        flt = convert.instance_filter(request, statuses=statuses(list(request.statuses)),
                                      stalled_only=request.stalled_only, sort_field=request.sort_by_field,
                                      sort_descending=request.sort_descending)
        rows, token = await self.service.list_instances(ns, flt, Page(page_size(request.page_size), request.page_token))
        return instance_pb2.ListInstancesResponse(instances=[convert.instance(r) for r in rows], next_page_token=token)

    @unary("SetSearchFields")
    async def SetSearchFields(self, request: instance_pb2.SetSearchFieldsRequest, ns: str) -> instance_pb2.SetSearchFieldsResponse:  # noqa: N802
        if self.search is None:
            raise InvalidArgument("search fields are not served here")
        fields = await self.search.set(InstanceRef(ns, request.workflow_id, request.instance_key), request.fields_json)
        return instance_pb2.SetSearchFieldsResponse(fields_json=fields_json(fields))

    @unary("CompleteInstance")
    async def CompleteInstance(self, request: instance_pb2.CompleteInstanceRequest, ns: str) -> instance_pb2.CompleteInstanceResponse:  # noqa: N802
        inst = await self.service.finish(
            InstanceRef(ns, request.workflow_id, request.instance_key), InstanceStatus.COMPLETED,
            actor=request.execution_id, result_json=request.result_json or None,
        )
        return instance_pb2.CompleteInstanceResponse(instance=convert.instance(inst))

    @unary("FailInstance")
    async def FailInstance(self, request: instance_pb2.FailInstanceRequest, ns: str) -> instance_pb2.FailInstanceResponse:  # noqa: N802
        inst = await self.service.finish(
            InstanceRef(ns, request.workflow_id, request.instance_key), InstanceStatus.FAILED,
            actor=request.execution_id, error_message=request.error_message, retry=request.retry,
            suspend=request.suspend,
        )
        return instance_pb2.FailInstanceResponse(instance=convert.instance(inst))

    @unary("CancelInstance")
    async def CancelInstance(self, request: instance_pb2.CancelInstanceRequest, ns: str) -> instance_pb2.CancelInstanceResponse:  # noqa: N802
        inst = await self.service.finish(
            InstanceRef(ns, request.workflow_id, request.instance_key), InstanceStatus.CANCELLED,
            actor=request.actor, error_message=request.reason,
        )
        return instance_pb2.CancelInstanceResponse(instance=convert.instance(inst))

    @unary("ScheduleWakeUp")
    async def ScheduleWakeUp(self, request: instance_pb2.ScheduleWakeUpRequest, ns: str) -> instance_pb2.ScheduleWakeUpResponse:  # noqa: N802
        which = request.WhichOneof("when")
        inst = await self.service.schedule_wake_up(
            InstanceRef(ns, request.workflow_id, request.instance_key),
            execution_id=request.execution_id,
            wake_at=convert.from_ts(request.wake_at) if which == "wake_at" else None,
            delay_seconds=request.delay_seconds if which == "delay_seconds" else None,
        )
        return instance_pb2.ScheduleWakeUpResponse(instance=convert.instance(inst))

    @unary("ClaimResumable")
    async def ClaimResumable(self, request: instance_pb2.ClaimResumableRequest, ns: str) -> instance_pb2.ClaimResumableResponse:  # noqa: N802
        claimed = await self.service.claim_resumable(
            ns, workflow_ids=list(request.workflow_ids), claimant=request.claimant,
            max_instances=request.max_instances, lease_seconds=request.lease_seconds,
        )
        return instance_pb2.ClaimResumableResponse(instances=[convert.resumable(c) for c in claimed])

    @server_stream("WatchResumable")
    async def WatchResumable(self, request: instance_pb2.WatchResumableRequest, ns: str) -> AsyncIterator[instance_pb2.WatchResumableResponse]:  # noqa: N802
        async for batch in self.service.watch_resumable(
            ns, workflow_ids=list(request.workflow_ids), claimant=request.claimant,
            max_instances=request.max_instances, lease_seconds=request.lease_seconds,
            poll_interval_ms=request.poll_interval_ms, stopping=self.stopping,
        ):
            yield instance_pb2.WatchResumableResponse(instances=[convert.resumable(c) for c in batch])
