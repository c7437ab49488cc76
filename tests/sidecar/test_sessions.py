"""Sessions: a lease lives as long as the n8n process that holds it (issue 39), on both backends.

The grace is one second here (DURABLE_SESSION_GRACE_SECONDS, documented) so the
suite stays quick; the default is five. Expiry, the grace, takeover, fencing
after expiry, two replicas sharing sessions, and a sidecar restart that frees
nothing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest
from durable.v1 import idempotency_pb2, instance_pb2, session_pb2
from durable_sidecar import app

from tests.conftest import Harness, make_settings
from tests.sidecar.helpers import Stubs, channel
from tests.sidecar.storage import fetch
from tests.sidecar.test_checkpoints import WF, item, new_key

GRACE = 1.0
pytestmark = pytest.mark.parametrize("harness", [{"session_grace_seconds": GRACE}], indirect=True)


async def open_session(s: Stubs, pid: int = 4242, mode: str = "worker") -> str:
    reply = await s.sessions.OpenSession(session_pb2.OpenSessionRequest(host="n8n-host-1", pid=pid, mode=mode,
                                                                        client="test"), metadata=s.metadata)
    assert reply.heartbeat_interval_ms == 200 and reply.grace_ms == 1000
    return reply.session.session_id


async def beat(s: Stubs, sid: str) -> session_pb2.HeartbeatResponse:
    return await s.sessions.Heartbeat(session_pb2.HeartbeatRequest(session_id=sid), metadata=s.metadata)


async def start_in(s: Stubs, sid: str, key: str, execution: str, **kw: Any) -> instance_pb2.StartOrResumeResponse:
    return await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
        workflow_id=WF, instance_key=key, execution_id=execution, **kw), metadata=s.in_session(sid))


async def save_in(s: Stubs, sid: str, key: str, step: str, execution: str) -> Any:
    from durable.v1 import checkpoint_pb2
    return await s.checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(
        items=[item(key, step, {"step": step}, execution)]), metadata=s.in_session(sid))


async def claim(s: Stubs) -> list[instance_pb2.ResumableInstance]:
    reply = await s.instances.ClaimResumable(instance_pb2.ClaimResumableRequest(claimant="trigger", workflow_ids=[WF],
                                                                                max_instances=100),
                                             metadata=s.metadata)
    return list(reply.instances)


async def keep_alive(s: Stubs, sid: str, seconds: float) -> None:
    """Heartbeats every 0.2 s (the interval the sidecar asks for) for `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert not (await beat(s, sid)).ended
        await asyncio.sleep(0.2)


async def until_ended(s: Stubs, sid: str, limit: float = 15.0) -> session_pb2.Session:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        reply = await s.sessions.ListSessions(session_pb2.ListSessionsRequest(), metadata=s.metadata)
        found = [x for x in reply.sessions if x.session_id == sid]
        if found and found[0].end_reason:
            return found[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"session {sid} did not end within {limit} s")


async def test_the_lease_length_stays_a_ceiling_under_a_live_session(harness: Harness) -> None:
    s = harness.alpha
    sid = await open_session(s)
    key = new_key()
    await start_in(s, sid, key, "exec-1", lease_seconds=1)
    await keep_alive(s, sid, 3 * GRACE + 1)
    # A lease given its own length (1 s) lapses after it though its session lives: a hung call is resumed.
    assert [r.instance.instance_key for r in await claim(s) if r.instance.instance_key == key] == [key]


async def test_a_silent_session_ends_after_the_grace_and_frees_its_lease(harness: Harness) -> None:
    s = harness.alpha
    sid = await open_session(s)
    key = new_key()
    await start_in(s, sid, key, "exec-1")  # default lease: the ceiling (30 minutes)
    await save_in(s, sid, key, "Pay", "exec-1")
    await keep_alive(s, sid, 2 * GRACE)
    assert key not in [r.instance.instance_key for r in await claim(s)], "a live session's lease was taken"
    # The process dies: no more heartbeats.
    ended = await until_ended(s, sid)
    assert ended.end_reason == "expired" and ended.leases_freed == 1
    assert ended.ended_at.ToDatetime() >= ended.last_heartbeat_at.ToDatetime()
    claimed = [r for r in await claim(s) if r.instance.instance_key == key]
    assert len(claimed) == 1 and claimed[0].latest_checkpoint.step_name == "Pay"
    assert (await beat(s, sid)).ended


async def test_after_expiry_the_old_process_is_fenced_and_the_resumed_execution_wins(harness: Harness) -> None:
    s = harness.alpha
    old = await open_session(s, pid=1)
    key = new_key()
    await start_in(s, old, key, "exec-1")
    await until_ended(s, old)
    [resumable] = [r for r in await claim(s) if r.instance.instance_key == key]
    new = await open_session(s, pid=2)
    taken = await start_in(s, new, key, "exec-2", claim_token=resumable.claim_token)
    assert taken.outcome == instance_pb2.START_OUTCOME_RESUMED
    # The old process wakes up: every call it makes with its ended session is refused and changes nothing.
    for call in (lambda: save_in(s, old, key, "Pay", "exec-1"),
                 lambda: start_in(s, old, key, "exec-1"),
                 lambda: s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
                     workflow_id=WF, instance_key=key, execution_id="exec-1"), metadata=s.in_session(old))):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call()
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "session ended" in (refused.value.details() or "")
    got = await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                        metadata=s.metadata)
    assert got.instance.lease_owner == "exec-2" and got.instance.last_sequence == 0
    saved = await save_in(s, new, key, "Pay", "exec-2")
    assert saved.results[0].checkpoint.sequence == 1


async def test_closing_a_session_frees_its_leases_and_keys_at_once(harness: Harness) -> None:
    s = harness.alpha
    sid = await open_session(s)
    key = new_key()
    await start_in(s, sid, key, "exec-1")
    ref = idempotency_pb2.ClaimItem(scope="pay", key=f"{key}-charge", holder="exec-1")
    claimed = await s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[ref]), metadata=s.in_session(sid))
    assert claimed.results[0].outcome == idempotency_pb2.CLAIM_OUTCOME_ACQUIRED
    closed = await s.sessions.CloseSession(session_pb2.CloseSessionRequest(session_id=sid), metadata=s.metadata)
    assert closed.session.end_reason == "closed" and closed.session.leases_freed == 2
    again = await s.sessions.CloseSession(session_pb2.CloseSessionRequest(session_id=sid), metadata=s.metadata)
    assert again.session.ended_at == closed.session.ended_at  # retry-safe
    assert key in [r.instance.instance_key for r in await claim(s)]
    other = idempotency_pb2.ClaimItem(scope="pay", key=f"{key}-charge", holder="exec-2")
    retaken = await s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[other]), metadata=s.metadata)
    assert retaken.results[0].outcome == idempotency_pb2.CLAIM_OUTCOME_ACQUIRED
    assert retaken.results[0].key.attempt == 2


async def test_a_session_of_another_namespace_is_not_visible(harness: Harness) -> None:
    sid = await open_session(harness.alpha)
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await beat(harness.beta, sid)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await start_in(harness.beta, sid, new_key(), "exec-1")
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    listed = await harness.beta.sessions.ListSessions(session_pb2.ListSessionsRequest(), metadata=harness.beta.metadata)
    assert sid not in [x.session_id for x in listed.sessions]


@pytest.mark.parametrize("request_fields, field", [
    ({"host": "", "pid": 1, "mode": "worker"}, "host"),
    ({"host": "h\x00", "pid": 1, "mode": "worker"}, "host"),
    ({"host": "h", "pid": 0, "mode": "worker"}, "pid"),
    ({"host": "h", "pid": -5, "mode": "worker"}, "pid"),
    ({"host": "h", "pid": 1, "mode": "queue"}, "mode"),
    ({"host": "h" * 256, "pid": 1, "mode": "main"}, "host"),
])
async def test_a_bad_open_is_refused_and_opens_nothing(harness: Harness, request_fields: dict[str, Any],
                                                        field: str) -> None:
    s = harness.alpha
    before = await s.sessions.ListSessions(session_pb2.ListSessionsRequest(), metadata=s.metadata)
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await s.sessions.OpenSession(session_pb2.OpenSessionRequest(**request_fields), metadata=s.metadata)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in (bad.value.details() or "")
    after = await s.sessions.ListSessions(session_pb2.ListSessionsRequest(), metadata=s.metadata)
    assert len(after.sessions) == len(before.sessions)


@pytest.mark.parametrize("session_id, code", [
    ("", grpc.StatusCode.INVALID_ARGUMENT),
    ("not a session!", grpc.StatusCode.INVALID_ARGUMENT),
    ("s-00000000000000000000000000000000", grpc.StatusCode.NOT_FOUND),
])
async def test_a_heartbeat_for_no_session_is_refused(harness: Harness, session_id: str,
                                                     code: grpc.StatusCode) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await beat(harness.alpha, session_id)
    assert bad.value.code() == code


async def test_a_call_with_an_unknown_session_is_refused_and_changes_nothing(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await start_in(s, "s-ffffffffffffffffffffffffffffffff", key, "exec-1")
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                      metadata=s.metadata)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


async def test_the_resume_trigger_stream_claims_at_once_when_a_session_ends(harness: Harness) -> None:
    s = harness.alpha
    sid = await open_session(s)
    key = new_key()
    await start_in(s, sid, key, "exec-1")
    stream = s.instances.WatchResumable(instance_pb2.WatchResumableRequest(
        claimant="trigger", workflow_ids=[WF], max_instances=10, poll_interval_ms=600_000), metadata=s.metadata)
    started = time.monotonic()
    try:
        async for batch in stream:
            if any(r.instance.instance_key == key for r in batch.instances):
                break
    finally:
        stream.cancel()
    # The stream polls every ten minutes; the session's end woke it.
    assert time.monotonic() - started < 60


@pytest.mark.postgres_only(reason="the embedded database is one sidecar's file: no second replica can open it")
async def test_two_replicas_share_sessions(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    second = await app.start(make_settings(database_url, auth_tokens=_tokens(harness),
                                           session_grace_seconds=GRACE))
    ch = channel(second.port)
    try:
        b = Stubs(ch, s.token)
        sid = await open_session(s)
        key = new_key()
        await start_in(b, sid, key, "exec-1")  # the call went through the other replica
        for _ in range(int(3 * GRACE / 0.2)):  # heartbeats alternate between the replicas
            assert not (await beat(s, sid)).ended
            await asyncio.sleep(0.1)
            assert not (await beat(b, sid)).ended
            await asyncio.sleep(0.1)
        assert key not in [r.instance.instance_key for r in await claim(b)]
        ended = await until_ended(b, sid)
        assert ended.leases_freed == 1
        await asyncio.sleep(3 * 0.2)  # each replica learns of it at its next sweep (every heartbeat interval)
        # Both replicas refuse the ended session.
        for stubs in (s, b):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await save_in(stubs, sid, key, "Pay", "exec-1")
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        await ch.close()
        await second.stop(grace=0.5)


async def test_a_sidecar_restart_frees_nothing_of_a_live_process(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    sid = await open_session(s)
    key = new_key()
    await start_in(s, sid, key, "exec-1")
    await keep_alive(s, sid, 0.5)
    await harness.sidecar.stop(grace=0.5)
    await asyncio.sleep(3 * GRACE)  # the sidecar is down longer than the grace; the process heartbeats in vain
    restarted = await app.start(make_settings(database_url, auth_tokens=_tokens(harness),
                                              session_grace_seconds=GRACE))
    ch = channel(restarted.port)
    try:
        again = Stubs(ch, s.token)
        await keep_alive(again, sid, 3 * GRACE)  # the process finds the sidecar again and heartbeats
        assert key not in [r.instance.instance_key for r in await claim(again)]
        saved = await save_in(again, sid, key, "Pay", "exec-1")
        assert saved.results[0].checkpoint.sequence == 1
    finally:
        await ch.close()
        await restarted.stop(grace=0.5)


def _tokens(harness: Harness) -> str:
    return harness.sidecar.settings.auth_tokens


async def test_a_watch_hears_the_end_of_its_session(harness: Harness) -> None:
    s = harness.alpha
    sid = await open_session(s)
    stream = s.sessions.WatchSession(session_pb2.WatchSessionRequest(session_id=sid), metadata=s.metadata)
    first = await stream.read()
    assert not first.ended
    await s.sessions.CloseSession(session_pb2.CloseSessionRequest(session_id=sid), metadata=s.metadata)
    last = await stream.read()
    assert last.ended and last.end_reason == "closed"


async def test_when_the_watching_process_goes_away_its_session_has_two_heartbeats_left(
        harness: Harness, database_url: str) -> None:
    s = harness.alpha
    sid = await open_session(s)
    stream = s.sessions.WatchSession(session_pb2.WatchSessionRequest(session_id=sid), metadata=s.metadata)
    assert not (await stream.read()).ended
    await beat(s, sid)
    stream.cancel()  # the process exited: its connection closed
    life = "alive_until - last_heartbeat_at"
    for _ in range(100):
        [(left, )] = await fetch(database_url, f"SELECT {life} FROM durable_sessions WHERE session_id = %s", sid)
        if left is not None and _seconds(left) < GRACE - 0.1:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the session kept its whole grace after its watcher went away")
    assert _seconds(left) <= 2 * 0.2 + 0.5  # two heartbeat intervals from the cut (and the cut after the beat)
    ended = await until_ended(s, sid)
    assert ended.end_reason == "expired"


async def test_a_watch_of_no_session_is_refused(harness: Harness) -> None:
    stream = harness.alpha.sessions.WatchSession(
        session_pb2.WatchSessionRequest(session_id="s-00000000000000000000000000000000"),
        metadata=harness.alpha.metadata)
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await stream.read()
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def _seconds(value: Any) -> float:
    """An interval as PostgreSQL (timedelta) or the embedded database (microseconds) gives it."""
    return value.total_seconds() if hasattr(value, "total_seconds") else value / 1_000_000


async def test_a_process_releases_the_leases_of_its_failed_executions(harness: Harness) -> None:
    s = harness.alpha
    sid = await open_session(s)
    failed, running = new_key(), new_key()
    await start_in(s, sid, failed, "exec-failed")
    await start_in(s, sid, running, "exec-running")
    answer = await s.sessions.Heartbeat(session_pb2.HeartbeatRequest(session_id=sid, released_owners=["exec-failed"]),
                                        metadata=s.metadata)
    assert not answer.ended
    claimed = [r.instance.instance_key for r in await claim(s)]
    assert failed in claimed and running not in claimed


async def test_a_bad_release_is_refused_and_releases_nothing(harness: Harness) -> None:
    s = harness.alpha
    sid = await open_session(s)
    key = new_key()
    await start_in(s, sid, key, "exec-1")
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await s.sessions.Heartbeat(session_pb2.HeartbeatRequest(session_id=sid, released_owners=["exec-1", "a\x00"]),
                                   metadata=s.metadata)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert key not in [r.instance.instance_key for r in await claim(s)]


async def test_an_instance_names_the_n8n_process_that_holds_it(harness: Harness) -> None:
    s = harness.alpha
    sid = await open_session(s, pid=777, mode="worker")
    key = new_key()
    await start_in(s, sid, key, "exec-held")
    for _ in range(50):
        got = await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=key),
                                            metadata=s.metadata)
        if got.HasField("lease_holder"):
            break
        await asyncio.sleep(0.1)
    assert got.instance.lease_owner == "exec-held"
    assert (got.lease_holder.session_id, got.lease_holder.pid, got.lease_holder.mode, got.lease_holder.host) == (
        sid, 777, "worker", "n8n-host-1")
    alone = new_key()
    await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=alone,
                                                                      execution_id="exec-no-session"),
                                    metadata=s.metadata)
    plain = await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=alone),
                                          metadata=s.metadata)
    assert not plain.HasField("lease_holder")


async def test_a_process_renews_the_leases_of_executions_n8n_says_still_run(harness: Harness) -> None:
    s = harness.alpha
    sid = await open_session(s)
    running, hung = new_key(), new_key()
    await start_in(s, sid, running, "exec-long-call", lease_seconds=2)
    await start_in(s, sid, hung, "exec-hung", lease_seconds=2)
    for _ in range(4):  # 3 s: past both leases' own length
        await asyncio.sleep(0.75)
        await s.sessions.Heartbeat(session_pb2.HeartbeatRequest(session_id=sid, running_owners=["exec-long-call"]),
                                   metadata=s.metadata)
    claimed = [r.instance.instance_key for r in await claim(s)]
    assert running not in claimed, "a lease renewed as running was taken"
    assert hung in claimed, "a lease nobody renewed outlived its ceiling"
    # A lapsed lease is never renewed back.
    await asyncio.sleep(2.5)
    await s.sessions.Heartbeat(session_pb2.HeartbeatRequest(session_id=sid, running_owners=["exec-hung"]),
                               metadata=s.metadata)
    got = await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=hung),
                                        metadata=s.metadata)
    assert got.instance.lease_owner != "exec-hung"


async def test_a_process_renews_the_key_leases_of_executions_n8n_says_still_run(harness: Harness) -> None:
    """A Claim of a Guard used without a Resume Point has no instance lease behind it: while n8n says the
    execution still runs (a call longer than the key's lease), its key is not taken over."""
    s = harness.alpha
    sid = await open_session(s)
    running, hung = f"{new_key()}-long", f"{new_key()}-hung"
    for key, holder in ((running, "exec-long-key"), (hung, "exec-hung-key")):
        first = await s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[idempotency_pb2.ClaimItem(
            scope="notify", key=key, holder=holder, lease_seconds=2)]), metadata=s.in_session(sid))
        assert first.results[0].outcome == idempotency_pb2.CLAIM_OUTCOME_ACQUIRED
    for _ in range(4):  # 3 s: past both leases' own length
        await asyncio.sleep(0.75)
        await s.sessions.Heartbeat(session_pb2.HeartbeatRequest(session_id=sid, running_owners=["exec-long-key"]),
                                   metadata=s.metadata)

    async def claim_by_another(key: str) -> int:
        again = await s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[idempotency_pb2.ClaimItem(
            scope="notify", key=key, holder="exec-redelivery", lease_seconds=2)]), metadata=s.metadata)
        return int(again.results[0].outcome)

    assert await claim_by_another(running) == idempotency_pb2.CLAIM_OUTCOME_IN_PROGRESS, "a running key was taken"
    assert await claim_by_another(hung) == idempotency_pb2.CLAIM_OUTCOME_ACQUIRED, "an unvouched key outlived its lease"
