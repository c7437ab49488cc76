"""Version binding through the real gRPC server, on both storage backends, with a local fake of n8n's REST API."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise
from typing import Any

import grpc
import pytest
from durable.v1 import checkpoint_pb2, common_pb2, instance_pb2, version_pb2
from durable_sidecar import app
from durable_sidecar.services import versions as versions_service

from tests.conftest import Harness, make_settings
from tests.sidecar.helpers import Stubs, channel, free_port
from tests.sidecar.storage import ago, fetch

WF = "wf-orders"
N8N_KEY = "n8n-api-key-for-tests"


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


def reversed_keys(value: Any) -> Any:
    """The same JSON value with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {k: reversed_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_keys(v) for v in value]
    return value


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


async def keys_bound_to(s: Stubs, version: int) -> set[str]:
    reply = await s.instances.ListInstances(
        instance_pb2.ListInstancesRequest(workflow_id=WF, bound_version=version, page_size=1000), metadata=s.metadata)
    return {i.instance_key for i in reply.instances}


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


async def save(s: Stubs, key: str, step: str, execution: str = "exec-1") -> None:
    await s.checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[checkpoint_pb2.SaveCheckpointItem(
        workflow_id=WF, instance_key=key, step_name=step, state_json=b'{"ok": true}', execution_id=execution,
        node_name="Durable Checkpoint")]), metadata=s.metadata)


async def expect_error(code: grpc.StatusCode, call: Any, *, contains: str = "") -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    details = err.value.details() or ""
    assert contains in details, details
    return details


# --- binding ------------------------------------------------------------------


async def test_instance_started_on_v1_stays_on_v1_after_v2_is_registered(harness: Harness) -> None:
    s = harness.alpha
    v1 = await register(s, workflow(amount=10), label="1.0.0")
    assert v1.created and v1.version.version == 1 and v1.version.label == "1.0.0"
    key = new_key()
    started = await start(s, key)
    assert started.outcome == instance_pb2.START_OUTCOME_STARTED
    assert started.instance.bound_version == 1 and started.current_version == 1
    assert not started.version_mismatch and not started.HasField("bound_version")

    v2 = await register(s, workflow(amount=20), label="1.1.0")
    assert v2.created and v2.version.version == 2

    resumed = await resume(s, key, "exec-1", "exec-2")
    assert resumed.instance.bound_version == 1
    assert resumed.current_version == 2 and resumed.version_mismatch
    snapshot = resumed.bound_version
    assert snapshot.version == 1 and snapshot.label == "1.0.0" and snapshot.content_hash == v1.version.content_hash
    charge_amount(snapshot.definition_json, expected=10)
    assert "Charge" in snapshot.node_names and "Note" not in snapshot.node_names  # sticky notes are not steps
    assert await bound_version(s, key) == 1
    assert await moves_logged(s) == []


def charge_amount(definition_json: bytes, *, expected: int) -> dict[str, Any]:
    """The parsed definition, after checking its Charge node charges the expected amount."""
    doc: dict[str, Any] = json.loads(definition_json)
    charge = next(n for n in doc["nodes"] if n["name"] == "Charge")
    assert charge["parameters"]["amount"] == expected
    return doc


async def test_new_instance_binds_the_newest_version(harness: Harness) -> None:
    s = harness.alpha
    await register(s, workflow(amount=10))
    await register(s, workflow(amount=20))
    started = await start(s, new_key())
    assert started.instance.bound_version == 2 and started.current_version == 2
    assert not started.version_mismatch and not started.HasField("bound_version")


async def test_instance_started_with_an_explicit_older_version_keeps_it(harness: Harness) -> None:
    s = harness.alpha
    await register(s, workflow(amount=10))
    await register(s, workflow(amount=20))
    key = new_key()
    gray = await start(s, key, pinned_version=1)
    assert gray.outcome == instance_pb2.START_OUTCOME_STARTED
    assert gray.instance.bound_version == 1 and gray.current_version == 2
    # n8n runs version 2 now: the caller is told to run the pinned snapshot instead.
    assert gray.version_mismatch and gray.bound_version.version == 1
    charge_amount(gray.bound_version.definition_json, expected=10)

    await register(s, workflow(amount=30))
    again = await resume(s, key, "exec-1", "exec-2")
    assert again.instance.bound_version == 1 and again.current_version == 3 and again.bound_version.version == 1
    assert (await start(s, new_key())).instance.bound_version == 3


