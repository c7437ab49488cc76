"""LimitService servicer: concurrency per key, rate limits and debounce (services/limits.py)."""

from __future__ import annotations

from durable.v1 import limits_pb2, limits_pb2_grpc

from ..domain import InstanceRef, Page
from ..services.limit_terms import Answer, Keep, Outcome, Over, SectionRate
from ..services.limits import LimitService
from ..stores.limits import KeyState
from ..validation import page_size
from . import convert
from .auth import Authenticator
from .rpc import unary

_OVER = {limits_pb2.OVER_LIMIT_UNSPECIFIED: Over.WAIT, limits_pb2.OVER_LIMIT_WAIT: Over.WAIT,
         limits_pb2.OVER_LIMIT_REFUSE: Over.REFUSE}
_KEEP = {limits_pb2.DEBOUNCE_KEEP_UNSPECIFIED: Keep.LAST, limits_pb2.DEBOUNCE_KEEP_LAST: Keep.LAST,
         limits_pb2.DEBOUNCE_KEEP_FIRST: Keep.FIRST}
_ACQUIRE = {Outcome.ACQUIRED: limits_pb2.ACQUIRE_OUTCOME_ACQUIRED, Outcome.WAITING: limits_pb2.ACQUIRE_OUTCOME_WAITING,
            Outcome.BUSY: limits_pb2.ACQUIRE_OUTCOME_BUSY}
_THROTTLE = {Outcome.ALLOWED: limits_pb2.THROTTLE_OUTCOME_ALLOWED, Outcome.WAITING: limits_pb2.THROTTLE_OUTCOME_WAITING,
             Outcome.BUSY: limits_pb2.THROTTLE_OUTCOME_BUSY}
_DEBOUNCE = {Outcome.WAITING: limits_pb2.DEBOUNCE_OUTCOME_WAITING, Outcome.RUN: limits_pb2.DEBOUNCE_OUTCOME_RUN,
             Outcome.DEBOUNCED: limits_pb2.DEBOUNCE_OUTCOME_DEBOUNCED}
_KINDS = {limits_pb2.LIMIT_KIND_CONCURRENCY: "concurrency", limits_pb2.LIMIT_KIND_RATE: "rate",
          limits_pb2.LIMIT_KIND_DEBOUNCE: "debounce"}
_KIND_TO_PB = {name: kind for kind, name in _KINDS.items()}


def _key_state(k: KeyState) -> limits_pb2.LimitKeyState:
    limit = k.row.limit
    return limits_pb2.LimitKeyState(
        kind=_KIND_TO_PB[limit.kind], limit_name=limit.name, limit_key=limit.key,
        holders=k.counts.get("holding", 0), waiters=k.counts.get("waiting", 0), next_at=convert.ts(k.row.next_at),
        updated_at=convert.ts(k.row.updated_at),
        entries=[limits_pb2.LimitEntry(workflow_id=e.workflow_id, instance_key=e.instance_key, state=e.state,
                                       owner=e.owner, since=convert.ts(e.created_at), at=convert.ts(e.at))
                 for e in k.entries])


class LimitServicer(limits_pb2_grpc.LimitServiceServicer):
    def __init__(self, service: LimitService, auth: Authenticator) -> None:
        self.service = service
        self.auth = auth

    @unary("AcquireSlot")
    async def AcquireSlot(self, request: limits_pb2.AcquireSlotRequest, ns: str) -> limits_pb2.AcquireSlotResponse:  # noqa: N802
        a = await self.service.acquire(
            InstanceRef(ns, request.workflow_id, request.instance_key), execution_id=request.execution_id,
            limit_name=request.limit_name, limit_key=request.limit_key, max_holders=request.max_holders,
            over=_OVER[request.over_limit], max_wait_ms=request.max_wait_ms,
            rate=SectionRate(request.rate.limit, request.rate.period_ms, request.rate.burst, request.rate.calls)
            if request.HasField("rate") else None)
        return limits_pb2.AcquireSlotResponse(outcome=_ACQUIRE[a.outcome], holders=a.holders, waiters=a.waiters,
                                              position=a.position, instance=convert.instance(a.instance),
                                              wait_ms=a.wait_ms, slot_at=convert.ts(a.at))

    @unary("ReleaseSlot")
    async def ReleaseSlot(self, request: limits_pb2.ReleaseSlotRequest, ns: str) -> limits_pb2.ReleaseSlotResponse:  # noqa: N802
        r = await self.service.release(InstanceRef(ns, request.workflow_id, request.instance_key),
                                       execution_id=request.execution_id, limit_name=request.limit_name,
                                       limit_key=request.limit_key)
        return limits_pb2.ReleaseSlotResponse(released=r.released, granted=r.granted, holders=r.holders,
                                          waiters=r.waiters)

    @unary("Throttle")
    async def Throttle(self, request: limits_pb2.ThrottleRequest, ns: str) -> limits_pb2.ThrottleResponse:  # noqa: N802
        a: Answer = await self.service.throttle(
            InstanceRef(ns, request.workflow_id, request.instance_key), execution_id=request.execution_id,
            limit_name=request.limit_name, limit_key=request.limit_key, limit=request.limit,
            period_ms=request.period_ms, burst=request.burst, max_wait_ms=request.max_wait_ms,
            over=_OVER[request.over_limit], calls=request.calls)
        return limits_pb2.ThrottleResponse(outcome=_THROTTLE[a.outcome], wait_ms=a.wait_ms, slot_at=convert.ts(a.at),
                                           instance=convert.instance(a.instance))

    @unary("Debounce")
    async def Debounce(self, request: limits_pb2.DebounceRequest, ns: str) -> limits_pb2.DebounceResponse:  # noqa: N802
        a = await self.service.debounce(
            InstanceRef(ns, request.workflow_id, request.instance_key), execution_id=request.execution_id,
            limit_name=request.limit_name, limit_key=request.limit_key, quiet_ms=request.quiet_ms,
            max_wait_ms=request.max_wait_ms, keep=_KEEP[request.keep])
        return limits_pb2.DebounceResponse(outcome=_DEBOUNCE[a.outcome], decide_at=convert.ts(a.at),
                                           instance=convert.instance(a.instance))

    @unary("ListLimitKeys")
    async def ListLimitKeys(self, request: limits_pb2.ListLimitKeysRequest,  # noqa: N802
                            ns: str) -> limits_pb2.ListLimitKeysResponse:
        keys, token = await self.service.list_keys(ns, kind=_KINDS.get(request.kind, ""),
                                                   limit_name=request.limit_name,
                                                   page=Page(page_size(request.page_size), request.page_token))
        return limits_pb2.ListLimitKeysResponse(keys=[_key_state(k) for k in keys], next_page_token=token)
