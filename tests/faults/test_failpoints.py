"""Crash the sidecar (os._exit) at each failpoint of a checkpoint save; nothing acknowledged is lost."""

from __future__ import annotations

import grpc
import pytest

from tests.faults.infra import check_invariants
from tests.faults.report import TALLY
from tests.sidecar.helpers import SidecarProcess, Stubs, channel, redis_server
from tests.sidecar.storage import fetch_sync
from tests.sidecar.test_checkpoints import item, latest, new_key, save, start

POINTS = ["checkpoint.before_insert", "checkpoint.after_insert", "checkpoint.after_commit", "checkpoint.before_cache"]


def _rows(database_url: str, key: str) -> int:
    return int(fetch_sync(database_url, "SELECT count(*) FROM durable_checkpoints WHERE instance_key = %s", key)[0][0])


@pytest.mark.parametrize("point", POINTS)
async def test_crash_at_failpoint_loses_nothing_acknowledged_and_retry_converges(database_url: str, point: str) -> None:
    with redis_server() as redis:
        env = {"DURABLE_DATABASE_URL": database_url, "DURABLE_REDIS_URL": redis.url,
               "DURABLE_AUTH_TOKENS": "fail-token-1=ns-failpoints", "DURABLE_AUTO_MIGRATE": "false"}
        proc = SidecarProcess({**env, "DURABLE_FAILPOINTS": point})
        proc.start()
        key = new_key()
        try:
            ch = channel(proc.port)
            s = Stubs(ch, "fail-token-1")
            await start(s, key)
            acknowledged = False
            try:
                reply = await save(s, item(key, "payment", {"charged": 1999}))
                acknowledged = True
                assert reply.results[0].checkpoint.sequence == 1
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE
            assert proc.proc is not None and proc.proc.wait(timeout=10) == 86, "the failpoint must have fired"
            await ch.close()
            committed = _rows(database_url, key)
            expected_committed = point in ("checkpoint.after_commit", "checkpoint.before_cache")
            assert committed == (1 if expected_committed else 0)
            if acknowledged:
                assert committed == 1, "an acknowledged checkpoint must survive the crash"
            assert check_invariants(database_url) == []

            # Restart without the failpoint; the client retries the same save.
            proc = SidecarProcess(env)
            proc.start()
            ch = channel(proc.port)
            s = Stubs(ch, "fail-token-1")
            retry = await save(s, item(key, "payment", {"charged": 1999}))
            assert retry.results[0].checkpoint.sequence == 1
            assert retry.results[0].deduplicated == expected_committed
            got = await latest(s, key)
            assert got.sequence == 1 and got.state_json == b'{"charged": 1999}'
            assert _rows(database_url, key) == 1
            await ch.close()
            TALLY.add(f"failpoint {point}", faults=1, operations=3, lost=0 if committed or not acknowledged else 1,
                      note=f"acknowledged={acknowledged}")
        finally:
            proc.stop()


async def test_crash_after_complete_commits_keeps_the_completed_key(database_url: str) -> None:
    from durable.v1 import idempotency_pb2 as pb

    env = {"DURABLE_DATABASE_URL": database_url, "DURABLE_REDIS_URL": "",
           "DURABLE_AUTH_TOKENS": "failkey-token-1=ns-failkeys", "DURABLE_AUTO_MIGRATE": "false"}
    proc = SidecarProcess({**env, "DURABLE_FAILPOINTS": "idempotency.after_commit"})
    proc.start()
    key = new_key()
    try:
        ch = channel(proc.port)
        s = Stubs(ch, "failkey-token-1")
        claimed = await s.idempotency.Claim(pb.ClaimRequest(items=[pb.ClaimItem(
            scope="payment", key=key, payload_json=b'{"amount": 10}', holder="exec-1")]), metadata=s.metadata)
        attempt = claimed.results[0].key.attempt
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await s.idempotency.Complete(pb.CompleteRequest(scope="payment", key=key, attempt=attempt,
                                                            result_json=b'{"charge": "ch_1"}'), metadata=s.metadata)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert proc.proc is not None and proc.proc.wait(timeout=10) == 86
        await ch.close()
        proc = SidecarProcess(env)
        proc.start()
        ch = channel(proc.port)
        s = Stubs(ch, "failkey-token-1")
        # The commit happened before the crash: the key is completed, a duplicate replays it,
        # and the client's retry of Complete converges on the stored result.
        dup = await s.idempotency.Claim(pb.ClaimRequest(items=[pb.ClaimItem(
            scope="payment", key=key, payload_json=b'{"amount": 10}', holder="exec-2")]), metadata=s.metadata)
        assert dup.results[0].outcome == pb.CLAIM_OUTCOME_DUPLICATE
        assert dup.results[0].key.result_json == b'{"charge": "ch_1"}'
        retry = await s.idempotency.Complete(pb.CompleteRequest(scope="payment", key=key, attempt=attempt,
                                                                result_json=b'{"charge": "ch_1"}'), metadata=s.metadata)
        assert retry.key.status == pb.KEY_STATUS_COMPLETED and retry.key.attempt == attempt
        await ch.close()
        TALLY.add("failpoint idempotency.after_commit", faults=1, operations=4)
    finally:
        proc.stop()
