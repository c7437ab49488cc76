"""EventService and RecoveryService servicers."""

from __future__ import annotations

from durable.v1 import events_pb2, events_pb2_grpc

from ..domain import AwaitOutcome, InstanceRef, Page, SignalOutcome
from ..services.events import EventService
from ..services.purge import PurgeService
from ..services.recovery import RecoveryService
from ..services.replay import ReplayService
from ..validation import page_size
from . import convert
from .auth import Authenticator, Role, caller_role
from .rpc import unary

_AWAIT_TO_PB = {
    AwaitOutcome.WAITING: events_pb2.AWAIT_OUTCOME_WAITING,
    AwaitOutcome.RECEIVED: events_pb2.AWAIT_OUTCOME_RECEIVED,
}
_SIGNAL_TO_PB = {
    SignalOutcome.DELIVERED: events_pb2.SIGNAL_OUTCOME_DELIVERED,
    SignalOutcome.STORED: events_pb2.SIGNAL_OUTCOME_STORED,
    SignalOutcome.DUPLICATE: events_pb2.SIGNAL_OUTCOME_DUPLICATE,
    SignalOutcome.STARTED: events_pb2.SIGNAL_OUTCOME_STARTED,
}


class EventServicer(events_pb2_grpc.EventServiceServicer):
    def __init__(self, service: EventService, auth: Authenticator) -> None:
        self.service = service
        self.auth = auth

    @unary("AwaitEvent")
    async def AwaitEvent(self, request: events_pb2.AwaitEventRequest, ns: str) -> events_pb2.AwaitEventResponse:  # noqa: N802
        which = request.WhichOneof("timeout")
        outcome, inst, event = await self.service.await_event(
            InstanceRef(ns, request.workflow_id, request.instance_key), execution_id=request.execution_id,
            event_name=request.event_name,
            deadline=convert.from_ts(request.deadline) if which == "deadline" else None,
            timeout_seconds=request.timeout_seconds if which == "timeout_seconds" else None,
        )
        return events_pb2.AwaitEventResponse(outcome=_AWAIT_TO_PB[outcome], instance=convert.instance(inst),
                                             event=convert.event(event))

    @unary("SignalInstance")
    async def SignalInstance(self, request: events_pb2.SignalInstanceRequest, ns: str) -> events_pb2.SignalInstanceResponse:  # noqa: N802
        outcome, event, inst = await self.service.signal(
            InstanceRef(ns, request.workflow_id, request.instance_key), event_name=request.event_name,
            dedupe_id=request.dedupe_id, payload_json=request.payload_json or None, sender=request.sender,
            start_if_absent=request.start_if_absent, start_item_json=request.start_item_json,
        )
        return events_pb2.SignalInstanceResponse(outcome=_SIGNAL_TO_PB[outcome], event=convert.event(event),
                                                 instance=convert.instance(inst))

    @unary("ListEvents")
    async def ListEvents(self, request: events_pb2.ListEventsRequest, ns: str) -> events_pb2.ListEventsResponse:  # noqa: N802
        rows, token = await self.service.list_events(
            InstanceRef(ns, request.workflow_id, request.instance_key), pending_only=request.pending_only,
            page=Page(page_size(request.page_size), request.page_token),
        )
        return events_pb2.ListEventsResponse(events=[convert.event_pb(e) for e in rows], next_page_token=token)


class RecoveryServicer(events_pb2_grpc.RecoveryServiceServicer):
    def __init__(self, service: RecoveryService, auth: Authenticator, purge: PurgeService,
                 replay: ReplayService) -> None:
        self.service = service
        self.auth = auth
        self.purge = purge
        self.replay = replay

    @unary("RetryInstance")
    async def RetryInstance(self, request: events_pb2.RetryInstanceRequest, ns: str) -> events_pb2.RetryInstanceResponse:  # noqa: N802
        inst = await self.service.retry(InstanceRef(ns, request.workflow_id, request.instance_key),
                                        actor=request.actor, reason=request.reason)
        return events_pb2.RetryInstanceResponse(instance=convert.instance(inst))

    @unary("ResumeInstance")
    async def ResumeInstance(self, request: events_pb2.ResumeInstanceRequest, ns: str) -> events_pb2.ResumeInstanceResponse:  # noqa: N802
        inst = await self.service.resume(InstanceRef(ns, request.workflow_id, request.instance_key),
                                         actor=request.actor, reason=request.reason)
        return events_pb2.ResumeInstanceResponse(instance=convert.instance(inst))

    @unary("PurgeInstance")
    async def PurgeInstance(self, request: events_pb2.PurgeInstanceRequest, ns: str) -> events_pb2.PurgeInstanceResponse:  # noqa: N802
        inst, erased = await self.purge.purge_instance(InstanceRef(ns, request.workflow_id, request.instance_key),
                                                       actor=request.actor, reason=request.reason)
        return events_pb2.PurgeInstanceResponse(instance=convert.instance(inst),
                                                checkpoints_erased=len(erased.checkpoint_sequences),
                                                start_item_erased=erased.start_item,
                                                event_payloads_erased=erased.event_payloads)

    @unary("ReplayInstance")
    async def ReplayInstance(self, request: events_pb2.ReplayInstanceRequest, ns: str) -> events_pb2.ReplayInstanceResponse:  # noqa: N802
        fork, copied = await self.replay.replay(
            InstanceRef(ns, request.workflow_id, request.instance_key), from_sequence=request.from_sequence,
            to_version=request.to_version, actor=request.actor, reason=request.reason,
            may_move=caller_role.get() >= Role.ADMIN)
        return events_pb2.ReplayInstanceResponse(instance=convert.instance(fork), checkpoints_copied=copied)