async def test_start_or_resume_registers_the_definition_it_is_sent(harness: Harness) -> None:
    s = harness.alpha
    first = new_key()
    a = await start(s, first, definition_json=raw(workflow(amount=10)))
    assert a.instance.bound_version == 1 and a.current_version == 1 and not a.version_mismatch
    b = await start(s, new_key(), definition_json=raw(reversed_keys(workflow(amount=10))))
    assert b.instance.bound_version == 1
    c = await start(s, new_key(), definition_json=raw(workflow(amount=20)))
    assert c.instance.bound_version == 2 and c.current_version == 2
    resumed = await resume(s, first, "exec-1", "exec-2", definition_json=raw(workflow(amount=20)))
    assert resumed.instance.bound_version == 1 and resumed.version_mismatch and resumed.bound_version.version == 1
    assert [v.version for v in await versions(s)] == [2, 1]
    registered = [e for e in await change_log(s, workflow_id=WF)
                  if e.kind == version_pb2.CHANGE_KIND_VERSION_REGISTERED]
    assert [(e.from_version, e.to_version, e.actor) for e in registered] == [(1, 2, "exec-1"), (0, 1, "exec-1")]


async def test_concurrent_starts_sending_a_new_definition_register_it_once(harness: Harness) -> None:
    s = harness.alpha
    body = raw(workflow(amount=7))
    replies = await asyncio.gather(*[start(s, new_key(), f"exec-{i}", definition_json=body) for i in range(20)])
    assert {r.instance.bound_version for r in replies} == {1} and {r.current_version for r in replies} == {1}
    assert [v.version for v in await versions(s)] == [1]
    assert len(await change_log(s, workflow_id=WF)) == 1


