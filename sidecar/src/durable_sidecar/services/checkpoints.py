"""CheckpointService: validate, fence, deduplicate and append checkpoints in one transaction per batch."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass, replace

from .. import failpoints, metrics, validation
from ..domain import Checkpoint, InstanceRef, NewCheckpoint, Page, PrunePolicy, PruneResult, SavedCheckpoint
from ..errors import FailedPrecondition, InvalidArgument, NotFound, StaleFencingToken, TooLarge
from ..stores.base import (
    CheckpointAdvance,
    CheckpointStore,
    Conn,
    Database,
    EncodedState,
    InstanceStore,
    NewCheckpointRow,
)
from ..stores.cache import Cache

log = logging.getLogger(__name__)

# Above this many bytes, hashing, JSON checks and compression move off the event
# loop so one large save does not stall every other RPC.
_OFFLOAD_BYTES = 256 * 1024


@dataclass(frozen=True)
class SaveItem:
    """One item of a SaveCheckpoints request, as the transport decoded it."""

    workflow_id: str
    instance_key: str
    step_name: str
    state: bytes
    execution_id: str
    node_name: str
    expected_sequence: int | None
    lease_seconds: int


@dataclass
class _Locked:
    """What the transaction knows of one instance while it walks a batch."""

    status_final: bool
    last_sequence: int
    last_step: str
    latest: Checkpoint | None  # the stored newest checkpoint's metadata, once read
    pending: int | None = None  # index (in the batch's rows) of its newest checkpoint not yet inserted
    pending_sha256: str = ""
    added: int = 0
    owner: str = ""
    lease_seconds: int = 0


@dataclass(frozen=True)
class _Planned:
    """An item's outcome before the inserts: a stored checkpoint, or a row of the batch (new or repeated)."""

    stored: Checkpoint | None
    row: int
    deduplicated: bool


