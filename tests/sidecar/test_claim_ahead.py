"""Claim-ahead: a Save's claim_next and a start's claim_on_start claim the next Guard's key in the same call.

Both backends, through the gRPC API. The claim is checked like a Claim item
before anything is written (a bad one changes nothing), made after the save
or the start (a claim that cannot be made then leaves the answer unset and the
save or start stands), and answered like the Claim RPC answers.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from durable.v1 import checkpoint_pb2, common_pb2, idempotency_pb2, instance_pb2
from durable_sidecar.domain import Claimed
from durable_sidecar.services.idempotency import ClaimItem, IdempotencyService

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.storage import count_checkpoints
from tests.sidecar.test_authoring import ACQUIRED, ADD, DUPLICATE, IN_PROGRESS, SCOPE, claim, get, get_key, refused
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start

PAYLOAD = b'{"amount":42}'


def ahead(key: str, holder: str = "exec-1", *, scope: str = SCOPE, payload_json: bytes = PAYLOAD,
          **kw: Any) -> idempotency_pb2.ClaimItem:
    """A claim_next / claim_on_start item."""
    return idempotency_pb2.ClaimItem(scope=scope, key=key, holder=holder, payload_json=payload_json, **kw)


async def sequence(s: Stubs, key: str) -> int:
    """The newest checkpoint's sequence (GetLatestCheckpoint), 0 when the instance has none."""
    try:
        reply = await s.checkpoints.GetLatestCheckpoint(
            checkpoint_pb2.GetLatestCheckpointRequest(workflow_id=WF, instance_key=key), metadata=s.metadata)
    except grpc.aio.AioRpcError as err:
        if err.code() == grpc.StatusCode.NOT_FOUND and "no checkpoints" in (err.details() or ""):
            return 0
        raise
    seq: int = reply.checkpoint.sequence
    return seq


async def no_key(s: Stubs, key: str) -> bool:
    code, _ = await refused(s.idempotency.GetKey(idempotency_pb2.GetKeyRequest(scope=SCOPE, key=key),
                                                 metadata=s.metadata))
    found: bool = code == grpc.StatusCode.NOT_FOUND
    return found


def same_key(a: idempotency_pb2.IdempotencyKey, b: idempotency_pb2.IdempotencyKey) -> bool:
    return (a.status, a.attempt, a.fingerprint, a.lease_expires_at, a.updated_at) == \
        (b.status, b.attempt, b.fingerprint, b.lease_expires_at, b.updated_at)


async def test_a_save_claims_the_next_key_and_a_retried_save_gets_the_same_attempt(harness: Harness,
                                                                                  database_url: str) -> None:
    s = harness.alpha
    for mode in (0, ADD):  # a plain save and a step result (their one-statement paths where the backend has them)
        key, charge = new_key(), new_key()
        await start(s, key, "exec-1", start_item_json=b'{"orderId":"o-1"}')
        sent = item(key, "Pay", {"paid": True}, state_mode=mode, claim_next=ahead(charge))
        first = (await save(s, sent)).results[0]
        assert first.checkpoint.sequence == 1 and not first.deduplicated
        assert first.HasField("next_claim")
        assert first.next_claim.outcome == ACQUIRED and first.next_claim.key.attempt == 1
        assert first.next_claim.key.key == charge and first.next_claim.key.scope == SCOPE
        held = await get_key(s, charge)
        assert held.status == idempotency_pb2.KEY_STATUS_IN_PROGRESS and held.attempt == 1
        # Held by the item's holder: a Claim by it is its own retry, by anyone else IN_PROGRESS.
        assert (await claim(s, charge, "exec-2")).outcome == IN_PROGRESS
        # The same Save again (a retry whose answer was lost): the checkpoint deduplicates, the claim is
        # the holder's own retry.
        retried = (await save(s, sent)).results[0]
        assert retried.deduplicated and retried.checkpoint.sequence == 1
        assert retried.next_claim.outcome == ACQUIRED and retried.next_claim.key.attempt == 1
        assert (await get_key(s, charge)).attempt == 1
        assert await count_checkpoints(database_url, key) == 1


