"""Who may do what (issue 44): every method of the contract with a token of each role, on both backends.

A token is `token=namespace[:role]`: read (lists, timelines, states), operate (also the nodes' calls and
cancel, retry, resume) or admin (also moves between versions and deleting data; a token without a role).
A call its token's role does not allow is refused with PERMISSION_DENIED before anything runs, on gRPC, on
the HTTP/JSON face and on the call stream alike; every other call gets what it would get anyway.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest
from durable.v1 import (
    audit_pb2,
    call_pb2,
    checkpoint_pb2,
    common_pb2,
    instance_pb2,
    version_pb2,
)
from durable_sidecar import app
from durable_sidecar.settings import Settings, SettingsError
from durable_sidecar.transport.auth import ROLES, Role

from tests.conftest import make_settings
from tests.sidecar.helpers import channel

# Every service the sidecar serves (app.SERVED) and the call stream: a new service is in here by itself.
SERVICES = [*(served.descriptor for served in app.SERVED), app.CALL_SERVICE]
METHODS = [(service, method) for service in SERVICES for method in service.methods]


def test_every_method_of_the_contract_has_a_role_and_no_row_is_stale() -> None:
    """The allow-list: a new RPC without a row in ROLES fails here (until then it would be admins' only)."""
    names = [method.name for _, method in METHODS]
    assert len(names) == len(set(names)), "method names must be unique across services (ROLES is keyed by them)"
    missing = sorted(set(names) - set(ROLES))
    assert not missing, f"give these methods a role in transport/auth.py ROLES: {missing}"
    assert not sorted(set(ROLES) - set(names)), "ROLES names methods the contract no longer has"
    # What the issue names: reads are read; the nodes' calls and cancel/retry/resume are operate; moves and
    # deleting data are admin.
    assert {m for m, r in ROLES.items() if r is Role.ADMIN} == {"MoveInstances", "PruneCheckpoints", "PurgeInstance"}
    assert all(ROLES[m] is Role.READ for m in names if m.startswith(("Get", "List", "Count")))
    assert all(ROLES[m] is Role.OPERATE for m in ("CancelInstance", "RetryInstance", "ResumeInstance",
                                                  "StartOrResume", "SaveCheckpoints", "Claim", "Complete"))


def test_token_entries_take_an_optional_role_and_refuse_an_unknown_one() -> None:
    settings = Settings.from_env(environ={}, auth_tokens="reader-token-1=shop:read,ops-token-1=shop:operate,"
                                                         "admin-token-1=shop,admin-token-2=shop:admin")
    assert settings.tokens == {"reader-token-1": "shop", "ops-token-1": "shop", "admin-token-1": "shop",
                               "admin-token-2": "shop"}
    assert settings.token_roles == {"reader-token-1": "read", "ops-token-1": "operate", "admin-token-1": "admin",
                                    "admin-token-2": "admin"}
    with pytest.raises(SettingsError, match="unknown role 'owner'"):
        Settings.from_env(environ={}, auth_tokens="reader-token-1=shop:owner")


TOKENS = {Role.READ: "role-read-token", Role.OPERATE: "role-operate-token", Role.ADMIN: "role-admin-token"}


@pytest.fixture
async def sidecar(database_url: str) -> AsyncIterator[app.Sidecar]:
    ns = f"ns-roles-{uuid.uuid4().hex[:8]}"
    tokens = (f"{TOKENS[Role.READ]}={ns}:read,{TOKENS[Role.OPERATE]}={ns}:operate,"
              f"{TOKENS[Role.ADMIN]}={ns}")  # no role: admin, as every token before roles existed
    started = await app.start(make_settings(database_url, auth_tokens=tokens, http_listen_address="127.0.0.1:0"))
    try:
        yield started
    finally:
        await started.stop(grace=0.5)


def _md(role: Role) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[role]}"),)


async def _code(ch: grpc.aio.Channel, service: Any, method: Any, role: Role) -> grpc.StatusCode:
    """The status of the method called with an empty request (the role is judged before the request)."""
    path = f"/{service.full_name}/{method.name}"
    try:
        if method.client_streaming:
            call = ch.stream_stream(path)(iter(()), metadata=_md(role), timeout=5)
            async for _ in call:
                break
            return await call.code()
        if method.server_streaming:
            stream = ch.unary_stream(path)(b"", metadata=_md(role), timeout=1)
            async for _ in stream:
                break
            stream.cancel()
            return grpc.StatusCode.OK
        await ch.unary_unary(path)(b"", metadata=_md(role), timeout=5)
        return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as exc:
        return exc.code()