async def test_label_is_the_identity_when_no_version_is_registered(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    started = await start(s, key, version_label="1.0.0")
    assert started.instance.bound_version == 0 and started.instance.version_label == "1.0.0"
    assert started.current_version == 0 and not started.version_mismatch
    same = await start(s, key, version_label="1.0.0")  # a retry by the lease holder
    assert not same.version_mismatch
    other = await resume(s, key, "exec-1", "exec-2", version_label="1.1.0")
    assert other.version_mismatch and not other.HasField("bound_version")
    assert other.instance.version_label == "1.0.0"


# --- content addressing -------------------------------------------------------


async def test_registering_an_identical_definition_with_reordered_json_keys_gives_the_same_version(
        harness: Harness) -> None:
    s = harness.alpha
    definition = workflow()
    first = await register(s, definition)
    assert first.created and first.version.version == 1
    reordered = reversed_keys(definition)
    assert raw(reordered) != raw(definition)
    again = await register(s, reordered)
    assert not again.created and again.version.version == 1
    assert again.version.content_hash == first.version.content_hash
    # The stored snapshot is the first one, byte for byte.
    got = await s.versions.GetVersion(version_pb2.GetVersionRequest(workflow_id=WF, version=1), metadata=s.metadata)
    assert got.version.definition_json == raw(definition)
    assert len(await versions(s)) == 1


async def test_node_order_positions_ids_and_sticky_notes_do_not_make_a_new_version(harness: Harness) -> None:
    s = harness.alpha
    definition = workflow()
    first = await register(s, definition)
    moved = copy.deepcopy(definition)
    moved["nodes"].reverse()
    for n in moved["nodes"]:
        n["position"] = [n["position"][0] + 40, 120]
        n["id"] = str(uuid.uuid4())
    moved["nodes"] = [n if n["name"] != "Note" else {**n, "parameters": {"content": "edited"}} for n in moved["nodes"]]
    moved["connections"]["Durable Checkpoint"] = {"main": [[]]}  # left behind by n8n after removing a link
    again = await register(s, moved)
    assert not again.created and again.version.version == first.version.version


async def test_a_changed_parameter_or_connection_makes_a_new_version(harness: Harness) -> None:
    s = harness.alpha
    base = workflow()
    await register(s, base)
    changed = copy.deepcopy(base)
    next(n for n in changed["nodes"] if n["name"] == "Charge")["parameters"]["amount"] = 11
    assert (await register(s, changed)).version.version == 2
    rewired = copy.deepcopy(base)
    rewired["connections"]["Charge"]["main"][0][0]["node"] = "Durable Checkpoint"
    assert (await register(s, rewired)).version.version == 3


async def test_registering_an_earlier_definition_again_makes_it_current(harness: Harness) -> None:
    s = harness.alpha
    await register(s, workflow(amount=10))
    await register(s, workflow(amount=20))
    back = await register(s, workflow(amount=10))  # reverted in n8n
    assert not back.created and back.version.version == 1
    current = await s.versions.GetVersion(version_pb2.GetVersionRequest(workflow_id=WF), metadata=s.metadata)
    assert current.version.version == 1
    assert (await start(s, new_key())).instance.bound_version == 1
    latest = (await change_log(s, workflow_id=WF))[0]
    assert latest.kind == version_pb2.CHANGE_KIND_VERSION_REGISTERED and (latest.from_version, latest.to_version) == (2, 1)
    # Registering the current content again is a no-op: no new log entry.
    await register(s, workflow(amount=10))
    assert (await change_log(s, workflow_id=WF))[0].id == latest.id


@pytest.mark.postgres_only(reason="two sidecar replicas on one database: the embedded database has one owner "
                                   "(a second sidecar is refused, see test_embedded.py)")
async def test_concurrent_registrations_on_two_replicas_give_one_version_per_content_and_gapless_numbers(
        harness: Harness, database_url: str) -> None:
    s = harness.alpha
    # A second sidecar on the same database and tokens: the guarantee must come from PostgreSQL.
    async with sidecar_with(database_url, auth_tokens=harness.sidecar.settings.auth_tokens) as replica:
        other = Stubs(replica.channel, s.token)
        contents = [workflow(amount=a) for a in (1, 2, 3, 4)]
        calls = [register(other if i % 2 else s, reversed_keys(c) if i % 3 else c) for c in contents for i in range(6)]
        replies = await asyncio.gather(*calls)
    by_content: dict[int, set[int]] = {}
    for i, reply in enumerate(replies):
        by_content.setdefault(i // 6, set()).add(reply.version.version)
    assert all(len(v) == 1 for v in by_content.values())
    assert sorted(next(iter(v)) for v in by_content.values()) == [1, 2, 3, 4]
    assert sum(r.created for r in replies) == 4
    assert sorted(v.version for v in await versions(s)) == [1, 2, 3, 4]


# --- moving -------------------------------------------------------------------


async def test_moving_two_of_five_v1_instances_to_v2_moves_exactly_those_and_logs_two_entries(harness: Harness) -> None:
    s = harness.alpha
    await register(s, workflow(ship="Ship"))
    keys = sorted(new_key() for _ in range(5))
    for key in keys:
        await start(s, key)
    await save(s, keys[0], "Ship")  # a step v2 no longer has
    await save(s, keys[1], "Charge")
    await register(s, workflow(ship="Ship Express"))
    chosen = (keys[0], keys[1])

    plan = await move(s, 2, keys=chosen, dry_run=True, reason="", actor="")
    assert plan.dry_run
    assert [(m.instance_key, m.from_version, m.to_version, m.last_step, m.last_step_missing_in_target)
            for m in plan.moves] == [(keys[0], 1, 2, "Ship", True), (keys[1], 1, 2, "Charge", False)]
    assert await keys_bound_to(s, 1) == set(keys)  # the dry run changed nothing
    assert await moves_logged(s) == []

    done = await move(s, 2, keys=chosen)
    assert not done.dry_run and [m.instance_key for m in done.moves] == list(chosen)
    assert await keys_bound_to(s, 2) == set(chosen)
    assert await keys_bound_to(s, 1) == set(keys[2:])
    logged = await moves_logged(s)
    assert sorted((e.instance_key, e.from_version, e.to_version, e.actor, e.reason) for e in logged) == [
        (keys[0], 1, 2, "ops@example.com", "fix shipping"), (keys[1], 1, 2, "ops@example.com", "fix shipping")]
    assert [e.instance_key for e in await change_log(s, workflow_id=WF, instance_key=keys[0])] == [keys[0]]

    retry = await move(s, 2, keys=chosen)  # safe to retry: already there
    assert list(retry.moves) == [] and len(await moves_logged(s)) == 2
    after = await resume(s, keys[0], "exec-1", "exec-2")
    assert after.instance.bound_version == 2 and after.current_version == 2 and not after.version_mismatch


async def test_move_selects_by_status_and_bound_version(harness: Harness) -> None:
    s = harness.alpha
    await register(s, workflow(amount=1))
    running_v1, done_v1 = new_key(), new_key()
    await start(s, running_v1)
    await start(s, done_v1)
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=done_v1, execution_id="exec-1"), metadata=s.metadata)
    await register(s, workflow(amount=2))
    running_v2 = new_key()
    await start(s, running_v2)
    await register(s, workflow(amount=3))

    by_version = await move(s, 3, from_version=1)  # default status: running
    assert [m.instance_key for m in by_version.moves] == [running_v1]
    by_status = await move(s, 3, statuses=(common_pb2.INSTANCE_STATUS_COMPLETED,))
    assert [m.instance_key for m in by_status.moves] == [done_v1]
    assert await keys_bound_to(s, 3) == {running_v1, done_v1}
    assert await keys_bound_to(s, 2) == {running_v2}


