"""Version binding, content addressing and bad input through the real gRPC server, on both storage backends."""

from __future__ import annotations

import asyncio
import copy
import uuid
from typing import Any

import grpc
import pytest
from durable.v1 import instance_pb2, version_pb2

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.version_helpers import (
    WF,
    bound_version,
    change_log,
    charge_amount,
    expect_error,
    move,
    moves_logged,
    new_key,
    raw,
    register,
    resume,
    sidecar_with,
    start,
    versions,
    workflow,
)


def reversed_keys(value: Any) -> Any:
    """The same JSON value with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {k: reversed_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_keys(v) for v in value]
    return value


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