async def test_every_method_with_a_token_of_each_role(sidecar: app.Sidecar) -> None:
    ch = channel(sidecar.port)
    try:
        for service, method in METHODS:
            needed = ROLES[method.name]
            for role in Role:
                code = await _code(ch, service, method, role)
                denied = code == grpc.StatusCode.PERMISSION_DENIED
                assert denied == (role < needed), (method.name, role.label, code)
    finally:
        await ch.close()


async def test_a_refused_call_changes_nothing_and_says_which_role_it_needs(sidecar: app.Sidecar) -> None:
    ch = channel(sidecar.port)
    from durable.v1 import instance_pb2_grpc, version_pb2_grpc

    stub, versions = instance_pb2_grpc.InstanceServiceStub(ch), version_pb2_grpc.VersionServiceStub(ch)
    try:
        await stub.StartOrResume(instance_pb2.StartOrResumeRequest(workflow_id="wf-roles", instance_key="k1",
                                                                   execution_id="7"), metadata=_md(Role.OPERATE))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CancelInstance(instance_pb2.CancelInstanceRequest(
                workflow_id="wf-roles", instance_key="k1", actor="ops:reader", reason="not mine to cancel"),
                metadata=_md(Role.READ))
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "CancelInstance needs a token with the operate role" in (refused.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as move:
            await versions.MoveInstances(version_pb2.MoveInstancesRequest(
                selector=version_pb2.InstanceSelector(workflow_id="wf-roles"), to_version=1, dry_run=True,
                actor="ops:ann", reason="try"), metadata=_md(Role.OPERATE))
        assert move.value.code() == grpc.StatusCode.PERMISSION_DENIED and "admin" in (move.value.details() or "")
        got = await stub.GetInstance(instance_pb2.GetInstanceRequest(workflow_id="wf-roles", instance_key="k1"),
                                     metadata=_md(Role.READ))
        assert got.instance.status == common_pb2.INSTANCE_STATUS_RUNNING  # the refused cancel changed nothing
        callers = {role: await ch.unary_unary(
            "/durable.v1.AuditService/GetCaller", response_deserializer=audit_pb2.GetCallerResponse.FromString)(
            b"", metadata=_md(role)) for role in Role}
        assert {r: c.role for r, c in callers.items()} == {Role.READ: "read", Role.OPERATE: "operate",
                                                          Role.ADMIN: "admin"}
    finally:
        await ch.close()


async def test_roles_hold_on_the_http_json_face_and_on_the_call_stream(sidecar: app.Sidecar) -> None:
    assert sidecar.http_server is not None
    url = f"http://127.0.0.1:{sidecar.http_server.port}/durable.v1.InstanceService/StartOrResume"
    body = json.dumps({"workflowId": "wf-roles-http", "instanceKey": "k1", "executionId": "8"}).encode()
    async with aiohttp.ClientSession() as session:
        for role, status in ((Role.READ, 403), (Role.OPERATE, 200)):
            async with session.post(url, data=body, headers={"Content-Type": "application/json",
                                                             "Authorization": f"Bearer {TOKENS[role]}"}) as reply:
                answer = await reply.json(content_type=None)
                assert reply.status == status, answer
                if status == 403:
                    assert answer["code"] == "permission_denied", answer
    ch = channel(sidecar.port)
    try:
        request = checkpoint_pb2.PruneCheckpointsRequest(workflow_id="wf-roles-http", keep_last=1, dry_run=True)

        async def one(role: Role) -> call_pb2.CallResponse:
            queue: asyncio.Queue[call_pb2.CallRequest | None] = asyncio.Queue()
            await queue.put(call_pb2.CallRequest(id=1, method="/durable.v1.CheckpointService/PruneCheckpoints",
                                                 request=request.SerializeToString()))

            async def requests() -> AsyncIterator[call_pb2.CallRequest]:
                first = await queue.get()
                assert first is not None
                yield first

            stream = ch.stream_stream("/durable.v1.CallService/Call", request_serializer=call_pb2.CallRequest.SerializeToString,
                                      response_deserializer=call_pb2.CallResponse.FromString)(requests(), metadata=_md(role))
            async for answer in stream:
                return answer
            raise AssertionError("no answer on the call stream")

        refused, allowed = await one(Role.OPERATE), await one(Role.ADMIN)
        assert refused.code == grpc.StatusCode.PERMISSION_DENIED.value[0], refused
        assert allowed.code != grpc.StatusCode.PERMISSION_DENIED.value[0], allowed
    finally:
        await ch.close()


def test_session_tokens_of_the_nodes_need_operate() -> None:
    """The n8n nodes' session and every call they send need operate: a read token cannot run workflows."""
    for name in ("OpenSession", "Heartbeat", "WatchSession", "CloseSession", "WatchResumable", "ClaimResumable",
                 "AcquireSlot", "Throttle", "Debounce", "ReleaseSlot", "AwaitEvent", "SignalInstance"):
        assert ROLES[name] is Role.OPERATE, name