async def test_a_real_move_needs_a_reason_and_an_actor(harness: Harness) -> None:
    s = harness.alpha
    await register(s, workflow(amount=1))
    key = new_key()
    await start(s, key)
    await register(s, workflow(amount=2))
    await expect_error(grpc.StatusCode.INVALID_ARGUMENT, move(s, 2, keys=(key,), reason=""), contains="reason")
    await expect_error(grpc.StatusCode.INVALID_ARGUMENT, move(s, 2, keys=(key,), actor=""), contains="actor")
    assert await bound_version(s, key) == 1 and await moves_logged(s) == []


# --- bad input ----------------------------------------------------------------


async def test_an_unknown_version_gets_a_clear_error_and_changes_nothing(harness: Harness) -> None:
    s = harness.alpha
    await expect_error(grpc.StatusCode.NOT_FOUND, s.versions.GetVersion(
        version_pb2.GetVersionRequest(workflow_id=WF), metadata=s.metadata), contains="no registered version")
    await register(s, workflow())
    key = new_key()
    await start(s, key)
    await expect_error(grpc.StatusCode.NOT_FOUND, move(s, 99, keys=(key,)), contains="to_version 99")
    await expect_error(grpc.StatusCode.NOT_FOUND, move(s, 1, from_version=42), contains="from_version 42")
    await expect_error(grpc.StatusCode.NOT_FOUND, move(s, 1, keys=(key, "no-such-order")), contains="no-such-order")
    assert await bound_version(s, key) == 1 and await moves_logged(s) == []

    other = new_key()
    await expect_error(grpc.StatusCode.NOT_FOUND, start(s, other, pinned_version=99), contains="pinned_version 99")
    await expect_error(grpc.StatusCode.NOT_FOUND, s.instances.GetInstance(
        instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=other), metadata=s.metadata))
    await expect_error(grpc.StatusCode.NOT_FOUND, s.versions.GetVersion(
        version_pb2.GetVersionRequest(workflow_id=WF, version=99), metadata=s.metadata), contains="version 99")
    assert [v.version for v in await versions(s)] == [1]


MALFORMED: list[tuple[bytes, str]] = [
    (b"", "definition_json is required"),
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"name": "x"}', "no 'nodes' array"),
    (b'{"nodes": {}}', "no 'nodes' array"),
    (b'{"nodes": [42]}', "nodes[0] is not an object"),
    (b'{"nodes": [{"type": "n8n-nodes-base.set"}]}', "nodes[0] has no name"),
    (b'{"nodes": [{"name": "A"}]}', "node 'A' has no type"),
    (b'{"nodes": [{"name": "A", "type": "t"}, {"name": "A", "type": "t"}]}', "appears twice"),
    (b'{"nodes": [], "connections": []}', "'connections' must be an object"),
    (b'{"nodes": [], "connections": {"A": {"main": {}}}}', "must be an array"),
    (b'{"nodes": [{"name": "A", "type": "t", "parameters": {"x": NaN}}]}', "NaN"),
]


