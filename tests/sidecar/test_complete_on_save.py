"""SaveCheckpointItem.complete_instance: the last save completes its instance in the same call (issue 20).

The save and the completion are one transaction: a refused save completes
nothing, a retried save after success deduplicates and leaves the completed
instance as it is, and the audit trail records the completion as
CompleteInstance does.
"""

from __future__ import annotations

import grpc
import pytest
from durable.v1 import common_pb2, idempotency_pb2, instance_pb2
from durable_sidecar.domain import Instance, NewCheckpoint
from durable_sidecar.services.checkpoints import CheckpointService
from durable_sidecar.stores.base import Conn

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.storage import count_checkpoints, is_sqlite
from tests.sidecar.test_audit import events
from tests.sidecar.test_authoring import claim, completing, expire_key_lease, get, get_key, refused
from tests.sidecar.test_checkpoints import WF, item, latest, new_key, save, start
from tests.sidecar.test_step_save import ADD, state_of, step_saves

COMPLETED = common_pb2.INSTANCE_STATUS_COMPLETED
RUNNING = common_pb2.INSTANCE_STATUS_RUNNING


async def trail(s: Stubs, key: str) -> list[tuple[str, str, str]]:
    return [(e.kind, e.actor, e.execution_id) for e in (await events(s, key)).events]


async def test_the_last_save_completes_the_instance_and_a_redelivery_finds_it_completed(harness: Harness,
                                                                                        database_url: str) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key, "exec-1", start_item_json=b'{"orderId":"o-1"}')
    await save(s, item(key, "Pay", {"paid": True}, state_mode=ADD))
    claimed = await claim(s, charge, "exec-1")
    fast_before = step_saves("one_statement")
    done = (await save(s, item(key, "Ship", {"shipped": True}, state_mode=ADD, complete_instance=True,
                               complete_key=completing(charge, claimed.key.attempt)))).results[0]
    assert done.checkpoint.sequence == 2 and not done.deduplicated
    assert done.completed_key.status == idempotency_pb2.KEY_STATUS_COMPLETED
    assert done.completed_instance.status == COMPLETED and done.completed_instance.HasField("finished_at")
    assert done.completed_instance.last_sequence == 2 and done.completed_instance.last_step == "Ship"
    if not is_sqlite(database_url):  # the save merged into the remembered state, in its one statement
        assert step_saves("one_statement") - fast_before == 1
    inst = await get(s, key)
    assert inst.status == COMPLETED and inst.lease_owner == "" and not inst.result_json
    assert state_of(await latest(s, key)) == {"orderId": "o-1", "Pay": {"paid": True}, "Ship": {"shipped": True}}
    # The audit trail as after a separate CompleteInstance by the same execution.
    assert await trail(s, key) == [("started", "exec-1", "exec-1"), ("completed", "exec-1", "exec-1")]
    # A re-delivered trigger: the Resume Point leaves by Completed, nothing changes.
    again = await start(s, key, "exec-2")
    assert again.outcome == instance_pb2.START_OUTCOME_FINISHED and again.instance.status == COMPLETED
    assert await count_checkpoints(database_url, key) == 2


async def test_the_completion_matches_a_separate_complete_instance(harness: Harness, database_url: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # A plain save completes in the save's transaction (CheckpointService._complete_instances); a step result
    # on PostgreSQL in the save's one statement (durable_save_step_then, 0012): both as a separate
    # CompleteInstance completes.
    completer_calls: list[str] = []
    original = CheckpointService._complete_instances

    async def counted(self: CheckpointService, conn: Conn, saved: list[NewCheckpoint]) -> dict[int, Instance]:
        completer_calls.extend(new.ref.instance_key for new in saved if new.complete_instance)
        return await original(self, conn, saved)

    monkeypatch.setattr(CheckpointService, "_complete_instances", counted)
    s = harness.alpha
    combined_keys = []
    for mode in (0, ADD):
        combined, separate = new_key(), new_key()
        combined_keys.append(combined)
        for key in (combined, separate):
            await start(s, key, "exec-1", start_item_json=b'{"orderId":"o-1"}')
        answered = (await save(s, item(combined, "Done", {"a": 1}, state_mode=mode,
                                       complete_instance=True))).results[0].completed_instance
        await save(s, item(separate, "Done", {"a": 1}, state_mode=mode))
        await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
            workflow_id=WF, instance_key=separate, execution_id="exec-1"), metadata=s.metadata)
        a, b = await get(s, combined), await get(s, separate)
        assert answered == a  # the save's answer is the instance as stored
        for field in ("status", "last_sequence", "last_step", "lease_owner", "result_json", "error_message",
                      "checkpoint_count", "resume_count", "bound_version", "version_label", "lease_seconds"):
            assert getattr(a, field) == getattr(b, field), (mode, field)
        assert a.HasField("finished_at") and b.HasField("finished_at")
        assert not a.HasField("lease_expires_at") and not b.HasField("lease_expires_at")
        assert await trail(s, combined) == await trail(s, separate)
    plain, step = combined_keys
    assert completer_calls == ([plain] if not is_sqlite(database_url) else [plain, step])


