"""The nodes' step-result save in one statement (PostgreSQL, migration 0010) and every case it hands back.

The sidecar merges a step result into the state it remembers for the instance
(memory/states.py) and writes with durable_save_step(), which checks that
the instance still stands where that state says. These tests change the
instance behind the remembered state (another sidecar process on the same
database, an expired key taken over, a retried save, a restart) and check that
the answer and the stored rows are what the transaction alone gives.
"""

from __future__ import annotations

import json
import uuid

import grpc
import pytest
from durable.v1 import checkpoint_pb2, idempotency_pb2
from durable_sidecar import app
from durable_sidecar.services import checkpoints as checkpoint_service
from prometheus_client import REGISTRY

from tests.conftest import Harness, make_settings
from tests.sidecar.helpers import Stubs, channel
from tests.sidecar.storage import count_checkpoints, fetch, is_sqlite
from tests.sidecar.test_authoring import SCOPE, claim, completing, expire_key_lease, get_key, refused
from tests.sidecar.test_checkpoints import item, latest, new_key, save, start

ADD = checkpoint_pb2.STATE_MODE_ADD_STEP_RESULT


def state_of(cp: checkpoint_pb2.Checkpoint) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(cp.state_json)
    return loaded


def step_saves(path: str) -> float:
    return REGISTRY.get_sample_value("durable_step_saves_total", {"path": path}) or 0.0