async def test_a_malformed_definition_gets_a_clear_error_and_changes_nothing(harness: Harness) -> None:
    s = harness.alpha
    for body, message in MALFORMED:
        await expect_error(grpc.StatusCode.INVALID_ARGUMENT, register(s, body), contains=message)
    key = new_key()
    await expect_error(grpc.StatusCode.INVALID_ARGUMENT, start(s, key, definition_json=b'{"nodes": "all"}'),
                       contains="definition_json has no 'nodes' array")
    await expect_error(grpc.StatusCode.INVALID_ARGUMENT, register(s, workflow(), label="v1.2"),
                       contains="not a semantic version")
    await expect_error(grpc.StatusCode.INVALID_ARGUMENT, s.instances.GetInstance(
        instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=""), metadata=s.metadata))
    await expect_error(grpc.StatusCode.NOT_FOUND, s.instances.GetInstance(
        instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key), metadata=s.metadata))
    assert await versions(s) == [] and await change_log(s) == []
    assert (await register(s, workflow(), label="2.0.0-rc.1")).version.label == "2.0.0-rc.1"


async def test_versions_are_scoped_to_the_namespace(harness: Harness) -> None:
    await register(harness.alpha, workflow())
    beta = harness.beta
    await expect_error(grpc.StatusCode.NOT_FOUND, beta.versions.GetVersion(
        version_pb2.GetVersionRequest(workflow_id=WF, version=1), metadata=beta.metadata))
    assert await versions(beta) == [] and await change_log(beta) == []
    own = await register(beta, workflow())
    assert own.created and own.version.version == 1


async def test_versions_and_the_change_log_page_newest_first(harness: Harness) -> None:
    s = harness.alpha
    for amount in (1, 2, 3):
        await register(s, workflow(amount=amount))
    page = await s.versions.ListVersions(version_pb2.ListVersionsRequest(workflow_id=WF, page_size=2),
                                         metadata=s.metadata)
    assert [v.version for v in page.versions] == [3, 2] and page.next_page_token
    assert all(not v.definition_json for v in page.versions)
    rest = await s.versions.ListVersions(version_pb2.ListVersionsRequest(
        workflow_id=WF, page_size=2, page_token=page.next_page_token), metadata=s.metadata)
    assert [v.version for v in rest.versions] == [1] and not rest.next_page_token
    log_page = await s.versions.ListChangeLog(version_pb2.ListChangeLogRequest(workflow_id=WF, page_size=2),
                                              metadata=s.metadata)
    log_rest = await s.versions.ListChangeLog(version_pb2.ListChangeLogRequest(
        workflow_id=WF, page_size=2, page_token=log_page.next_page_token), metadata=s.metadata)
    assert [e.to_version for e in [*log_page.entries, *log_rest.entries]] == [3, 2, 1]


# --- n8n ----------------------------------------------------------------------


