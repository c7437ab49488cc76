"""The newest checkpoint is read by its whole key, however many checkpoints the instance has.

GetLatestCheckpoint (and every resume read) joins the instance's row to its
newest checkpoint. PostgreSQL once planned that join as "every checkpoint of
the instance, then filter on the sequence" on tables without statistics: the
read cost grew with the instance's checkpoints (4.3 ms at 6,000) and the soak's
p99 climbed with it. These tests give one instance thousands of checkpoints and
check the plan reads a handful of pages, without statistics and after ANALYZE,
and that the answer is the newest checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from typing import Any

import psycopg
from durable_sidecar.stores.postgres import db as pg_checkpoints
from durable_sidecar.stores.sqlite import db as lite_checkpoints
from psycopg.rows import dict_row

from tests.conftest import Harness
from tests.sidecar.storage import fetch, is_sqlite, sqlite_path
from tests.sidecar.test_checkpoints import WF, item, latest, new_key, save, start

MANY = 3_000


async def _instance_with_many_checkpoints(harness: Harness, url: str) -> tuple[str, str]:
    """(namespace, key) of a running instance whose newest checkpoint is number MANY + 1."""
    s = harness.alpha
    key = new_key()
    await start(s, key)
    await save(s, item(key, "first", {"n": 0}))
    ((namespace,),) = await fetch(url, "SELECT namespace FROM durable_instances WHERE workflow_id = %s"
                                       " AND instance_key = %s", WF, key)
    # Volume, not behaviour: copies of the first checkpoint at sequences 2 .. MANY, then the instance points at
    # the last of them; the newest one is then saved through the sidecar.
    await fetch(url, """WITH RECURSIVE n(v) AS (SELECT 2 UNION ALL SELECT v + 1 FROM n WHERE v < %s)
                        INSERT INTO durable_checkpoints
                            (namespace, workflow_id, instance_key, sequence, step_name, encoding, state, sha256,
                             size_bytes, stored_bytes, execution_id, node_name, created_at)
                        SELECT namespace, workflow_id, instance_key, n.v, 'copy-' || n.v, encoding, state, sha256,
                               size_bytes, stored_bytes, execution_id, node_name, created_at
                        FROM durable_checkpoints, n
                        WHERE workflow_id = %s AND instance_key = %s AND sequence = 1""", MANY, WF, key)
    await fetch(url, "UPDATE durable_instances SET last_sequence = %s, last_step = %s, checkpoint_count = %s"
                     " WHERE workflow_id = %s AND instance_key = %s", MANY, f"copy-{MANY}", MANY, WF, key)
    await save(s, item(key, "newest", {"n": MANY + 1}))
    return namespace, key


def _pg_pages_read(url: str, params: dict[str, Any]) -> int:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + pg_checkpoints.LATEST, params).fetchone()
        assert row is not None
        plan = row["QUERY PLAN"][0]["Plan"]
        return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


async def test_the_newest_of_thousands_of_checkpoints_is_read_by_its_whole_key(harness: Harness,
                                                                              database_url: str) -> None:
    namespace, key = await _instance_with_many_checkpoints(harness, database_url)
    newest = await latest(harness.alpha, key)
    assert (newest.sequence, newest.step_name, json.loads(newest.state_json)) == (MANY + 1, "newest", {"n": MANY + 1})

    params = {"ns": namespace, "wf": WF, "key": key, "state_below": 1 << 20}
    if is_sqlite(database_url):
        with contextlib.closing(sqlite3.connect(sqlite_path(database_url))) as conn:
            plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + lite_checkpoints.LATEST, params)]
        assert any("sequence=?" in p for p in plan), f"the checkpoint is not looked up by its sequence: {plan}"
        return
    # A plan that walks the instance's checkpoints reads about one page per checkpoint (3,000 here).
    as_found = _pg_pages_read(database_url, params)
    await fetch(database_url, "ANALYZE durable_checkpoints")
    await fetch(database_url, "ANALYZE durable_instances")
    analyzed = _pg_pages_read(database_url, params)
    assert as_found < 30 and analyzed < 30, (as_found, analyzed)
