"""Purge (issue 44): a finished instance's data erased on request from the database and the cache, with a
tombstone in its audit trail; nothing else changes, and a bad request changes nothing."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid

import grpc
from durable.v1 import checkpoint_pb2, common_pb2, events_pb2, instance_pb2
from durable_sidecar import app

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs, channel, redis_server
from tests.sidecar.storage import fetch
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start
from tests.sidecar.test_events import refused, signal
from tests.sidecar.test_server import _cli as server_cli
from tests.sidecar.test_server import make_settings

BIG = 20_000  # above the compression threshold: cached (Redis with PostgreSQL, in-process with SQLite)


async def purge(s: Stubs, key: str, actor: str = "dpo", reason: str = "GDPR erasure request #77"
                ) -> events_pb2.PurgeInstanceResponse:
    return await s.recovery.PurgeInstance(events_pb2.PurgeInstanceRequest(
        workflow_id=WF, instance_key=key, actor=actor, reason=reason), metadata=s.metadata)


async def namespace_of(url: str, key: str) -> str:
    return str((await fetch(url, "SELECT namespace FROM durable_instances WHERE instance_key = %s", key))[0][0])


async def counts(url: str, key: str) -> dict[str, int]:
    out = {}
    for table in ("durable_checkpoints", "durable_instance_start_items", "durable_instance_events"):
        rows = await fetch(url, f"SELECT count(*) FROM {table} WHERE instance_key = %s", key)
        out[table] = int(rows[0][0])
    rows = await fetch(url, "SELECT count(*) FROM durable_instance_mailbox WHERE instance_key = %s "
                            "AND payload_json IS NOT NULL", key)
    out["payloads"] = int(rows[0][0])
    rows = await fetch(url, "SELECT count(*) FROM durable_search_fields WHERE instance_key = %s", key)
    out["fields"] = int(rows[0][0])
    return out


async def cached(harness: Harness, ns: str, key: str, sequence: int) -> bytes | None:
    return await harness.sidecar.cache.get_state(ns, WF, key, sequence)


async def personal_order(s: Stubs, key: str, secret: str) -> None:
    """An order holding personal data everywhere an instance keeps payloads, then failed."""
    await start(s, key, "exec-1", start_item_json=json.dumps({"email": f"{secret}@example.com"}).encode())
    await save(s, item(key, "address", {"street": secret}))
    await save(s, item(key, "card", {"card": secret, "pad": "x" * BIG}))
    await signal(s, key, "evt-1", {"phone": secret}, name="called")
    await s.instances.SetSearchFields(instance_pb2.SetSearchFieldsRequest(
        workflow_id=WF, instance_key=key, fields_json=json.dumps({"email": secret}).encode()), metadata=s.metadata)
    await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1", error_message=f"card of {secret} declined"),
        metadata=s.metadata)


async def test_purge_erases_states_payloads_and_texts_from_database_and_cache_and_keeps_a_tombstone(
        harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key, secret = new_key(), f"SECRET{uuid.uuid4().hex[:8]}"
    await personal_order(s, key, secret)
    ns = await namespace_of(database_url, key)
    for _ in range(100):  # the cache write follows the reply
        if await cached(harness, ns, key, 2) is not None:
            break
        await asyncio.sleep(0.05)
    assert await cached(harness, ns, key, 2) is not None
    before = await counts(database_url, key)
    assert before["durable_checkpoints"] == 2 and before["durable_instance_start_items"] == 1
    assert before["payloads"] == 1 and before["fields"] == 1

    done = await purge(s, key)
    assert done.checkpoints_erased == 2 and done.start_item_erased and done.event_payloads_erased == 1
    assert done.instance.status == common_pb2.INSTANCE_STATUS_FAILED and done.instance.error_message == ""
    after = await counts(database_url, key)
    assert after["durable_checkpoints"] == 0 and after["durable_instance_start_items"] == 0 and after["payloads"] == 0
    assert after["fields"] == 0
    assert after["durable_instance_events"] == before["durable_instance_events"] + 1
    # No trace of the personal data in any row the instance keeps.
    assert await cached(harness, ns, key, 1) is None and await cached(harness, ns, key, 2) is None
    rows = await fetch(database_url, "SELECT error_message, last_error, result_json FROM durable_instances "
                                     "WHERE instance_key = %s", key)
    assert rows == [("", "", None)]
    trail = await fetch(database_url, "SELECT kind, actor, detail FROM durable_instance_events "
                                      "WHERE instance_key = %s ORDER BY id", key)
    assert all(secret not in detail for _, _, detail in trail)
    assert [k for k, _, d in trail[:-1] if d] == []  # every earlier detail blanked; kinds and actors kept
    kind, actor, detail = trail[-1]
    assert kind == "purged" and actor == "dpo" and "GDPR erasure request #77" in detail and "2 checkpoints" in detail
    # The instance answers as purged: no checkpoints, no retry; a sender's repeat is still a duplicate.
    listed = await s.checkpoints.ListCheckpoints(checkpoint_pb2.ListCheckpointsRequest(
        workflow_id=WF, instance_key=key), metadata=s.metadata)
    assert list(listed.checkpoints) == []
    code, msg = await refused(s.recovery.RetryInstance(events_pb2.RetryInstanceRequest(
        workflow_id=WF, instance_key=key, actor="ops", reason="try again"), metadata=s.metadata))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "purged" in msg
    again = await signal(s, key, "evt-1", {"phone": "other"}, name="called")
    assert again.outcome == events_pb2.SIGNAL_OUTCOME_DUPLICATE and again.event.payload_json == b""
    # Purging again erases nothing more and records another tombstone.
    twice = await purge(s, key)
    assert twice.checkpoints_erased == 0 and not twice.start_item_erased and twice.event_payloads_erased == 0


async def test_a_completed_instance_loses_its_result_and_other_instances_keep_everything(
        harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key, other = new_key(), new_key()
    for k in (key, other):
        await start(s, k, "exec-1", start_item_json=b'{"order": 1}')
        await save(s, item(k, "paid", {"paid": True}))
        await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
            workflow_id=WF, instance_key=k, execution_id="exec-1", result_json=b'{"invoice": "INV-1"}'),
            metadata=s.metadata)
    kept = await counts(database_url, other)
    assert kept["durable_checkpoints"] == 1 and kept["durable_instance_start_items"] == 1
    trail = await fetch(database_url, "SELECT detail FROM durable_instance_events WHERE instance_key = %s", other)
    await purge(s, key)
    assert (await fetch(database_url, "SELECT result_json FROM durable_instances WHERE instance_key = %s",
                        key))[0][0] is None
    assert await counts(database_url, other) == kept
    assert await fetch(database_url, "SELECT detail FROM durable_instance_events WHERE instance_key = %s",
                       other) == trail
    got = await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=WF, instance_key=other),
                                        metadata=s.metadata)
    assert json.loads(got.instance.result_json) == {"invoice": "INV-1"}


async def test_purge_of_an_unfinished_unknown_or_badly_asked_instance_changes_nothing(harness: Harness,
                                                                                       database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, "exec-1", start_item_json=b'{"order": 1}')
    await save(s, item(key, "paid", {"paid": True}))
    before = await counts(database_url, key)
    code, msg = await refused(purge(s, key))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "cancel it first" in msg
    for call, want in ((purge(s, key, actor=""), "actor"), (purge(s, key, reason=""), "reason"),
                       (purge(s, key, actor="bad\x00"), "actor")):
        code, msg = await refused(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and want in msg, msg
    code, _ = await refused(purge(s, new_key()))
    assert code == grpc.StatusCode.NOT_FOUND
    # Another namespace cannot see it, let alone purge it.
    code, _ = await refused(purge(harness.beta, key))
    assert code == grpc.StatusCode.NOT_FOUND
    assert await counts(database_url, key) == before


async def test_a_cache_that_cannot_be_reached_makes_the_purge_unavailable_and_a_second_purge_clears_it(
        postgres_url: str) -> None:
    with redis_server() as redis:
        sidecar = await app.start(make_settings(postgres_url, redis_url=redis.url,
                                                auth_tokens="purge-token-1=ns-purge"))
        ch = channel(sidecar.port)
        s = Stubs(ch, "purge-token-1")
        try:
            key = new_key()
            await personal_order(s, key, "SECRETREDIS")
            redis.stop()
            code, msg = await refused(purge(s, key))
            assert code == grpc.StatusCode.UNAVAILABLE and "purge it again" in msg
            assert (await counts(postgres_url, key))["durable_checkpoints"] == 0  # the database part stands
            redis.start()
            await asyncio.sleep(1.1)  # the cache is skipped for a second after a failure
            done = await purge(s, key)
            assert done.checkpoints_erased == 0
            assert await sidecar.cache.get_state("ns-purge", WF, key, 2) is None
        finally:
            await ch.close()
            await sidecar.stop(grace=0.5)


async def test_the_cli_purges_with_actor_and_reason_and_clears_the_shared_cache(harness: Harness,
                                                                               database_url: str) -> None:
    s = harness.alpha
    ns = harness.sidecar.settings.tokens[s.token]
    redis_url = harness.sidecar.settings.redis_url

    def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
        # The CLI runs with the sidecars' settings: the same database and Redis.
        return server_cli(database_url, *args, redis_url=redis_url)

    key = new_key()
    await personal_order(s, key, "SECRETCLI")
    for _ in range(100):
        if await cached(harness, ns, key, 2) is not None:
            break
        await asyncio.sleep(0.05)
    running = new_key()
    await start(s, running, "exec-1")
    refused_run = await asyncio.to_thread(_cli, database_url, "instances", "purge", WF, running, "--reason", "x",
                                          "--namespace", ns)
    assert refused_run.returncode == 1 and "cancel it first" in refused_run.stderr
    done = await asyncio.to_thread(_cli, database_url, "instances", "purge", WF, key, "--reason", "ticket 12",
                                   "--actor", "dpo-ana", "--namespace", ns)
    assert done.returncode == 0, done.stderr
    assert "purged (2 checkpoints, start item erased, 1 event payloads)" in done.stdout, done.stdout
    assert (await counts(database_url, key))["durable_checkpoints"] == 0
    trail = await fetch(database_url, "SELECT kind, actor FROM durable_instance_events WHERE instance_key = %s "
                                      "ORDER BY id DESC LIMIT 1", key)
    assert trail == [("purged", "dpo-ana")]
    if not database_url.startswith("sqlite"):  # Redis, shared with the CLI; the in-process cache is the server's
        assert await cached(harness, ns, key, 2) is None
