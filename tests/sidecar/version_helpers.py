"""Workflow definitions and version RPC helpers shared by the version-binding tests (test_version*.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import pairwise
from typing import Any

import grpc
import pytest
from durable.v1 import instance_pb2, version_pb2
from durable_sidecar import app

from tests.conftest import make_settings
from tests.sidecar.helpers import Stubs, channel

WF = "wf-orders"


# --- definitions --------------------------------------------------------------


def node(name: str, type_: str, x: int, **parameters: Any) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "name": name, "type": type_, "typeVersion": 1, "position": [x, 300],
            "parameters": parameters}


def workflow(*, amount: int = 10, ship: str = "Ship", sticky: str = "remember the VAT") -> dict[str, Any]:
    """An order workflow: Webhook → Resume Point → Charge → <ship> → Durable Checkpoint."""
    nodes = [
        node("Webhook", "n8n-nodes-base.webhook", 0, path="orders", httpMethod="POST"),
        node("Resume Point", "n8n-nodes-durable.resumePoint", 200, instanceKey="={{ $json.orderId }}"),
        node("Charge", "n8n-nodes-base.httpRequest", 400, url="https://pay.example/charge", amount=amount),
        node(ship, "n8n-nodes-base.httpRequest", 600, url="https://ship.example/label"),
        node("Durable Checkpoint", "n8n-nodes-durable.durableCheckpoint", 800, stepName="={{ $node.name }}"),
        node("Note", "n8n-nodes-base.stickyNote", 0, content=sticky),
    ]
    chain = ["Webhook", "Resume Point", "Charge", ship, "Durable Checkpoint"]
    connections = {a: {"main": [[{"node": b, "type": "main", "index": 0}]]} for a, b in pairwise(chain)}
    return {"name": "Orders", "nodes": nodes, "connections": connections, "settings": {"executionOrder": "v1"}}


def raw(definition: dict[str, Any]) -> bytes:
    return json.dumps(definition).encode()


# --- RPC helpers --------------------------------------------------------------


def new_key() -> str:
    return f"order-{uuid.uuid4().hex[:10]}"


async def register(s: Stubs, definition: dict[str, Any] | bytes, **kw: Any) -> version_pb2.RegisterVersionResponse:
    body = definition if isinstance(definition, bytes) else raw(definition)
    return await s.versions.RegisterVersion(
        version_pb2.RegisterVersionRequest(workflow_id=WF, definition_json=body, actor="tester", **kw),
        metadata=s.metadata)


async def start(s: Stubs, key: str, execution: str = "exec-1", **kw: Any) -> instance_pb2.StartOrResumeResponse:
    return await s.instances.StartOrResume(
        instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=key, execution_id=execution, **kw),
        metadata=s.metadata)


async def resume(s: Stubs, key: str, holder: str, execution: str, **kw: Any) -> instance_pb2.StartOrResumeResponse:
    """Resumes from another execution: the holder parks the instance (lease released), then it is taken over."""
    await s.instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(
        workflow_id=WF, instance_key=key, execution_id=holder, delay_seconds=0), metadata=s.metadata)
    reply = await start(s, key, execution, **kw)
    assert reply.outcome == instance_pb2.START_OUTCOME_RESUMED
    return reply


async def bound_version(s: Stubs, key: str) -> int:
    reply = await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                          metadata=s.metadata)
    return reply.instance.bound_version


async def versions(s: Stubs, workflow_id: str = WF) -> list[version_pb2.Version]:
    reply = await s.versions.ListVersions(version_pb2.ListVersionsRequest(workflow_id=workflow_id, page_size=1000),
                                          metadata=s.metadata)
    return list(reply.versions)


async def change_log(s: Stubs, **kw: Any) -> list[version_pb2.ChangeLogEntry]:
    reply = await s.versions.ListChangeLog(version_pb2.ListChangeLogRequest(page_size=1000, **kw), metadata=s.metadata)
    return list(reply.entries)


async def moves_logged(s: Stubs) -> list[version_pb2.ChangeLogEntry]:
    return [e for e in await change_log(s, workflow_id=WF) if e.kind == version_pb2.CHANGE_KIND_INSTANCE_MOVED]


async def move(s: Stubs, to_version: int, *, keys: tuple[str, ...] = (), dry_run: bool = False,
               statuses: tuple[int, ...] = (), from_version: int = 0, reason: str = "fix shipping",
               actor: str = "ops@example.com") -> version_pb2.MoveInstancesResponse:
    return await s.versions.MoveInstances(version_pb2.MoveInstancesRequest(
        selector=version_pb2.InstanceSelector(workflow_id=WF, instance_keys=keys, statuses=statuses,
                                              from_version=from_version),
        to_version=to_version, dry_run=dry_run, reason=reason, actor=actor), metadata=s.metadata)


async def expect_error(code: grpc.StatusCode, call: Any, *, contains: str = "") -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    details = err.value.details() or ""
    assert contains in details, details
    return details



def charge_amount(definition_json: bytes, *, expected: int) -> dict[str, Any]:
    """The parsed definition, after checking its Charge node charges the expected amount."""
    doc: dict[str, Any] = json.loads(definition_json)
    charge = next(n for n in doc["nodes"] if n["name"] == "Charge")
    assert charge["parameters"]["amount"] == expected
    return doc


@asynccontextmanager
async def sidecar_with(database_url: str, **overrides: Any) -> AsyncIterator[Stubs]:
    """A sidecar with its own settings (n8n access), and stubs for its namespace ns-<token>."""
    token = f"n8n-{uuid.uuid4().hex[:12]}"
    overrides.setdefault("auth_tokens", f"{token}=ns-{token}")
    sidecar = await app.start(make_settings(database_url, **overrides))
    ch = channel(sidecar.port)
    try:
        yield Stubs(ch, token)
    finally:
        await ch.close()
        await sidecar.stop(grace=0.5)

