"""Replay from a checkpoint (issue 44): a finished instance runs again from checkpoint N as a fork <key>~r<n>, with
the original's start item, checkpoints 1..N and search fields; the original stays as it was, with the replay in
its audit trail."""

from __future__ import annotations

import json
import uuid

import grpc
import pytest
from durable.v1 import common_pb2, events_pb2, instance_pb2, version_pb2

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.storage import fetch
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start
from tests.sidecar.test_events import audit, claim_key, get

STEPS = ("paid", "reserved", "shipped", "couponed")
REDRIVE = instance_pb2.RESUME_REASON_REDRIVE


async def finished_order(s: Stubs, key: str | None = None) -> str:
    key = key or new_key()
    await start(s, key, "exec-1", start_item_json=b'{"orderId": "A-1", "amount": 42}',
                search_fields_json=b'{"customerId": "C-7"}')
    for n, step in enumerate(STEPS, 1):
        await save(s, item(key, step, {"step": step, "n": n}))
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1"), metadata=s.metadata)
    return key


async def replay(s: Stubs, key: str, from_sequence: int, **kw: object) -> events_pb2.ReplayInstanceResponse:
    return await s.recovery.ReplayInstance(events_pb2.ReplayInstanceRequest(
        workflow_id=WF, instance_key=key, from_sequence=from_sequence, actor=str(kw.pop("actor", "alice")),
        reason=str(kw.pop("reason", "the shipping step had a bug")), **kw), metadata=s.metadata)


async def refused(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await call  # type: ignore[misc]
    return exc.value.code(), exc.value.details() or ""


async def test_a_replay_from_checkpoint_2_forks_the_order_with_its_first_two_checkpoints(harness: Harness,
                                                                                        database_url: str) -> None:
    s = harness.alpha
    key = await finished_order(s)
    reply = await replay(s, key, 2)
    fork = reply.instance
    assert fork.instance_key == f"{key}~r1" and reply.checkpoints_copied == 2
    assert fork.status == common_pb2.INSTANCE_STATUS_RUNNING and fork.last_sequence == 2
    assert fork.last_step == "reserved" and fork.checkpoint_count == 2 and fork.lease_owner == ""
    assert json.loads((await get(s, fork.instance_key)).search_fields_json) == {"customerId": "C-7"}
    # Due now: the Resume Trigger hands it out, and its Resume Point resumes it at checkpoint 2.
    handed = await claim_key(s, fork.instance_key)
    assert len(handed) == 1 and handed[0].reason == REDRIVE
    resumed = await start(s, fork.instance_key, "exec-2", claim_token=handed[0].claim_token, include_state=True)
    assert resumed.outcome == instance_pb2.START_OUTCOME_RESUMED
    assert resumed.latest_checkpoint.sequence == 2 and resumed.latest_checkpoint.step_name == "reserved"
    assert json.loads(resumed.latest_checkpoint.state_json) == {"step": "reserved", "n": 2}
    assert json.loads(resumed.start_item_json) == {"orderId": "A-1", "amount": 42}
    # Steps 3 and 4 run again in the fork.
    await save(s, item(fork.instance_key, "shipped", {"again": True}, execution="exec-2"))
    assert (await get(s, fork.instance_key)).last_sequence == 3
    # The original is as it was, with the replay in its trail; the fork names the original.
    original = await get(s, key)
    assert original.status == common_pb2.INSTANCE_STATUS_COMPLETED and original.last_sequence == 4
    trail = await audit(database_url, key)
    assert trail[-1][0] == "replayed" and trail[-1][1] == "alice"
    assert f"as {key}~r1 from checkpoint 2 (reserved)" in trail[-1][2] and "shipping step had a bug" in trail[-1][2]
    started = (await audit(database_url, fork.instance_key))[0]
    assert started[0] == "started" and f"replay of {key} from checkpoint 2 (reserved)" in started[2]
    rows = await fetch(database_url, "SELECT count(*) FROM durable_checkpoints WHERE instance_key = %s", key)
    assert int(rows[0][0]) == 4


async def test_replays_are_numbered_and_one_from_the_start_has_no_checkpoint(harness: Harness) -> None:
    s = harness.alpha
    key = await finished_order(s)
    assert (await replay(s, key, 4)).instance.instance_key == f"{key}~r1"
    again = await replay(s, key, 0, reason="run it from the trigger again")
    assert again.instance.instance_key == f"{key}~r2" and again.checkpoints_copied == 0
    assert again.instance.last_sequence == 0 and again.instance.last_step == ""
    handed = await claim_key(s, again.instance.instance_key)
    resumed = await start(s, again.instance.instance_key, "exec-3", claim_token=handed[0].claim_token,
                          include_state=True)
    assert not resumed.HasField("latest_checkpoint")
    assert json.loads(resumed.start_item_json) == {"orderId": "A-1", "amount": 42}


async def test_a_bad_replay_is_refused_and_forks_nothing(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = await finished_order(s)
    running = new_key()
    await start(s, running, "exec-1")
    cases = [
        (replay(s, running, 0), grpc.StatusCode.FAILED_PRECONDITION, "cancel it first"),
        (replay(s, key, 5), grpc.StatusCode.INVALID_ARGUMENT, "checkpoints 1 to 4"),
        (replay(s, key, -1), grpc.StatusCode.INVALID_ARGUMENT, "from_sequence"),
        (replay(s, key, 1, to_version=99), grpc.StatusCode.INVALID_ARGUMENT, "to_version 99"),
        (replay(s, key, 1, actor=""), grpc.StatusCode.INVALID_ARGUMENT, "actor"),
        (replay(s, key, 1, reason=""), grpc.StatusCode.INVALID_ARGUMENT, "reason"),
        (replay(s, "nobody-" + uuid.uuid4().hex[:6], 0), grpc.StatusCode.NOT_FOUND, "does not exist"),
    ]
    for call, code, text in cases:
        got = await refused(call)
        assert got[0] == code and text in got[1], got
    rows = await fetch(database_url, "SELECT count(*) FROM durable_instances WHERE instance_key LIKE %s", "%~r%")
    forks = await fetch(database_url, "SELECT count(*) FROM durable_instances WHERE instance_key IN (%s, %s)",
                        f"{key}~r1", f"{running}~r1")
    assert int(forks[0][0]) == 0, rows
    # A purged instance has nothing left to replay.
    await s.recovery.PurgeInstance(events_pb2.PurgeInstanceRequest(
        workflow_id=WF, instance_key=key, actor="dpo", reason="erasure request"), metadata=s.metadata)
    code, msg = await refused(replay(s, key, 1))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "purged" in msg



async def test_replaying_onto_another_version_is_an_admins_move(operate_and_admin: tuple[Stubs, Stubs]) -> None:
    operate, admin = operate_and_admin
    for n in (1, 2):
        await admin.versions.RegisterVersion(version_pb2.RegisterVersionRequest(
            workflow_id=WF, definition_json=json.dumps({"nodes": [{"name": f"Step {n}", "type": "x"}],
                                                        "connections": {}}).encode(), label=f"1.{n}.0"),
            metadata=admin.metadata)
    key = await finished_order(operate)
    assert (await get(operate, key)).bound_version == 2
    code, msg = await refused(replay(operate, key, 2, to_version=1))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "admin" in msg
    same = await replay(operate, key, 2, to_version=2)  # its own version: no move, operate may
    assert same.instance.bound_version == 2
    moved = await replay(admin, key, 2, to_version=1)
    assert moved.instance.bound_version == 1 and moved.instance.instance_key == f"{key}~r2"
