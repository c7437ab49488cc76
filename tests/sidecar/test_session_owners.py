"""A lease is never out in the world without the session it ends with (found by `make chaos`, seed 948601).

Every call that names a lease owner (an execution id, a key holder, a claim token) records the owner against its
session before it answers. Two ways a lease used to outlive its dead n8n process until its ceiling (30 minutes):

- the owner was kept in the sidecar's memory until its next sweep, so a sidecar killed in between forgot it;
- another replica ended the session before this one recorded the owner (after a database outage, the replica
  whose pool came back first), so the end freed nothing of it.

The grace is the default five seconds here: a sweep runs once a second, so what these tests see happens well
before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from durable.v1 import instance_pb2, session_pb2
from durable_sidecar import app

from tests.conftest import Harness, make_settings
from tests.sidecar.helpers import Stubs, channel
from tests.sidecar.storage import fetch
from tests.sidecar.test_checkpoints import WF, new_key
from tests.sidecar.test_sessions import claim, start_in

pytestmark = pytest.mark.parametrize("harness", [{"session_grace_seconds": 5.0}], indirect=True)


@pytest.fixture
async def b(harness: Harness, database_url: str) -> AsyncIterator[Stubs]:
    """A second replica on the same database (its own sweeps and its own view of which sessions ended)."""
    second = await app.start(make_settings(database_url, auth_tokens=harness.sidecar.settings.auth_tokens,
                                           session_grace_seconds=5.0))
    ch = channel(second.port)
    try:
        yield Stubs(ch, harness.alpha.token)
    finally:
        await ch.close()
        await second.stop(grace=0.5)


async def open_session(s: Stubs) -> str:
    reply = await s.sessions.OpenSession(session_pb2.OpenSessionRequest(host="n8n-host-1", pid=4242, mode="regular",
                                                                        client="test"), metadata=s.metadata)
    return reply.session.session_id


async def test_a_call_records_its_owner_before_it_answers(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    sid = await open_session(s)
    await start_in(s, sid, new_key(), "exec-owner-1")
    # No sweep has run since the call (one a second): the row is there because the call wrote it.
    rows = await fetch(database_url, "SELECT session_id FROM durable_session_owners WHERE owner = %s", "exec-owner-1")
    assert rows == [(sid,)]


@pytest.mark.postgres_only(reason="the embedded database is one sidecar's file: no second replica can open it")
async def test_a_call_that_a_replica_admits_after_another_ended_its_session_leaves_no_lease(
        harness: Harness, b: Stubs) -> None:
    a = harness.alpha
    admitted = 0
    for attempt in range(5):
        sid = await open_session(a)
        await b.sessions.Heartbeat(session_pb2.HeartbeatRequest(session_id=sid), metadata=b.metadata)
        await start_in(b, sid, new_key(), f"exec-early-{attempt}")  # b knows the session as live
        await a.sessions.CloseSession(session_pb2.CloseSessionRequest(session_id=sid), metadata=a.metadata)
        # b learns of the end only at its next sweep (within a second): a call in the meantime is let in.
        key = new_key()
        try:
            await start_in(b, sid, key, f"exec-late-{attempt}")
        except grpc.aio.AioRpcError as refused:
            assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION  # b had swept already: fine, again
            continue
        admitted += 1
        # The process is gone with its session: the instance it started is free for the Resume Trigger now,
        # not after the lease's ceiling.
        assert key in [r.instance.instance_key for r in await claim(a)]
        break
    assert admitted == 1, "every late call was refused: the race this test is about never happened"


@pytest.mark.postgres_only(reason="the embedded database is one sidecar's file: no second replica can open it")
async def test_a_resume_trigger_stream_whose_session_ended_stops_and_spends_no_resumes(
        harness: Harness, database_url: str, b: Stubs) -> None:
    """Found by `make chaos` (queue mode): a WatchResumable stream of an ended session went on claiming; each claim
    counted an automatic resume and was freed at once (its session had ended), so a healthy instance spent its 20
    automatic resumes in a second and was suspended."""
    a = harness.alpha
    trigger, order = await open_session(a), await open_session(a)
    await b.sessions.Heartbeat(session_pb2.HeartbeatRequest(session_id=trigger), metadata=b.metadata)
    key = new_key()
    await start_in(a, order, key, "exec-order")
    stream = b.instances.WatchResumable(instance_pb2.WatchResumableRequest(
        workflow_ids=[WF], claimant="trigger", max_instances=10, poll_interval_ms=600_000),
        metadata=b.in_session(trigger))
    assert not (await stream.read()).instances  # the first look: nothing to resume
    # Both processes are gone: the order's instance is free, and the trigger's stream is of a dead session.
    for sid in (trigger, order):
        await a.sessions.CloseSession(session_pb2.CloseSessionRequest(session_id=sid), metadata=a.metadata)
    with pytest.raises(grpc.aio.AioRpcError) as stopped:
        for _ in range(50):
            reply = await asyncio.wait_for(stream.read(), timeout=10)
            assert reply is not grpc.aio.EOF
    assert stopped.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "session ended" in (stopped.value.details() or "")
    [(attempt, suspended)] = await fetch(
        database_url, "SELECT attempt, suspended_at IS NOT NULL FROM durable_instances WHERE instance_key = %s", key)
    assert not suspended and attempt <= 1, (attempt, suspended)
    assert key in [r.instance.instance_key for r in await claim(a)]  # a live process resumes it