async def test_each_step_adds_to_the_state_and_completes_its_key(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    fast_before = step_saves("one_statement")
    await start(s, key, "exec-1", start_item_json=b'{"orderId":"o-1"}')
    for n, step in enumerate(("Pay", "Reserve", "Ship"), start=1):
        charge = new_key()
        claimed = await claim(s, charge, "exec-1")
        saved = (await save(s, item(key, step, {"step": step}, state_mode=ADD,
                                    complete_key=completing(charge, claimed.key.attempt)))).results[0]
        assert saved.checkpoint.sequence == n and not saved.deduplicated
        assert saved.completed_key.status == idempotency_pb2.KEY_STATUS_COMPLETED
        assert (await get_key(s, charge)).result_json == b'{"step": "' + step.encode() + b'"}'
    assert state_of(await latest(s, key)) == {"orderId": "o-1", "Pay": {"step": "Pay"},
                                              "Reserve": {"step": "Reserve"}, "Ship": {"step": "Ship"}}
    assert await count_checkpoints(database_url, key) == 3
    if not is_sqlite(database_url):  # each save merged into the state remembered from the one before
        assert step_saves("one_statement") - fast_before == 3


async def test_a_single_save_with_a_taken_over_attempt_writes_nothing(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key, "exec-1")
    await save(s, item(key, "First", {"a": 1}, state_mode=ADD))
    await claim(s, charge, "exec-1")
    await expire_key_lease(database_url, charge)
    assert (await claim(s, charge, "exec-2")).key.attempt == 2
    code, details = await refused(save(s, item(key, "Charge", {"c": 1}, state_mode=ADD,
                                               complete_key=completing(charge, 1))))
    assert code == grpc.StatusCode.ABORTED and f"{SCOPE}/{charge}" in details
    assert await count_checkpoints(database_url, key) == 1
    assert (await get_key(s, charge)).status == idempotency_pb2.KEY_STATUS_IN_PROGRESS
    # The holder of attempt 2 saves on the same remembered state.
    done = (await save(s, item(key, "Charge", {"c": 2}, "exec-2", state_mode=ADD,
                               complete_key=completing(charge, 2)))).results[0]
    assert done.checkpoint.sequence == 2 and done.completed_key.attempt == 2
    assert state_of(await latest(s, key)) == {"First": {"a": 1}, "Charge": {"c": 2}}


async def test_a_retried_save_is_the_checkpoint_already_there(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key, "exec-1", start_item_json=b'{"o":1}')
    claimed = await claim(s, charge, "exec-1")
    request = item(key, "Pay", {"paid": True}, state_mode=ADD, complete_key=completing(charge, claimed.key.attempt))
    first = (await save(s, request)).results[0]
    again = (await save(s, request)).results[0]
    assert again.deduplicated and again.checkpoint.sequence == first.checkpoint.sequence == 1
    assert again.completed_key.updated_at == first.completed_key.updated_at
    assert await count_checkpoints(database_url, key) == 1
    # An expected sequence that no longer holds is refused as before.
    code, _ = await refused(save(s, item(key, "Next", {"n": 1}, state_mode=ADD, expected_sequence=0)))
    assert code == grpc.StatusCode.ABORTED
    assert await count_checkpoints(database_url, key) == 1


async def test_two_sidecars_saving_one_instance_never_write_on_a_stale_state(postgres_url: str) -> None:
    token = f"t-{uuid.uuid4().hex[:10]}"
    settings = make_settings(postgres_url, auth_tokens=f"{token}=ns-{token}")
    one, two = await app.start(settings), await app.start(settings)
    ch_one, ch_two = channel(one.port), channel(two.port)
    a, b = Stubs(ch_one, token), Stubs(ch_two, token)
    try:
        key = new_key()
        slow_before = step_saves("transaction")
        await start(a, key, "exec-1", start_item_json=b'{"orderId":"o-2"}')
        # b saves first: a's remembered state (the start item, sequence 0) is now behind.
        await save(b, item(key, "Pay", {"p": 1}, state_mode=ADD))
        await save(a, item(key, "Reserve", {"r": 1}, state_mode=ADD))
        # b remembers sequence 1; the instance is at 2.
        charge = new_key()
        claimed = await claim(b, charge, "exec-1")
        shipped = (await save(b, item(key, "Ship", {"s": 1}, state_mode=ADD,
                                      complete_key=completing(charge, claimed.key.attempt)))).results[0]
        assert shipped.checkpoint.sequence == 3 and shipped.completed_key.status == idempotency_pb2.KEY_STATUS_COMPLETED
        assert state_of(await latest(a, key)) == {"orderId": "o-2", "Pay": {"p": 1}, "Reserve": {"r": 1},
                                                  "Ship": {"s": 1}}
        # A state rewritten behind both (an operator's hand on the newest checkpoint's hash): no fast write.
        # Reserve and Ship found their sidecar's remembered state behind: the transaction wrote them.
        assert step_saves("transaction") - slow_before >= 3
        # b remembers sequence 3, where the instance stands; a checkpoint rewritten behind it (an operator's
        # hand on its hash) is not the base b merged into: no one-statement write.
        await fetch(postgres_url, "UPDATE durable_checkpoints SET sha256 = repeat('0', 64) "
                                  "WHERE instance_key = %s AND sequence = 3", key)
        fast_before, slow_before = step_saves("one_statement"), step_saves("transaction")
        after = (await save(b, item(key, "Notify", {"n": 1}, state_mode=ADD))).results[0]
        assert after.checkpoint.sequence == 4
        assert (step_saves("one_statement") - fast_before, step_saves("transaction") - slow_before) == (0, 1)
        assert state_of(await latest(a, key))["Notify"] == {"n": 1}
        assert await count_checkpoints(postgres_url, key) == 4
        # Now b remembers what the transaction wrote: the next step is one statement again.
        await save(b, item(key, "Close", {"c": 1}, state_mode=ADD))
        assert step_saves("one_statement") - fast_before == 1
    finally:
        await ch_one.close()
        await ch_two.close()
        await one.stop(grace=0.5)
        await two.stop(grace=0.5)


@pytest.mark.parametrize("harness", [{"max_state_bytes": 4096, "max_message_bytes": 2 * 1024 * 1024}],
                         indirect=True)
async def test_a_step_that_makes_the_remembered_state_too_large_writes_nothing(harness: Harness,
                                                                              database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, start_item_json=json.dumps({"blob": "x" * 2000}).encode())
    await save(s, item(key, "Small", {"a": 1}, state_mode=ADD))
    code, details = await refused(save(s, item(key, "Big", {"more": "y" * 2500}, state_mode=ADD)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "items[0]" in details
    assert await count_checkpoints(database_url, key) == 1


@pytest.mark.parametrize("harness", [{"max_state_bytes": 4096, "max_message_bytes": 2 * 1024 * 1024}],
                         indirect=True)
async def test_a_save_the_one_statement_hands_back_merges_its_step_result_once(
        harness: Harness, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A retry and a state grown too large are handed back to the transaction, which finds the instance on the
    # remembered state: it reuses the merge (its bytes, or its refusal) instead of merging a second time.
    merged: list[str] = []
    merge = checkpoint_service.add_step_result

    def counted(current: bytes | None, step_name: str, result: bytes) -> bytes:
        merged.append(step_name)
        return merge(current, step_name, result)

    s = harness.alpha
    key = new_key()
    await start(s, key, start_item_json=json.dumps({"blob": "x" * 2000}).encode())
    monkeypatch.setattr(checkpoint_service, "add_step_result", counted)
    first = (await save(s, item(key, "Small", {"a": 1}, state_mode=ADD))).results[0]
    again = (await save(s, item(key, "Small", {"a": 1}, state_mode=ADD))).results[0]
    assert again.deduplicated and again.checkpoint.sequence == first.checkpoint.sequence == 1
    code, details = await refused(save(s, item(key, "Big", {"more": "y" * 2500}, state_mode=ADD)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "items[0]" in details
    assert merged == ["Small", "Small", "Big"]
    assert await count_checkpoints(database_url, key) == 1
