"""PostgreSQL rounds a lease's end up to a whole second (migration 0011), so renewals are HOT updates.

A lease of five seconds or more that a start or a save writes ends on the next
whole second: at least its length after the renewal, less than a second more.
Shorter leases and ends that are not in the future are stored as computed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from durable.v1 import instance_pb2

from tests.conftest import Harness
from tests.sidecar.storage import fetch
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start

pytestmark = pytest.mark.postgres_only(
    reason="the whole-second lease end is PostgreSQL's (HOT updates); the embedded database stores it as computed")


async def lease_row(url: str, key: str) -> tuple[timedelta, int]:
    """(lease end - the time of the statement that wrote it, microseconds of the lease end)."""
    rows = await fetch(url, "SELECT lease_expires_at - updated_at, extract(microseconds FROM lease_expires_at)::bigint"
                            " %% 1000000 FROM durable_instances WHERE workflow_id = %s AND instance_key = %s", WF, key)
    return rows[0][0], rows[0][1]


async def test_a_lease_of_five_seconds_or_more_ends_on_the_next_whole_second(harness: Harness,
                                                                          database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, "exec-1", lease_seconds=30)
    for step in ("start", "Pay", "Ship"):
        if step != "start":
            await save(s, item(key, step, {"step": step}))
        length, micros = await lease_row(database_url, key)
        assert micros == 0, f"{step}: the lease end is not a whole second"
        assert timedelta(seconds=30) <= length < timedelta(seconds=31), f"{step}: {length}"


async def test_a_shorter_lease_and_an_ended_one_are_stored_as_computed(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, "exec-1", lease_seconds=2)
    await save(s, item(key, "Pay", {"step": "Pay"}))
    length, _ = await lease_row(database_url, key)
    assert length == timedelta(seconds=2)
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1"), metadata=s.metadata)
    assert await fetch(database_url, "SELECT lease_expires_at FROM durable_instances WHERE workflow_id = %s"
                                     " AND instance_key = %s", WF, key) == [(None,)]