async def test_a_completed_next_key_is_answered_duplicate_with_its_result(harness: Harness) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key, "exec-1")
    claimed = await claim(s, charge, "exec-0")
    await s.idempotency.Complete(idempotency_pb2.CompleteRequest(
        scope=SCOPE, key=charge, attempt=claimed.key.attempt, result_json=b'{"chargeId":"ch_1"}'),
        metadata=s.metadata)
    result = (await save(s, item(key, "Pay", {"paid": True}, claim_next=ahead(charge)))).results[0]
    assert result.checkpoint.sequence == 1
    assert result.next_claim.outcome == DUPLICATE
    assert result.next_claim.key.status == idempotency_pb2.KEY_STATUS_COMPLETED
    assert result.next_claim.key.result_json == b'{"chargeId":"ch_1"}'


async def test_a_claim_that_cannot_be_made_leaves_next_claim_unset_and_the_save_stands(harness: Harness) -> None:
    s = harness.alpha
    key, used, fresh = new_key(), new_key(), new_key()
    await start(s, key, "exec-1")
    await claim(s, used, "exec-0")  # with {"amount":42}
    before = await get_key(s, used)
    # The batch's claims are one Claim: the mismatch of one leaves every next_claim unset, claims nothing.
    reply = await save(s, item(key, "Pay", {"paid": True}, claim_next=ahead(used, payload_json=b'{"amount":43}')),
                       item(key, "Ship", {"shipped": True}, claim_next=ahead(fresh)))
    assert [r.checkpoint.sequence for r in reply.results] == [1, 2]
    assert not any(r.deduplicated for r in reply.results)
    assert not any(r.HasField("next_claim") for r in reply.results)
    assert await sequence(s, key) == 2
    assert same_key(await get_key(s, used), before)
    assert await no_key(s, fresh)
    # The same key with its own payload is claimed: held by exec-0, so IN_PROGRESS.
    again = (await save(s, item(key, "Bill", {"billed": True}, claim_next=ahead(used)))).results[0]
    assert again.checkpoint.sequence == 3
    assert again.next_claim.outcome == IN_PROGRESS and again.next_claim.key.attempt == before.attempt