class FakeN8n:
    """n8n's GET /api/v1/workflows/{id} on 127.0.0.1, answering 401 unless X-N8N-API-KEY matches."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.workflows: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.requests.append((self.path, self.headers.get("X-N8N-API-KEY", "")))
                if self.headers.get("X-N8N-API-KEY") != fake.api_key:
                    return self._send(401, {"message": "unauthorized"})
                prefix = "/api/v1/workflows/"
                wf = fake.workflows.get(self.path[len(prefix):]) if self.path.startswith(prefix) else None
                if wf is None:
                    return self._send(404, {"message": "Not Found"})
                return self._send(200, wf)

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def publish(self, workflow_id: str, definition: dict[str, Any], version_id: str) -> None:
        """What n8n answers for the workflow: its definition plus runtime fields."""
        self.workflows[workflow_id] = {**definition, "id": workflow_id, "active": True, "versionId": version_id,
                                       "staticData": {"lastPoll": "2026-01-01"}, "tags": []}


@pytest.fixture
def n8n() -> Iterator[FakeN8n]:
    fake = FakeN8n(N8N_KEY)
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()


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


async def sync(s: Stubs, workflow_id: str = WF) -> version_pb2.SyncVersionFromN8nResponse:
    return await s.versions.SyncVersionFromN8n(
        version_pb2.SyncVersionFromN8nRequest(workflow_id=workflow_id, actor="tester"), metadata=s.metadata)


async def test_sync_from_n8n_registers_the_workflow_with_the_api_key(database_url: str, n8n: FakeN8n) -> None:
    n8n.publish(WF, workflow(amount=10), "n8n-v-aaa")
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key=N8N_KEY) as s:
        first = await sync(s)
        assert first.created and first.version.version == 1 and first.version.n8n_version_id == "n8n-v-aaa"
        assert n8n.requests == [(f"/api/v1/workflows/{WF}", N8N_KEY)]
        stored = await s.versions.GetVersion(version_pb2.GetVersionRequest(workflow_id=WF, version=1),
                                             metadata=s.metadata)
        doc = charge_amount(stored.version.definition_json, expected=10)
        assert "staticData" not in doc and doc["settings"] == {"executionOrder": "v1"}

        # A save in n8n that only moved nodes: a new n8n versionId, the same version here.
        moved = workflow(amount=10)
        for n in moved["nodes"]:
            n["position"] = [n["position"][0], 999]
        n8n.publish(WF, moved, "n8n-v-bbb")
        assert not (await sync(s)).created
        n8n.publish(WF, workflow(amount=20), "n8n-v-ccc")
        second = await sync(s)
        assert second.created and second.version.version == 2 and second.version.n8n_version_id == "n8n-v-ccc"
        logged = (await change_log(s, workflow_id=WF))[0]
        assert logged.actor == "tester" and "synced from n8n" in logged.reason


async def test_sync_from_n8n_registers_the_published_version_not_the_draft(database_url: str,
                                                                           n8n: FakeN8n) -> None:
    """n8n 2.x answers with the edited draft at the top and the published version in `activeVersion`."""
    published = workflow(amount=10)
    n8n.publish(WF, workflow(amount=99), "n8n-v-draft")  # the draft someone is still editing
    n8n.workflows[WF]["activeVersion"] = {"versionId": "n8n-v-live", "workflowId": WF, **published}
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key=N8N_KEY) as s:
        async def stored(version: int) -> bytes:
            return (await s.versions.GetVersion(version_pb2.GetVersionRequest(workflow_id=WF, version=version),
                                                metadata=s.metadata)).version.definition_json

        got = await sync(s)
        assert got.created and got.version.n8n_version_id == "n8n-v-live"
        doc = charge_amount(await stored(got.version.version), expected=10)
        assert doc["id"] == WF and doc["settings"] == {"executionOrder": "v1"}
        # Unpublished (activeVersion null): the draft is all there is.
        n8n.workflows[WF]["activeVersion"] = None
        draft = await sync(s)
        assert draft.created and draft.version.n8n_version_id == "n8n-v-draft"
        charge_amount(await stored(draft.version.version), expected=99)


async def test_sync_from_n8n_without_api_access_is_a_failed_precondition(harness: Harness) -> None:
    s = harness.alpha
    await expect_error(grpc.StatusCode.FAILED_PRECONDITION, sync(s), contains="DURABLE_N8N_BASE_URL")
    assert await versions(s) == []


async def test_sync_from_n8n_when_n8n_is_unreachable_is_unavailable(database_url: str) -> None:
    async with sidecar_with(database_url, n8n_base_url=f"http://127.0.0.1:{free_port()}", n8n_api_key=N8N_KEY) as s:
        await expect_error(grpc.StatusCode.UNAVAILABLE, sync(s), contains="cannot be reached")
        assert await versions(s) == []


async def test_sync_from_n8n_with_a_wrong_api_key_is_a_failed_precondition(database_url: str, n8n: FakeN8n) -> None:
    n8n.publish(WF, workflow(), "n8n-v-aaa")
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key="not-the-key") as s:
        await expect_error(grpc.StatusCode.FAILED_PRECONDITION, sync(s), contains="refused the API key (HTTP 401)")
        assert await versions(s) == []
    assert n8n.requests == [(f"/api/v1/workflows/{WF}", "not-the-key")]


async def test_sync_of_a_workflow_n8n_does_not_have_is_not_found(database_url: str, n8n: FakeN8n) -> None:
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key=N8N_KEY) as s:
        await expect_error(grpc.StatusCode.NOT_FOUND, sync(s, "wf-unknown"), contains="does not exist in n8n")
        assert await versions(s, "wf-unknown") == []


async def test_start_or_resume_reads_n8n_while_the_workflow_has_no_version_then_once_an_interval(
        database_url: str, n8n: FakeN8n, monkeypatch: pytest.MonkeyPatch) -> None:
    # Told 'not due', a sidecar asks the database again only after this long (5 s by default).
    monkeypatch.setattr(versions_service, "_NOT_DUE_SECONDS", 0.5)
    n8n.publish(WF, workflow(amount=10), "n8n-v-aaa")
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key=N8N_KEY) as s:
        first = await start(s, new_key())
        assert first.instance.bound_version == 1 and len(n8n.requests) == 1
        # Within the interval no HTTP call is made, even though n8n has changed.
        n8n.publish(WF, workflow(amount=20), "n8n-v-bbb")
        second = await start(s, new_key())
        assert second.instance.bound_version == 1 and len(n8n.requests) == 1
        # Once the interval has passed (database time), the next start reads n8n again.
        await fetch(database_url, f"UPDATE durable_workflows SET n8n_checked_at = {ago(database_url, 3600)} "
                                  "WHERE namespace = %s AND workflow_id = %s", f"ns-{s.token}", WF)
        # This sidecar was just told 'not due': for a moment it does not ask the database again.
        assert (await start(s, new_key())).instance.bound_version == 1 and len(n8n.requests) == 1
        await asyncio.sleep(0.6)
        third = await start(s, new_key())
        assert third.instance.bound_version == 2 and third.current_version == 2 and len(n8n.requests) == 2
        # A definition sent by the caller wins and needs no HTTP call.
        sent = await start(s, new_key(), definition_json=raw(workflow(amount=30)))
        assert sent.instance.bound_version == 3 and len(n8n.requests) == 2


async def test_start_or_resume_still_starts_when_n8n_is_down(database_url: str) -> None:
    async with sidecar_with(database_url, n8n_base_url=f"http://127.0.0.1:{free_port()}", n8n_api_key=N8N_KEY) as s:
        started = await start(s, new_key(), version_label="1.0.0")
        assert started.outcome == instance_pb2.START_OUTCOME_STARTED
        assert started.instance.bound_version == 0 and started.instance.version_label == "1.0.0"


# --- CLI ----------------------------------------------------------------------


def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DURABLE_DATABASE_URL": database_url}
    return subprocess.run([sys.executable, "-m", "durable_sidecar", *args], env=env, capture_output=True, text=True,
                          timeout=60)


async def test_cli_lists_shows_and_diffs_versions_and_moves_instances(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    ns = harness.sidecar.settings.tokens[s.token]
    await register(s, workflow(amount=10, ship="Ship"), label="1.0.0")
    key, other = new_key(), new_key()
    await start(s, key)
    await start(s, other)
    await save(s, key, "Ship")
    await register(s, workflow(amount=20, ship="Ship Express"), label="1.1.0", note="express shipping")

    async def cli(*args: str) -> str:
        done = await asyncio.to_thread(_cli, database_url, *args, "--namespace", ns)
        assert done.returncode == 0, done.stderr
        return done.stdout

    listed = await cli("versions", "list", WF)
    assert "1.0.0" in listed and "1.1.0" in listed and "express shipping" in listed
    rows = listed.splitlines()[2:]
    assert rows[0].split()[:2] == ["2", "*"] and rows[1].split()[0] == "1" and "*" not in rows[1]
    shown = await cli("versions", "show", WF, "1", "--definition")
    assert "content hash" in shown and "Charge, Durable Checkpoint, Resume Point, Ship, Webhook" in shown
    assert '"amount": 10' in shown
    diff = await cli("versions", "diff", WF, "1", "2")
    assert "+ Ship Express  (added)" in diff and "- Ship  (removed)" in diff
    # Charge's amount and its link (to Ship Express) both changed.
    assert "~ Charge  (changed: parameters, connections)" in diff

    plan = await cli("instances", "move", WF, "--to", "2", "--key", key, "--dry-run")
    assert "would move 1 instance(s)" in plan and "MISSING" in plan
    assert await bound_version(s, key) == 1
    moved = await cli("instances", "move", WF, "--to", "2", "--key", key, "--reason", "express", "--actor", "ana")
    assert "moved 1 instance(s)" in moved
    assert await bound_version(s, key) == 2 and await bound_version(s, other) == 1
    logged = await cli("versions", "log", "--workflow", WF)
    assert "instance_moved" in logged and key in logged and "ana" in logged and "express" in logged

    refused = await asyncio.to_thread(_cli, database_url, "instances", "move", WF, "--to", "2", "--key", other,
                                      "--namespace", ns)
    assert refused.returncode == 1 and "reason is required" in refused.stderr
