"""IdempotencyService servicer."""

from __future__ import annotations

from durable.v1 import idempotency_pb2, idempotency_pb2_grpc

from ..domain import KeyFilter, KeyRef, KeyStatus, Page
from ..errors import InvalidArgument
from ..services.idempotency import IdempotencyService
from ..validation import page_size
from . import convert
from .auth import Authenticator
from .rpc import unary


def _statuses(values: list[int]) -> tuple[KeyStatus, ...]:
    try:
        return tuple(convert.KEY_STATUS_FROM_PB[v] for v in values)
    except KeyError:
        raise InvalidArgument("statuses contains an unknown status") from None


class IdempotencyServicer(idempotency_pb2_grpc.IdempotencyServiceServicer):
    def __init__(self, service: IdempotencyService, auth: Authenticator) -> None:
        self.service = service
        self.auth = auth

    @unary("Claim")
    async def Claim(self, request: idempotency_pb2.ClaimRequest, ns: str) -> idempotency_pb2.ClaimResponse:  # noqa: N802
        claimed = await self.service.claim(ns, [convert.claim_item(i) for i in request.items])
        return idempotency_pb2.ClaimResponse(results=[convert.claim_result(c) for c in claimed])

    @unary("Complete")
    async def Complete(self, request: idempotency_pb2.CompleteRequest, ns: str) -> idempotency_pb2.CompleteResponse:  # noqa: N802
        key = await self.service.complete(KeyRef(ns, request.scope, request.key), attempt=request.attempt,
                                          result_json=request.result_json)
        return idempotency_pb2.CompleteResponse(key=convert.idempotency_key(key))

    @unary("Release")
    async def Release(self, request: idempotency_pb2.ReleaseRequest, ns: str) -> idempotency_pb2.ReleaseResponse:  # noqa: N802
        key = await self.service.release(KeyRef(ns, request.scope, request.key), attempt=request.attempt,
                                         error_message=request.error_message)
        return idempotency_pb2.ReleaseResponse(key=convert.idempotency_key(key))

    @unary("GetKey")
    async def GetKey(self, request: idempotency_pb2.GetKeyRequest, ns: str) -> idempotency_pb2.GetKeyResponse:  # noqa: N802
        key = await self.service.get(KeyRef(ns, request.scope, request.key))
        return idempotency_pb2.GetKeyResponse(key=convert.idempotency_key(key))

    @unary("ListKeys")
    async def ListKeys(self, request: idempotency_pb2.ListKeysRequest, ns: str) -> idempotency_pb2.ListKeysResponse:  # noqa: N802
        rows, token = await self.service.list_keys(
            ns, KeyFilter(scope=request.scope, statuses=_statuses(list(request.statuses)),
                          key_prefix=request.key_prefix),
            Page(page_size(request.page_size), request.page_token),
        )
        return idempotency_pb2.ListKeysResponse(keys=[convert.idempotency_key(k) for k in rows], next_page_token=token)