async def test_a_bad_claim_next_is_invalid_and_changes_nothing(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key, "exec-1")
    await save(s, item(key, "Pay", {"paid": True}))
    bad = [
        (ahead(charge, scope=""), "items[0].claim_next: scope is required"),
        (ahead("k" * 300), "items[0].claim_next.key"),
        (ahead(charge, lease_seconds=999_999), "items[0].claim_next: lease_seconds"),
        (ahead(charge, fingerprint="a" * 64), "items[0].claim_next: set payload_json or fingerprint, not both"),
    ]
    for claim_next, named in bad:
        code, details = await refused(save(s, item(key, "Ship", {"shipped": True}, claim_next=claim_next)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        assert named in details, details
    # In a batch: the item is named, and the good item before it is not saved either.
    code, details = await refused(save(s, item(key, "Ship", {"shipped": True}, claim_next=ahead(charge)),
                                       item(key, "Bill", {"billed": True}, claim_next=ahead(new_key(), scope=""))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "items[1].claim_next" in details, details
    assert await sequence(s, key) == 1
    assert await count_checkpoints(database_url, key) == 1
    assert await no_key(s, charge)


async def test_claim_next_with_complete_instance_or_twice_in_a_batch_is_invalid(harness: Harness,
                                                                                  database_url: str) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key, "exec-1")
    code, details = await refused(save(s, item(key, "Done", {"done": True}, complete_instance=True,
                                               claim_next=ahead(charge))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "items[0].claim_next" in details and "complete_instance" in details, details
    inst = await get(s, key)
    assert inst.status == common_pb2.INSTANCE_STATUS_RUNNING and inst.last_sequence == 0
    assert await count_checkpoints(database_url, key) == 0
    assert await no_key(s, charge)
    # The same key twice among a batch's claims.
    other = new_key()
    await start(s, other, "exec-1")
    code, details = await refused(save(s, item(key, "Pay", {"paid": True}, claim_next=ahead(charge)),
                                       item(other, "Pay", {"paid": True}, claim_next=ahead(charge))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "items[1].claim_next" in details and "items[0].claim_next" in details, details
    assert await sequence(s, key) == 0 and await sequence(s, other) == 0
    assert await no_key(s, charge)


async def test_a_start_claims_on_start_only_when_it_started(harness: Harness) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    started = await start(s, key, "exec-1", claim_on_start=ahead(charge, holder="exec-1"))
    assert started.outcome == instance_pb2.START_OUTCOME_STARTED
    assert started.start_claim.outcome == ACQUIRED and started.start_claim.key.attempt == 1
    held = await get_key(s, charge)
    assert held.status == idempotency_pb2.KEY_STATUS_IN_PROGRESS and held.attempt == 1
    assert (await claim(s, charge, "exec-2")).outcome == IN_PROGRESS  # held by exec-1
    held = await get_key(s, charge)
    # Another execution while exec-1 holds the lease: not started, nothing claimed.
    busy = await start(s, key, "exec-2", claim_on_start=ahead(charge, holder="exec-2"))
    assert busy.outcome != instance_pb2.START_OUTCOME_STARTED
    assert not busy.HasField("start_claim")
    assert same_key(await get_key(s, charge), held)
    # The starting execution's retry: STARTED again, the claim its own retry.
    retried = await start(s, key, "exec-1", claim_on_start=ahead(charge, holder="exec-1"))
    assert retried.outcome == instance_pb2.START_OUTCOME_STARTED
    assert retried.start_claim.outcome == ACQUIRED and retried.start_claim.key.attempt == 1
    # A fingerprint mismatch: the start stands, start_claim unset, the key unchanged.
    mismatch = new_key()
    held = await get_key(s, charge)
    started = await start(s, mismatch, "exec-1", claim_on_start=ahead(charge, payload_json=b'{"amount":43}'))
    assert started.outcome == instance_pb2.START_OUTCOME_STARTED and not started.HasField("start_claim")
    assert (await get(s, mismatch)).lease_owner == "exec-1"
    assert same_key(await get_key(s, charge), held)


async def test_a_bad_claim_on_start_is_invalid_and_starts_nothing(harness: Harness) -> None:
    s = harness.alpha
    key, charge = new_key(), new_key()
    for claim_on_start, named in (
        (ahead(charge, scope=""), "claim_on_start: scope is required"),
        (ahead(charge, lease_seconds=999_999), "claim_on_start: lease_seconds"),
        (ahead(charge, fingerprint="a" * 64), "claim_on_start: set payload_json or fingerprint, not both"),
        (ahead("k" * 300), "claim_on_start.key"),
    ):
        code, details = await refused(start(s, key, "exec-1", claim_on_start=claim_on_start))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        assert named in details, details
        code, _ = await refused(s.instances.GetInstance(
            instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key), metadata=s.metadata))
        assert code == grpc.StatusCode.NOT_FOUND
        assert await no_key(s, charge)


async def test_a_batch_answers_each_items_claim_in_request_order(harness: Harness) -> None:
    s = harness.alpha
    keys = [new_key() for _ in range(3)]
    charges = [new_key() for _ in range(3)]
    for key in keys:
        await start(s, key, "exec-1")
    # The middle key is completed already: its answer must stay in its place.
    done = await claim(s, charges[1], "exec-0")
    await s.idempotency.Complete(idempotency_pb2.CompleteRequest(
        scope=SCOPE, key=charges[1], attempt=done.key.attempt, result_json=b'{"n":2}'), metadata=s.metadata)
    for mode in (0, ADD):
        step = "Pay" if mode == 0 else "Ship"
        reply = await save(s, *[item(key, step, {"i": i}, state_mode=mode, claim_next=ahead(charge))
                                for i, (key, charge) in enumerate(zip(keys, charges, strict=True))])
        assert [r.checkpoint.instance_key for r in reply.results] == keys
        assert [r.next_claim.key.key for r in reply.results] == charges
        assert [r.next_claim.outcome for r in reply.results] == [ACQUIRED, DUPLICATE, ACQUIRED]
        assert reply.results[1].next_claim.key.result_json == b'{"n":2}'
        assert [r.next_claim.key.attempt for r in reply.results] == [1, 1, 1]


async def test_a_claim_on_start_with_lease_0_takes_the_new_instances_lease(harness: Harness) -> None:
    # As the Guard claims: lease 0 is the instance's lease length, not the keys' default.
    s = harness.alpha
    key, charge, own = new_key(), new_key(), new_key()
    started = await start(s, key, "exec-1", lease_seconds=240, claim_on_start=ahead(charge))
    held = started.start_claim.key
    assert round(held.lease_expires_at.ToSeconds() - held.updated_at.ToSeconds()) in (240, 241)
    # A lease of its own is kept.
    started = await start(s, new_key(), "exec-1", lease_seconds=240, claim_on_start=ahead(own, lease_seconds=30))
    held = started.start_claim.key
    assert round(held.lease_expires_at.ToSeconds() - held.updated_at.ToSeconds()) in (30, 31)


async def test_a_new_next_key_is_claimed_by_the_writes_own_statement_where_the_backend_has_one(
        harness: Harness, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # PostgreSQL: the start's statement (start_new_txn) and the step save's (durable_save_step_then, 0012)
    # insert a new key themselves, so no Claim follows the write; the embedded backend claims after it.
    # Either way the key is the one the Claim RPC would have written.
    calls: list[list[str]] = []
    original = IdempotencyService.claim

    async def counted(self: IdempotencyService, namespace: str, items: list[ClaimItem]) -> list[Claimed]:
        calls.append([i.key for i in items])
        return await original(self, namespace, items)

    monkeypatch.setattr(IdempotencyService, "claim", counted)
    s = harness.alpha
    key, charge, ship, reference = new_key(), new_key(), new_key(), new_key()
    started = await start(s, key, "exec-1", start_item_json=b'{"orderId":"o-1"}', claim_on_start=ahead(charge))
    assert started.start_claim.outcome == ACQUIRED and started.start_claim.key.attempt == 1
    saved = (await save(s, item(key, "Pay", {"paid": True}, state_mode=ADD, claim_next=ahead(ship)))).results[0]
    assert saved.checkpoint.sequence == 1
    assert saved.next_claim.outcome == ACQUIRED and saved.next_claim.key.attempt == 1
    assert calls == ([] if backend == "postgres" else [[charge], [ship]])
    by_rpc = (await claim(s, reference, "exec-1")).key  # the same payload through the Claim RPC
    for answer, name in ((started.start_claim.key, charge), (saved.next_claim.key, ship)):
        held = await get_key(s, name)
        assert same_key(held, answer)
        assert held.status == idempotency_pb2.KEY_STATUS_IN_PROGRESS and held.fingerprint == by_rpc.fingerprint
        # Held by exec-1: its own claim is a retry (same attempt), anyone else's IN_PROGRESS.
        assert (await claim(s, name, "exec-2")).outcome == IN_PROGRESS
        assert (await claim(s, name, "exec-1")).key.attempt == 1
        assert held.expires_at.ToSeconds() - held.created_at.ToSeconds() == \
            by_rpc.expires_at.ToSeconds() - by_rpc.created_at.ToSeconds()
    calls.clear()
    # A key that exists already is left to the Claim path (here the holder's own retry: the same attempt).
    again = (await save(s, item(key, "Ship", {"shipped": True}, state_mode=ADD, claim_next=ahead(ship)))).results[0]
    assert again.checkpoint.sequence == 2
    assert again.next_claim.outcome == ACQUIRED and again.next_claim.key.attempt == 1
    assert calls == [[ship]]


async def test_a_refused_step_save_claims_nothing(harness: Harness) -> None:
    # The claim rides on the write: a save fenced off by its expected sequence, or to a finished instance,
    # leaves the next key unseen.
    s = harness.alpha
    key, charge = new_key(), new_key()
    await start(s, key, "exec-1", start_item_json=b'{"orderId":"o-1"}')
    code, details = await refused(save(s, item(key, "Pay", {"paid": True}, state_mode=ADD, expected_sequence=3,
                                                  claim_next=ahead(charge))))
    assert code == grpc.StatusCode.ABORTED, details
    assert await no_key(s, charge) and await sequence(s, key) == 0
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(workflow_id=WF, instance_key=key,
                                                                               execution_id="exec-1"),
                                       metadata=s.metadata)
    code, details = await refused(save(s, item(key, "Pay", {"paid": True}, state_mode=ADD,
                                                  claim_next=ahead(charge))))
    assert code == grpc.StatusCode.FAILED_PRECONDITION, details
    assert await no_key(s, charge)
