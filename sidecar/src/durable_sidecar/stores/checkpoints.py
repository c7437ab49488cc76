"""CheckpointStore: append-only rows of durable_checkpoints, compressed above a threshold, written once.

Both backends run the same SQL text through their Runner; the Dialect says how
database time and the newest checkpoint's join are written. PostgreSQL's
subclass (postgres/checkpoints.py) adds the one-statement saves (its PL/pgSQL
functions), a batch insert through unnest, and a prune in one statement.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..domain import Checkpoint, InstanceRef, KeyRef, NewCheckpoint, NewClaim, Page, PrunePolicy, PruneResult
from .base import BatchSave, CheckpointAdvance, Conn, NewCheckpointRow, SingleSave, StepSave
from .core import INSTANCE_KEY, Dialect, Row, Runner, instance_params
from .paging import after_sequence, cut_page
from .states import EncodedState, decode_state, encode_state

CHECKPOINT_META = ("workflow_id, instance_key, sequence, step_name, sha256, size_bytes, stored_bytes, execution_id, "
                   "node_name, created_at, file_count")


CHECKPOINT_WITH_STATE = CHECKPOINT_META + ", encoding, state"


def checkpoint_columns(with_state: bool) -> str:
    return CHECKPOINT_WITH_STATE if with_state else CHECKPOINT_META


# The newest checkpoint of an instance in one statement: the instance's row tells
# "no such instance" from "no checkpoint yet"; the state comes along only when it is
# smaller than %(state_below)s (larger ones are read from the cache first).
def latest_checkpoint_query(d: Dialect) -> str:
    """The newest-checkpoint read in the backend's form, around its Dialect.newest_checkpoint_join.

    The join must find the row by all four primary-key columns, the instance's last_sequence included:
    a plan that reads the instance's checkpoints by (namespace, workflow_id, instance_key) and filters
    on the sequence afterwards costs time in proportion to the instance's checkpoints.
    """
    columns = ", ".join(f"c.{c.strip()}" for c in CHECKPOINT_META.split(","))
    return d.sql(f"""SELECT {columns},
           c.encoding, CASE WHEN c.size_bytes < %(state_below)s THEN c.state END AS state
    FROM durable_instances i
    {d.newest_checkpoint_join}
    WHERE i.namespace = %(ns)s AND i.workflow_id = %(wf)s AND i.instance_key = %(key)s""")


def latest_of(d: Dialect, row: Row | None) -> tuple[bool, Checkpoint | None]:
    """(the instance exists, its newest checkpoint) from a latest_checkpoint_query row."""
    if row is None:
        return False, None
    if row["sequence"] is None:
        return True, None
    return True, checkpoint_of(d, row, with_state=True)


def checkpoint_of(d: Dialect, row: Row, *, with_state: bool) -> Checkpoint:
    state = None
    if with_state and row["state"] is not None:
        state = decode_state(bytes(row["state"]), row["encoding"])
    return Checkpoint(
        workflow_id=row["workflow_id"],
        instance_key=row["instance_key"],
        sequence=row["sequence"],
        step_name=row["step_name"],
        sha256=row["sha256"],
        size_bytes=row["size_bytes"],
        stored_bytes=row["stored_bytes"],
        execution_id=row["execution_id"],
        node_name=row["node_name"],
        created_at=d.time(row["created_at"]),
        state=state,
        file_count=_file_count(row),
    )


def _file_count(row: Row) -> int:
    # The one-statement saves' functions (PostgreSQL) return no file_count: they never save files.
    try:
        return int(row["file_count"])
    except (KeyError, IndexError):
        return 0


def prune_conditions(d: Dialect, namespace: str, policy: PrunePolicy) -> tuple[list[str], dict[str, Any]]:
    """The conditions on checkpoints `c` of instances `i` a prune deletes, and their parameters.

    c.sequence < i.last_sequence: each instance's newest checkpoint is always kept.
    """
    where = ["c.namespace = %(ns)s", "c.sequence < i.last_sequence"]
    params: dict[str, Any] = {"ns": namespace}
    if policy.workflow_id:
        where.append("c.workflow_id = %(wf)s")
        params["wf"] = policy.workflow_id
    if policy.instance_key:
        where.append("c.instance_key = %(key)s")
        params["key"] = policy.instance_key
    if policy.keep_last:
        where.append("c.sequence <= i.last_sequence - %(keep)s")
        params["keep"] = policy.keep_last
    if policy.older_than_seconds:
        where.append(f"c.created_at < {d.ago_sql}")
        params["seconds"] = policy.older_than_seconds
    return where, params


class CheckpointStore:
    """Reads and writes checkpoints over one backend's Runner; every method runs in the caller's transaction."""

    # Whether save_single_txn does its work (one statement); else the services take the batch path at once.
    one_statement_save: ClassVar[bool] = False
    # Whether save_step_txn can write (see StateMemory): the service only merges ahead of it then.
    one_statement_step_save: ClassVar[bool] = False

    def __init__(self, runner: Runner, *, compress_threshold_bytes: int) -> None:
        self.r = runner
        self.compress_threshold_bytes = compress_threshold_bytes
        d = runner.dialect
        self._insert = d.sql(
            f"""INSERT INTO durable_checkpoints
                    (namespace, workflow_id, instance_key, sequence, step_name, encoding, state, sha256,
                     size_bytes, stored_bytes, execution_id, node_name, created_at)
                VALUES (%(ns)s, %(wf)s, %(key)s, %(seq)s, %(step)s, %(enc)s, %(state)s, %(sha)s, %(size)s,
                        %(stored)s, %(exec)s, %(node)s, {d.now_sql})
                RETURNING {CHECKPOINT_META}""")
        self._latest = latest_checkpoint_query(d)
        self._get = {with_state: d.sql(f"SELECT {checkpoint_columns(with_state)} FROM durable_checkpoints "
                                       f"WHERE {INSTANCE_KEY} AND sequence = %(seq)s") for with_state in (False, True)}
        self._list = {with_state: d.sql(
            f"""SELECT {checkpoint_columns(with_state)} FROM durable_checkpoints
                WHERE {INSTANCE_KEY} AND sequence > %(after)s
                ORDER BY sequence LIMIT %(limit)s""") for with_state in (False, True)}
        self._lower_count = d.sql(
            f"UPDATE durable_instances SET checkpoint_count = checkpoint_count - %(n)s WHERE {INSTANCE_KEY}")

    def encode(self, state: bytes) -> EncodedState:
        """Compresses states from the threshold on (see states.py)."""
        return encode_state(state, compress_threshold_bytes=self.compress_threshold_bytes)

    def record(self, row: Row, *, with_state: bool) -> Checkpoint:
        return checkpoint_of(self.r.dialect, row, with_state=with_state)

    async def save_single_txn(self, conn: Conn, row: NewCheckpointRow, *, expected_sequence: int | None,
                              lease_seconds: int, default_lease_seconds: int) -> SingleSave | None:
        """The whole save of one checkpoint (lock, deduplicate, fence, insert, advance) as one statement.

        Run with Database.single. It decides as the batch path does (services/
        checkpoints.py) and renews the lease for lease_seconds (0: the
        instance's length, else default_lease_seconds); row.sequence is not
        used (the statement numbers it). None from a backend without such a
        statement: the caller then takes the batch path.
        """
        return None

    async def save_step_txn(self, conn: Conn, row: NewCheckpointRow, *, expected_sequence: int | None,
                            lease_seconds: int, default_lease_seconds: int, base_sequence: int, base_digest: str,
                            complete: tuple[KeyRef, int, bytes] | None, claim: NewClaim | None = None,
                            complete_instance: bool = False) -> StepSave | None:
        """A step result merged into the remembered state, with its key's completion, as one statement.

        Run with Database.single. Writes only when the instance is running, at
        base_sequence, its stored base matches base_digest (see StateMemory),
        its newest step is another one, expected_sequence (if any) holds, and
        complete's (key, attempt, result) is that attempt's key in progress;
        otherwise writes nothing and returns None (the caller takes the
        transaction). None also from a backend without such a statement.

        With claim (the item's claim_next, validated), a statement that writes
        also inserts that key in progress with attempt 1 when it does not exist
        (StepSave.claimed); an existing key is left alone and claimed stays
        None: the caller claims it the usual way. With complete_instance, a
        statement that writes also completes the instance as
        InstanceStore.finish_running_txn does (StepSave.finished).
        """
        return None

    async def save_many_txn(self, conn: Conn, items: list[tuple[NewCheckpoint, EncodedState]], *,
                            default_lease_seconds: int) -> BatchSave | None:
        """A whole batch of plain saves (no step result to add, no key to complete) as one statement.

        Run with Database.single; decides item by item as the batch path does (services/checkpoints.py).
        None from a backend without such a statement: the caller then takes the batch path.
        """
        return None

    async def insert_many_txn(self, conn: Conn, rows: list[NewCheckpointRow]) -> list[Checkpoint]:
        """Appends the checkpoints (one namespace); returns their metadata (without states) in the same order.

        A statement per row: where statements cost no round trip (the embedded database) that is the
        cheapest; PostgreSQL's subclass inserts the batch in one.
        """
        now = await self.r.with_now(conn)
        out = []
        for r in rows:
            row = await self.r.one(conn, self._insert, {
                **now, **instance_params(r.ref), "seq": r.sequence, "step": r.step_name, "enc": r.encoded.encoding,
                "state": r.encoded.data, "sha": r.sha256, "size": r.size_bytes, "stored": len(r.encoded.data),
                "exec": r.execution_id, "node": r.node_name})
            assert row is not None
            out.append(self.record(row, with_state=False))
        return out

    async def append_txn(self, conn: Conn, rows: list[NewCheckpointRow],
                         advances: list[CheckpointAdvance]) -> list[Checkpoint] | None:
        """insert_many_txn and InstanceStore.record_checkpoints_txn (the locked instances) in one statement.

        None from a backend without such a statement: the caller then runs the two.
        """
        return None

    async def latest_txn(self, conn: Conn, ref: InstanceRef, *,
                         state_below: int) -> tuple[bool, Checkpoint | None]:
        """(whether the instance exists, its newest checkpoint) in one statement.

        The state comes along, decoded, when smaller than state_below bytes; else state is None.
        """
        row = await self.r.one(conn, self._latest, {**instance_params(ref), "state_below": state_below})
        return latest_of(self.r.dialect, row)

    async def get_txn(self, conn: Conn, ref: InstanceRef, sequence: int, *,
                      with_state: bool) -> Checkpoint | None:
        """One checkpoint, its state decoded when asked for."""
        # A state comes in binary: in text, PostgreSQL would send twice its size in hex for psycopg to parse.
        row = await self.r.one(conn, self._get[with_state], {**instance_params(ref), "seq": sequence},
                               binary=with_state)
        return self.record(row, with_state=with_state) if row else None

    async def list_txn(self, conn: Conn, ref: InstanceRef, page: Page, *,
                       with_state: bool) -> tuple[list[Checkpoint], str]:
        """In sequence order, keyset-paged."""
        found = await self.r.all(conn, self._list[with_state], {
            **instance_params(ref), "after": after_sequence(page.token), "limit": page.size + 1})
        rows = [self.record(r, with_state=with_state) for r in found]
        return cut_page(rows, page.size, lambda c: [c.sequence])

    async def prune_txn(self, conn: Conn, namespace: str, policy: PrunePolicy) -> PruneResult:
        """Deletes by policy, always keeping each instance's newest checkpoint; updates counters.

        Counts the victims per instance, deletes them and lowers each instance's counter: three statements
        in the caller's transaction (PostgreSQL's subclass does it in one).
        """
        d = self.r.dialect
        where, params = prune_conditions(d, namespace, policy)
        params = await self.r.with_now(conn, **params)
        joined = f"""durable_instances i
                     WHERE i.namespace = c.namespace AND i.workflow_id = c.workflow_id
                       AND i.instance_key = c.instance_key AND {" AND ".join(where)}"""
        per = await self.r.all(conn, d.sql(  # fixed fragments only
            f"""SELECT c.workflow_id, c.instance_key, count(*) AS n
                FROM durable_checkpoints c, {joined}
                GROUP BY c.workflow_id, c.instance_key"""), params)
        result = PruneResult(deleted_count=sum(int(r["n"]) for r in per), instance_count=len(per))
        if policy.dry_run or not per:
            return result
        await self.r.execute(conn, d.sql(f"DELETE FROM durable_checkpoints AS c WHERE EXISTS (SELECT 1 FROM {joined})"),
                             params)
        await self.r.many(conn, self._lower_count, [
            {"ns": namespace, "wf": r["workflow_id"], "key": r["instance_key"], "n": r["n"]} for r in per])
        return result