async def test_a_retried_completing_save_is_the_checkpoint_already_there(harness: Harness,
                                                                         database_url: str) -> None:
    s = harness.alpha
    for mode in (ADD, 0):
        key = new_key()
        await start(s, key, "exec-1")
        sent = item(key, "Ship", {"shipped": True}, state_mode=mode, complete_instance=True)
        first = (await save(s, sent)).results[0]
        retried = (await save(s, sent)).results[0]
        assert retried.deduplicated and retried.checkpoint.sequence == first.checkpoint.sequence == 1
        assert retried.checkpoint.sha256 == first.checkpoint.sha256
        assert retried.completed_instance.status == COMPLETED
        assert retried.completed_instance.finished_at == first.completed_instance.finished_at
        assert await count_checkpoints(database_url, key) == 1
        assert [kind for kind, _, _ in await trail(s, key)] == ["started", "completed"]
        # Another step on the completed instance is refused as for any save.
        code, details = await refused(save(s, item(key, "More", {"x": 1}, state_mode=mode, complete_instance=True)))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "finished" in details


async def test_a_fenced_completing_save_saves_nothing_and_completes_nothing(harness: Harness,
                                                                            database_url: str) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key, "exec-1")
    await save(s, item(key, "Pay", {"paid": True}, state_mode=ADD))
    # A stale expected sequence.
    code, _ = await refused(save(s, item(key, "Ship", {"s": 1}, state_mode=ADD, expected_sequence=0,
                                         complete_instance=True)))
    assert code == grpc.StatusCode.ABORTED
    # A key attempt taken over by another execution.
    await claim(s, charge, "exec-1")
    await expire_key_lease(database_url, charge)
    assert (await claim(s, charge, "exec-2")).key.attempt == 2
    code, details = await refused(save(s, item(key, "Ship", {"s": 1}, state_mode=ADD, complete_instance=True,
                                               complete_key=completing(charge, 1))))
    assert code == grpc.StatusCode.ABORTED and charge in details
    inst = await get(s, key)
    assert inst.status == RUNNING and inst.last_sequence == 1
    assert await count_checkpoints(database_url, key) == 1
    assert (await get_key(s, charge)).status == idempotency_pb2.KEY_STATUS_IN_PROGRESS
    assert [kind for kind, _, _ in await trail(s, key)] == ["started"]
    # The right holder then saves and completes.
    done = (await save(s, item(key, "Ship", {"s": 1}, "exec-2", state_mode=ADD, expected_sequence=1,
                               complete_instance=True, complete_key=completing(charge, 2)))).results[0]
    assert done.checkpoint.sequence == 2 and done.completed_instance.status == COMPLETED


async def test_bad_completing_saves_are_refused_clearly_and_change_nothing(harness: Harness,
                                                                           database_url: str) -> None:
    s = harness.alpha
    key, other, failed = new_key(), new_key(), new_key()
    for k in (key, other, failed):
        await start(s, k, "exec-1")
    # complete_instance on an item a later item of the batch saves after.
    code, details = await refused(save(s, item(key, "A", {"a": 1}, complete_instance=True),
                                       item(other, "A", {"a": 1}), item(key, "B", {"b": 1})))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "items[0]" in details and "items[2]" in details
    for k in (key, other):
        assert (await get(s, k)).status == RUNNING and await count_checkpoints(database_url, k) == 0
    # An unknown instance.
    code, details = await refused(save(s, item(new_key(), "A", {"a": 1}, state_mode=ADD, complete_instance=True)))
    assert code == grpc.StatusCode.NOT_FOUND and "StartOrResume" in details
    # A failed instance: its newest checkpoint saved again with the flag cannot complete it.
    await save(s, item(failed, "A", {"a": 1}))
    await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
        workflow_id=WF, instance_key=failed, execution_id="exec-1", error_message="declined"), metadata=s.metadata)
    code, details = await refused(save(s, item(failed, "A", {"a": 1}, complete_instance=True)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "complete_instance" in details and "failed" in details
    assert (await get(s, failed)).status == common_pb2.INSTANCE_STATUS_FAILED
    # One batch may complete several instances, each on its last item.
    saved = (await save(s, item(key, "A", {"a": 1}), item(other, "A", {"a": 1}, complete_instance=True),
                        item(key, "B", {"b": 1}, complete_instance=True))).results
    assert [r.HasField("completed_instance") for r in saved] == [False, True, True]
    assert (await get(s, key)).status == COMPLETED and (await get(s, other)).status == COMPLETED
    assert (await get(s, key)).last_sequence == 2