class CheckpointService:
    def __init__(self, db: Database, instances: InstanceStore, checkpoints: CheckpointStore, cache: Cache, *,
                 max_state_bytes: int, max_batch_items: int, default_lease_seconds: int) -> None:
        self.db = db
        self.instances = instances
        self.checkpoints = checkpoints
        self.cache = cache
        self.max_state_bytes = max_state_bytes
        self.max_batch_items = max_batch_items
        self.default_lease_seconds = default_lease_seconds
        # Cache writes run after the reply; kept here so they are not garbage-collected mid-flight.
        self._cache_writes: set[asyncio.Task[None]] = set()

    def _validate(self, namespace: str, index: int, item: SaveItem) -> NewCheckpoint:
        where = f"items[{index}]"
        try:
            validation.identifier("workflow_id", item.workflow_id)
            validation.identifier("instance_key", item.instance_key)
            validation.identifier("step_name", item.step_name)
            validation.identifier("execution_id", item.execution_id)
            validation.identifier("node_name", item.node_name, required=False)
            lease = validation.in_range("lease_seconds", item.lease_seconds, 1, 86_400,
                                        default=self.default_lease_seconds)
            if item.expected_sequence is not None and item.expected_sequence < 0:
                raise InvalidArgument("expected_sequence must not be negative")
            if len(item.state) > self.max_state_bytes:
                raise TooLarge(
                    f"state is {len(item.state)} bytes; the limit is {self.max_state_bytes} bytes "
                    "(DURABLE_MAX_STATE_BYTES): save fewer fields"
                )
            validation.json_bytes("state_json", item.state)
        except (InvalidArgument, TooLarge) as exc:
            raise type(exc)(f"{where}: {exc}") from None
        return NewCheckpoint(
            ref=InstanceRef(namespace, item.workflow_id, item.instance_key),
            step_name=item.step_name,
            state=item.state,
            sha256=hashlib.sha256(item.state).hexdigest(),
            execution_id=item.execution_id,
            node_name=item.node_name,
            expected_sequence=item.expected_sequence,
            lease_seconds=lease,
        )

    def _prepare(self, namespace: str, items: list[SaveItem]) -> list[tuple[NewCheckpoint, EncodedState]]:
        out = []
        for i, item in enumerate(items):
            new = self._validate(namespace, i, item)
            out.append((new, self.checkpoints.encode(new.state)))
        return out

    async def save(self, namespace: str, items: list[SaveItem]) -> list[SavedCheckpoint]:
        if not items:
            raise InvalidArgument("items is empty: send at least one checkpoint")
        if len(items) > self.max_batch_items:
            raise InvalidArgument(f"{len(items)} items; the limit is {self.max_batch_items} (DURABLE_MAX_BATCH_ITEMS)")
        total = sum(len(i.state) for i in items)
        if total > _OFFLOAD_BYTES:
            prepared = await asyncio.to_thread(self._prepare, namespace, items)
        else:
            prepared = self._prepare(namespace, items)

        async def txn(conn: Conn) -> list[SavedCheckpoint]:
            # Three statements per batch, whatever its size: lock the instances (in a
            # fixed order, so concurrent batches cannot deadlock), insert the new
            # checkpoints, advance the instances.
            instances = await self.instances.lock_many_txn(conn, [new.ref for new, _ in prepared])
            locked = {ref: _Locked(i.status.final, i.last_sequence, i.last_step, None)
                      for ref, i in instances.items()}
            failpoints.hit("checkpoint.before_insert")
            rows: list[NewCheckpointRow] = []
            plans = [await self._plan_one(conn, i, new, encoded, locked, rows)
                     for i, (new, encoded) in enumerate(prepared)]
            inserted = await self.checkpoints.insert_many_txn(conn, rows)
            await self.instances.record_checkpoints_txn(conn, [
                CheckpointAdvance(ref, st.last_sequence, st.last_step, st.added, st.owner, st.lease_seconds)
                for ref, st in locked.items() if st.added])
            failpoints.hit("checkpoint.after_insert")
            return [SavedCheckpoint(p.stored, deduplicated=True) if p.stored is not None
                    else SavedCheckpoint(inserted[p.row], deduplicated=p.deduplicated) for p in plans]

        results = await self.db.transaction(txn)
        failpoints.hit("checkpoint.after_commit")
        fresh = []
        for (new, _), saved in zip(prepared, results, strict=True):
            metrics.CHECKPOINTS_SAVED.labels("deduplicated" if saved.deduplicated else "written").inc()
            if not saved.deduplicated:
                fresh.append((new, saved.checkpoint.sequence))
        if fresh and self.cache.enabled:
            task = asyncio.create_task(self._cache_states(namespace, fresh))
            self._cache_writes.add(task)
            task.add_done_callback(self._cache_writes.discard)
        return results

    async def _cache_states(self, namespace: str, fresh: list[tuple[NewCheckpoint, int]]) -> None:
        """Writes new states to the cache once the reply is on its way (the cache is never on the hot path)."""
        if failpoints.enabled("checkpoint.before_cache"):
            await asyncio.sleep(0.2)  # test only: let the reply reach the client before dying
        failpoints.hit("checkpoint.before_cache")
        await self.cache.put_states(namespace, [(new.ref.workflow_id, new.ref.instance_key, sequence, new.state)
                                                for new, sequence in fresh])

    async def drain(self) -> None:
        """Waits for pending cache writes (at shutdown)."""
        if self._cache_writes:
            await asyncio.gather(*self._cache_writes, return_exceptions=True)

    async def _plan_one(self, conn: Conn, index: int, new: NewCheckpoint, encoded: EncodedState,
                        locked: dict[InstanceRef, _Locked], rows: list[NewCheckpointRow]) -> _Planned:
        """Checks one item against where its instance stands (earlier items of the batch included)."""
        ref = new.ref
        state = locked.get(ref)
        if state is None:
            raise NotFound(
                f"items[{index}]: instance {ref.workflow_id}/{ref.instance_key} does not exist: "
                "start it with StartOrResume (the Resume Point node) before saving checkpoints"
            )
        if state.last_sequence > 0 and state.last_step == new.step_name:
            # The same step saved again with the same state (a retry) is the checkpoint already there.
            if state.pending is not None:
                if state.pending_sha256 == new.sha256:
                    return _Planned(None, state.pending, deduplicated=True)
            else:
                if state.latest is None:
                    state.latest = await self.checkpoints.get_txn(conn, ref, state.last_sequence, with_state=False)
                if state.latest is not None and state.latest.sha256 == new.sha256:
                    return _Planned(state.latest, -1, deduplicated=True)
        if state.status_final:
            raise FailedPrecondition(
                f"items[{index}]: instance {ref.workflow_id}/{ref.instance_key} is finished; "
                "a finished instance takes no more checkpoints"
            )
        if new.expected_sequence is not None and new.expected_sequence != state.last_sequence:
            raise StaleFencingToken(
                f"items[{index}]: expected newest sequence {new.expected_sequence} but it is "
                f"{state.last_sequence}: another execution saved in between; re-read the instance"
            )
        sequence = state.last_sequence + 1
        rows.append(NewCheckpointRow(ref, sequence, new.step_name, encoded, new.sha256, len(new.state),
                                     new.execution_id, new.node_name))
        state.last_sequence, state.last_step = sequence, new.step_name
        state.pending, state.pending_sha256 = len(rows) - 1, new.sha256
        state.added += 1
        state.owner, state.lease_seconds = new.execution_id, new.lease_seconds
        return _Planned(None, len(rows) - 1, deduplicated=False)

    async def with_state(self, namespace: str, cp: Checkpoint) -> Checkpoint:
        """Fills in the state from the cache, or from the database on a miss (then caches it)."""
        state = await self.cache.get_state(namespace, cp.workflow_id, cp.instance_key, cp.sequence)
        if state is not None and hashlib.sha256(state).hexdigest() == cp.sha256:
            return replace(cp, state=state)
        ref = InstanceRef(namespace, cp.workflow_id, cp.instance_key)

        async def txn(conn: Conn) -> Checkpoint | None:
            return await self.checkpoints.get_txn(conn, ref, cp.sequence, with_state=True)

        full = await self.db.transaction(txn)
        if full is None or full.state is None:
            raise NotFound(f"checkpoint {cp.sequence} of {cp.workflow_id}/{cp.instance_key} was pruned")
        await self.cache.put_state(namespace, cp.workflow_id, cp.instance_key, cp.sequence, full.state)
        return full

    async def latest(self, ref: InstanceRef, *, include_state: bool) -> Checkpoint:
        _check_ref(ref)

        async def txn(conn: Conn) -> Checkpoint:
            inst = await self.instances.get_txn(conn, ref)
            if inst is None:
                raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} does not exist")
            if inst.last_sequence == 0:
                raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} has no checkpoints yet")
            cp = await self.checkpoints.get_txn(conn, ref, inst.last_sequence, with_state=False)
            assert cp is not None, "the newest checkpoint is never pruned"
            return cp

        cp = await self.db.transaction(txn)
        return await self.with_state(ref.namespace, cp) if include_state else cp

    async def get(self, ref: InstanceRef, sequence: int, *, include_state: bool) -> Checkpoint:
        _check_ref(ref)
        if sequence < 1:
            raise InvalidArgument("sequence must be 1 or more")

        async def txn(conn: Conn) -> Checkpoint | None:
            return await self.checkpoints.get_txn(conn, ref, sequence, with_state=False)

        cp = await self.db.transaction(txn)
        if cp is None:
            raise NotFound(f"checkpoint {sequence} of {ref.workflow_id}/{ref.instance_key} does not exist")
        return await self.with_state(ref.namespace, cp) if include_state else cp

    async def list_checkpoints(self, ref: InstanceRef, page: Page, *, include_state: bool) -> tuple[list[Checkpoint], str]:
        _check_ref(ref)

        async def txn(conn: Conn) -> tuple[list[Checkpoint], str]:
            if await self.instances.get_txn(conn, ref) is None:
                raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} does not exist")
            return await self.checkpoints.list_txn(conn, ref, page, with_state=include_state)

        return await self.db.transaction(txn)

    async def prune(self, namespace: str, policy: PrunePolicy) -> PruneResult:
        validation.identifier("workflow_id", policy.workflow_id, required=False)
        validation.identifier("instance_key", policy.instance_key, required=False)
        if policy.instance_key and not policy.workflow_id:
            raise InvalidArgument("instance_key needs workflow_id")
        if policy.keep_last < 0 or policy.older_than_seconds < 0:
            raise InvalidArgument("keep_last and older_than_seconds must not be negative")
        if policy.keep_last == 0 and policy.older_than_seconds == 0:
            raise InvalidArgument("give keep_last, older_than_seconds or both: an empty policy would delete "
                                  "every checkpoint but the newest")

        async def txn(conn: Conn) -> PruneResult:
            return await self.checkpoints.prune_txn(conn, namespace, policy)

        result = await self.db.transaction(txn)
        log.info("checkpoints pruned", extra={"deleted": result.deleted_count, "dry_run": policy.dry_run})
        return result


def _check_ref(ref: InstanceRef) -> None:
    validation.identifier("workflow_id", ref.workflow_id)
    validation.identifier("instance_key", ref.instance_key)
