"""Moving instances between workflow versions through the real gRPC server and the CLI, on both storage backends."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import grpc
from durable.v1 import checkpoint_pb2, common_pb2, instance_pb2

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.version_helpers import WF, bound_version, change_log, expect_error, move, moves_logged, new_key, register, resume, start, workflow


async def keys_bound_to(s: Stubs, version: int) -> set[str]:
    reply = await s.instances.ListInstances(
        instance_pb2.ListInstancesRequest(workflow_id=WF, bound_version=version, page_size=1000), metadata=s.metadata)
    return {i.instance_key for i in reply.instances}


async def save(s: Stubs, key: str, step: str, execution: str = "exec-1") -> None:
    await s.checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[checkpoint_pb2.SaveCheckpointItem(
        workflow_id=WF, instance_key=key, step_name=step, state_json=b'{"ok": true}', execution_id=execution,
        node_name="Durable Checkpoint")]), metadata=s.metadata)


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
    # The workflow as `versions list` takes it, positional, works too.
    assert await cli("versions", "log", WF) == logged
    # The instance's own trail, oldest first: its start and checkpoint-less history, then the move, with who and why.
    trail = [line.split(None, 3) for line in (await cli("instances", "trail", WF, key)).splitlines()[2:]]
    events = [row[2] for row in trail]  # date, time, event, by and detail
    assert events[0] == "started" and events[-1] == "moved", trail
    assert trail[-1][3].split(None, 1) == ["ana", "version 1 to 2: express"], trail
    assert "moved" not in (await cli("instances", "trail", WF, other))
    unknown = await asyncio.to_thread(_cli, database_url, "instances", "trail", WF, "no-such-key", "--namespace", ns)
    assert unknown.returncode == 1 and "does not exist" in unknown.stderr, unknown.stderr

    refused = await asyncio.to_thread(_cli, database_url, "instances", "move", WF, "--to", "2", "--key", other,
                                      "--namespace", ns)
    assert refused.returncode == 1 and "reason is required" in refused.stderr
