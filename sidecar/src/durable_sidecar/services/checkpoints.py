"""CheckpointService: validate, fence, deduplicate and append checkpoints in one transaction per batch.

The rules are services/save_rules.py; which statement path a save takes is
services/save_paths.py; this module runs the general path (the transaction) and
the reads.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from .. import failpoints, metrics, validation
from ..domain import (
    Checkpoint,
    Instance,
    InstanceRef,
    KeyCompleted,
    KeyRef,
    NewCheckpoint,
    NewClaim,
    Page,
    PrunePolicy,
    PruneResult,
    SavedCheckpoint,
)
from ..errors import DomainError, InvalidArgument, NotFound, TooLarge
from ..memory.states import StateMemory
from ..stores.base import (
    CheckpointAdvance,
    Conn,
    Database,
    NewCheckpointRow,
)
from ..stores.cache import Cache
from ..stores.checkpoints import CheckpointStore
from ..stores.instances import InstanceStore
from ..stores.states import EncodedState
from .save_paths import OneStatementSaves
from .save_rules import (
    UNENCODED,
    CompleteKey,
    InstanceCompleter,
    Locked,
    Planned,
    Premerged,
    SaveItem,
    add_step_result,
    check_completions,
    check_ref,
    check_state,
    finished,
    not_found,
    stale,
    validate_item,
)
from .search_fields import parse_changes

if TYPE_CHECKING:
    from .files import FileService
    from .idempotency import IdempotencyService
    from .search_fields import SearchFieldService

# Where callers have imported them from (transport, tests): the save's records and its merge rule.
__all__ = ["CheckpointService", "CompleteKey", "InstanceCompleter", "SaveItem", "add_step_result"]

log = logging.getLogger(__name__)

# Above this many bytes, hashing, JSON checks and compression move off the event
# loop so one large save does not stall every other RPC.
_OFFLOAD_BYTES = 256 * 1024
# From this size a state is compressed on a helper thread while it is checked and hashed.
_PARALLEL_BYTES = 1024 * 1024
# States from this size are read from the database through a gate of _LARGE_READ_SLOTS places: fewer than the
# pool's default 10 connections, so large reads never take them all.
_LARGE_READ_BYTES = 1024 * 1024
_LARGE_READ_SLOTS = 4
_HELPERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="durable-compress")


class CheckpointService:
    def __init__(self, db: Database, instances: InstanceStore, checkpoints: CheckpointStore, cache: Cache, *,
                 max_state_bytes: int, max_batch_items: int, default_lease_seconds: int,
                 keys: IdempotencyService | None = None, cache_min_bytes: int = 0,
                 large_read_slots: int = _LARGE_READ_SLOTS, memory: StateMemory | None = None) -> None:
        self.db = db
        self.instances = instances
        self.checkpoints = checkpoints
        self.cache = cache
        self.max_state_bytes = max_state_bytes
        self.max_batch_items = max_batch_items
        self.default_lease_seconds = default_lease_seconds
        # Completes the keys saves name (complete_key); without it such saves are refused.
        self.keys = keys
        # States smaller than this are neither written to nor read from the cache: the
        # database serves them by primary key in the one round trip a cache would cost.
        self.cache_min_bytes = cache_min_bytes
        # Cache writes run after the reply; kept here so they are not garbage-collected mid-flight.
        self._cache_writes: set[asyncio.Task[None]] = set()
        # Reads of large states from the database: at most this many at once (see with_state).
        self.large_read_slots = large_read_slots
        self._large_reads = asyncio.Semaphore(large_read_slots)
        # The newest state saved per instance: a step result is merged into it and saved in one statement.
        self.memory = memory if memory is not None else StateMemory(0)
        # Completes the instances saves name (complete_instance): wiring.py gives it the InstanceService's
        # completion; without one such saves are refused.
        self.completer: InstanceCompleter | None = None
        # Told of each instance a save completed, after the commit (the limits hand its places on); wiring.py.
        self.on_finished: Callable[[InstanceRef], None] = lambda ref: None
        # Sets the search fields saves carry; wiring.py sets it.
        self.search: SearchFieldService | None = None
        # Checks and attaches the files saves carry; wiring.py sets it.
        self.files: FileService | None = None
        # Which statement path a save takes (one statement where the store has it, else the transaction below).
        self.paths = OneStatementSaves(self, max_batch_items=max_batch_items)

    def remember_start(self, ref: InstanceRef, start_item_json: bytes, encoded: EncodedState | None) -> None:
        """A new instance's state is its start item (none: no state) until its first checkpoint."""
        if self.memory.enabled:
            self.memory.put(ref, 0, start_item_json or None,
                            hashlib.sha256(encoded.data).hexdigest() if encoded is not None else "")

    def forget(self, ref: InstanceRef) -> None:
        """The instance's states are erased (a purge): this process keeps no copy."""
        if self.memory.enabled:
            self.memory.forget(ref)

    def remember(self, ref: InstanceRef, checkpoint: Checkpoint) -> None:
        """The instance's newest checkpoint, read with its state (a resume)."""
        if self.memory.enabled and checkpoint.state is not None:
            self.memory.put(ref, checkpoint.sequence, checkpoint.state, checkpoint.sha256)

    def check_state(self, field: str, raw: bytes, *, object_only: bool = False, json_checked: bool = False) -> None:
        """A state-like payload: at most DURABLE_MAX_STATE_BYTES (TooLarge above) of JSON (InvalidArgument)."""
        check_state(field, raw, max_state_bytes=self.max_state_bytes, object_only=object_only,
                    json_checked=json_checked)

    def _validate(self, namespace: str, index: int, item: SaveItem) -> NewCheckpoint:
        return validate_item(namespace, index, item, max_state_bytes=self.max_state_bytes, keys=self.keys,
                             completes_instances=self.completer is not None)

    def _prepare(self, namespace: str, items: list[SaveItem]) -> list[tuple[NewCheckpoint, EncodedState]]:
        out = []
        validate, encode = self._validate, self.checkpoints.encode
        for i, item in enumerate(items):
            if item.add_step_result:
                # A step result is encoded once merged into the instance's state (in the transaction).
                out.append((self._validate(namespace, i, item), UNENCODED))
            elif len(item.state) >= _PARALLEL_BYTES:
                # zlib releases the GIL: it compresses on a helper thread while this one checks and hashes.
                packing = _HELPERS.submit(self.checkpoints.encode, item.state)
                try:
                    new = self._validate(namespace, i, item)
                finally:
                    encoded = packing.result()
                out.append((new, encoded))
            else:
                out.append((validate(namespace, i, item), encode(item.state)))
        return out

    async def save(self, namespace: str, items: list[SaveItem]) -> list[SavedCheckpoint]:
        """Saves the batch; then claims the keys its items name in claim_next, in one Claim.

        Every claim_next is checked as a Claim item before anything is written. A lone step
        save (the nodes' Save) claims a key never seen in its own statement, with the write;
        any other claim is made after the save. A claim that cannot be made after the save
        (a DomainError: a fingerprint mismatch, the database gone) leaves every next_claim
        unset and the saves stand: the Guard then claims itself.
        """
        if not items:
            raise InvalidArgument("items is empty: send at least one checkpoint")
        if len(items) > self.max_batch_items:
            raise InvalidArgument(f"{len(items)} items; the limit is {self.max_batch_items} (DURABLE_MAX_BATCH_ITEMS)")
        for i, it in enumerate(items):
            if it.files:
                if self.files is None:
                    raise InvalidArgument(f"items[{i}].files: not served here (no file service)")
                self.files.check_refs(f"items[{i}].files", it.files)
        fields = [(InstanceRef(namespace, it.workflow_id, it.instance_key),
                   parse_changes(it.search_fields, f"items[{i}].search_fields_json"), f"items[{i}].search_fields_json")
                  for i, it in enumerate(items) if it.search_fields]
        if not fields:
            return await self._save_and_claim(namespace, items)
        if self.search is None:
            raise InvalidArgument("search_fields_json is not served here (no search field service)")
        await self.search.check_room(fields)
        saved = await self._save_and_claim(namespace, items)
        await self.search.set_many(fields)
        return saved

    async def _save_and_claim(self, namespace: str, items: list[SaveItem]) -> list[SavedCheckpoint]:
        ahead = [(i, item.claim_next) for i, item in enumerate(items) if item.claim_next is not None]
        if not ahead:
            return await self._save(namespace, items)
        for i, _ in ahead:
            if self.keys is None:
                raise InvalidArgument(f"items[{i}].claim_next: not served here (no idempotency service)")
            if items[i].complete_instance:
                raise InvalidArgument(f"items[{i}].claim_next: not with complete_instance (nothing follows the "
                                      "save that completes the instance)")
        assert self.keys is not None
        claims = [c for _, c in ahead]
        checked = await self.keys.check_claims(namespace, claims, [f"items[{i}].claim_next" for i, _ in ahead])
        # One item (the nodes' Save): the store's one statement may claim the key with the write.
        saved = await self._save(namespace, items, claim_with_write=checked[0] if len(items) == 1 else None)
        if saved[0].next_claim is not None and len(items) == 1:
            return saved
        claimed = await self.keys.claim_after(namespace, claims, "claim_next")
        if claimed is None:
            return saved
        answers = {i: answer for (i, _), answer in zip(ahead, claimed, strict=True)}
        return [replace(s, next_claim=answers[i]) if i in answers else s for i, s in enumerate(saved)]

    async def _save(self, namespace: str, items: list[SaveItem],
                    claim_with_write: NewClaim | None = None) -> list[SavedCheckpoint]:
        total = sum(len(i.state) for i in items)
        if total > _OFFLOAD_BYTES:
            prepared = await asyncio.to_thread(self._prepare, namespace, items)
        else:
            prepared = self._prepare(namespace, items)
        del items  # the prepared items hold what is still needed of the request
        check_completions([new for new, _ in prepared])
        saved, premerged = await self.paths.save(namespace, prepared, claim_with_write)
        if saved is not None:
            return saved

        async def txn(conn: Conn) -> tuple[list[SavedCheckpoint], list[NewCheckpoint], list[KeyCompleted]]:
            # Three statements per batch, whatever its size: lock the instances (in a
            # fixed order, so concurrent batches cannot deadlock), insert the new
            # checkpoints, advance the instances (the last two in one where the store
            # can). Keys to complete add theirs.
            instances = await self.instances.lock_many_txn(conn, [new.ref for new, _ in prepared])
            locked = {ref: Locked(i.status.final, i.last_sequence, i.last_step, None,
                                   i.lease_seconds or self.default_lease_seconds)
                      for ref, i in instances.items()}
            named = [(f"items[{i}].files", new.files) for i, (new, _) in enumerate(prepared) if new.files]
            if named:
                assert self.files is not None, "checked in save"
                await self.files.verify_txn(conn, namespace, named)
            failpoints.hit("checkpoint.before_insert")
            rows: list[NewCheckpointRow] = []
            plans = [await self._plan_one(conn, i, new, encoded, locked, rows, premerged=premerged)
                     for i, (new, encoded) in enumerate(prepared)]
            completed = await self._complete_keys(conn, [p.new for p in plans])
            advances = [CheckpointAdvance(ref, st.last_sequence, st.last_step, st.added, st.owner, st.lease_seconds)
                        for ref, st in locked.items() if st.added]
            appended = await self.checkpoints.append_txn(conn, rows, advances)
            if appended is not None:
                inserted = appended
            else:
                inserted = await self.checkpoints.insert_many_txn(conn, rows)
                await self.instances.record_checkpoints_txn(conn, advances)
            if named:
                inserted = await self._attach_files(conn, plans, inserted, completed)
            # After the advance, which renewed the lease that completing drops.
            finished = await self._complete_instances(conn, [p.new for p in plans])
            failpoints.hit("checkpoint.after_insert")
            results = [
                SavedCheckpoint(
                    p.stored if p.stored is not None else inserted[p.row],
                    deduplicated=p.stored is not None or p.deduplicated,
                    state=p.new.state if p.new.add_step_result else None,
                    completed_key=completed[i].key if i in completed else None,
                    completed_instance=finished.get(i),
                )
                for i, p in enumerate(plans)
            ]
            return results, [p.new for p in plans], list(completed.values())

        results, saved_items, completions = await self.db.transaction(txn)
        failpoints.hit("checkpoint.after_commit")
        if completions:
            assert self.keys is not None
            await self.keys.completed(completions)
        self.after_commit(namespace, saved_items, results)
        return results

    def after_commit(self, namespace: str, saved_items: list[NewCheckpoint], results: list[SavedCheckpoint]) -> None:
        """After the commit: counts the saves and hands the new large states to the cache (after the reply)."""
        fresh = []
        repeated = 0
        if self.memory.enabled:
            for new, saved in zip(saved_items, results, strict=True):  # in order: an instance's newest last
                if new.complete_instance:
                    self.memory.forget(new.ref)  # a completed instance takes no more saves
                else:
                    self.memory.put(new.ref, saved.checkpoint.sequence, new.state, new.sha256)
        for new, saved in zip(saved_items, results, strict=True):
            if new.complete_instance:
                self.on_finished(new.ref)
            if saved.deduplicated:
                repeated += 1
            elif len(new.state) >= self.cache_min_bytes:
                fresh.append((new, saved.checkpoint.sequence))
        if repeated:
            metrics.CHECKPOINTS_SAVED.labels("deduplicated").inc(repeated)
        if len(results) > repeated:
            metrics.CHECKPOINTS_SAVED.labels("written").inc(len(results) - repeated)
        if self.cache.enabled and (fresh or failpoints.enabled("checkpoint.before_cache")):
            task = asyncio.create_task(self._cache_states(namespace, fresh))
            self._cache_writes.add(task)
            task.add_done_callback(self._cache_writes.discard)

    async def _cache_states(self, namespace: str, fresh: list[tuple[NewCheckpoint, int]]) -> None:
        """Writes new states to the cache once the reply is on its way (the cache is never on the hot path)."""
        if failpoints.enabled("checkpoint.before_cache"):
            await asyncio.sleep(0.2)  # test only: let the reply reach the client before dying
        failpoints.hit("checkpoint.before_cache")
        if fresh:
                await self.cache.put_states(namespace, [(new.ref.workflow_id, new.ref.instance_key, sequence, new.state)
                                                    for new, sequence in fresh])

    async def drain(self) -> None:
        """Waits for pending cache writes (at shutdown)."""
        if self._cache_writes:
            await asyncio.gather(*self._cache_writes, return_exceptions=True)

    async def _plan_one(self, conn: Conn, index: int, new: NewCheckpoint, encoded: EncodedState,
                        locked: dict[InstanceRef, Locked], rows: list[NewCheckpointRow], *,
                        premerged: Premerged | None = None) -> Planned:
        """Checks one item against where its instance stands (earlier items of the batch included)."""
        ref = new.ref
        state = locked.get(ref)
        if state is None:
            raise not_found(index, ref)
        if new.add_step_result:
            new, encoded = await self._merged(conn, index, new, state, premerged)
        if state.last_sequence > 0 and state.last_step == new.step_name:
            # The same step saved again with the same state (a retry) is the checkpoint already there.
            if state.pending is not None:
                if state.pending_sha256 == new.sha256 and (not new.files or state.pending_files == new.files):
                    return Planned(None, state.pending, deduplicated=True, new=new)
            else:
                if state.latest is None:
                    state.latest = await self.checkpoints.get_txn(conn, ref, state.last_sequence, with_state=False)
                if state.latest is not None and state.latest.sha256 == new.sha256 \
                        and await self._same_files(conn, state.latest, new):
                    return Planned(state.latest, -1, deduplicated=True, new=new)
        if state.status_final:
            raise finished(index, ref)
        if new.expected_sequence is not None and new.expected_sequence != state.last_sequence:
            raise stale(index, new.expected_sequence, state.last_sequence)
        sequence = state.last_sequence + 1
        rows.append(NewCheckpointRow(ref, sequence, new.step_name, encoded, new.sha256, len(new.state),
                                     new.execution_id, new.node_name))
        state.last_sequence, state.last_step = sequence, new.step_name
        state.pending, state.pending_sha256, state.pending_files = len(rows) - 1, new.sha256, new.files
        state.current, state.current_known = new.state, True
        state.added += 1
        state.owner, state.lease_seconds = new.execution_id, new.lease_seconds or state.lease_length
        return Planned(None, len(rows) - 1, deduplicated=False, new=new)

    async def _same_files(self, conn: Conn, latest: Checkpoint, new: NewCheckpoint) -> bool:
        """Whether an item with files names the files the stored newest checkpoint carries. An item without files
        deduplicates by step and state alone, as the one-statement saves do (they never carry files)."""
        if not new.files:
            return True
        if len(new.files) != latest.file_count or self.files is None:
            return False
        return await self.files.files_of_txn(conn, new.ref, latest.sequence) == new.files

    async def _merged(self, conn: Conn, index: int, new: NewCheckpoint, state: Locked,
                      premerged: Premerged | None) -> tuple[NewCheckpoint, EncodedState]:
        """The item with its step result added to the instance's current state, hashed and encoded."""
        if not state.current_known:
            if state.last_sequence > 0:
                newest = await self.checkpoints.get_txn(conn, new.ref, state.last_sequence, with_state=True)
                assert newest is not None, "the newest checkpoint is never pruned"
                state.current, state.latest = newest.state, replace(newest, state=None)
            else:
                state.current = await self.instances.start_item_txn(conn, new.ref)
            state.current_known = True
        if premerged is not None and premerged.base == state.current:
            # Merged into this very state already: the merge would give the same bytes, or refuse the same way.
            if premerged.refusal is not None:
                raise premerged.refusal
            assert premerged.merged is not None
            return premerged.merged
        return await self.merge_step_result(index, new, state.current)

    async def merge_step_result(self, index: int, new: NewCheckpoint, current: bytes | None) -> tuple[NewCheckpoint, EncodedState]:
        """The item with its step result added to the state `current`, hashed and encoded."""

        def merge() -> tuple[bytes, EncodedState]:
            merged = add_step_result(current, new.step_name, new.state)
            if len(merged) > self.max_state_bytes:
                raise TooLarge(
                    f"the state with this step's result is {len(merged)} bytes; the limit is "
                    f"{self.max_state_bytes} bytes (DURABLE_MAX_STATE_BYTES): save fewer fields"
                )
            return merged, self.checkpoints.encode(merged)

        try:
            if len(current or b"") + len(new.state) > _OFFLOAD_BYTES:
                merged, encoded = await asyncio.to_thread(merge)
            else:
                merged, encoded = merge()
        except (InvalidArgument, TooLarge) as exc:
            raise type(exc)(f"items[{index}]: {exc}") from None
        return replace(new, state=merged, sha256=hashlib.sha256(merged).hexdigest()), encoded

    async def _attach_files(self, conn: Conn, plans: list[Planned], inserted: list[Checkpoint],
                            completed: dict[int, KeyCompleted]) -> list[Checkpoint]:
        """The files of the checkpoints just inserted, and of the keys they completed (not a retry's)."""
        assert self.files is not None
        out = list(inserted)
        for i, p in enumerate(plans):
            if not p.new.files:
                continue
            if p.stored is None and not p.deduplicated:
                cp = inserted[p.row]
                await self.files.attach_txn(conn, p.new.ref, cp.sequence, p.new.files)
                out[p.row] = replace(cp, file_count=len(p.new.files))
            done = completed.get(i)
            if done is not None and done.changed:
                await self.files.set_key_files_txn(conn, KeyRef(done.key.namespace, done.key.scope, done.key.key),
                                                   p.new.files)
        return out

    async def _complete_keys(self, conn: Conn, saved: list[NewCheckpoint]) -> dict[int, KeyCompleted]:
        """Completes the keys the items name, in key order (concurrent batches cannot deadlock on them)."""
        todo = [(i, new.complete_key) for i, new in enumerate(saved) if new.complete_key is not None]
        if not todo:
            return {}
        assert self.keys is not None
        out: dict[int, KeyCompleted] = {}
        for i, kc in sorted(todo, key=lambda t: (t[1].ref.scope, t[1].ref.key, t[0])):
            try:
                out[i] = await self.keys.complete_txn(conn, kc.ref, attempt=kc.attempt, result_json=kc.result_json)
            except DomainError as exc:
                # Refuses the whole batch: nothing of it is written.
                raise type(exc)(f"items[{i}]: complete_key: {exc}") from None
        return out

    async def _complete_instances(self, conn: Conn, saved: list[NewCheckpoint]) -> dict[int, Instance]:
        """Completes the instances the items name (complete_instance), after their saves, in the same transaction."""
        out: dict[int, Instance] = {}
        for i, new in enumerate(saved):
            if not new.complete_instance:
                continue
            assert self.completer is not None, "checked in _validate"
            try:
                out[i] = await self.completer(conn, new.ref, actor=new.execution_id)
            except DomainError as exc:
                # Refuses the whole batch: nothing of it is written.
                raise type(exc)(f"items[{i}]: complete_instance: {exc}") from None
        return out

    async def with_state(self, namespace: str, cp: Checkpoint) -> Checkpoint:
        """Fills in the state from the cache, or from the database on a miss (then caches it)."""
        cached = cp.size_bytes >= self.cache_min_bytes
        state = await self.cache.get_state(namespace, cp.workflow_id, cp.instance_key, cp.sequence) if cached else None
        if state is not None and hashlib.sha256(state).hexdigest() == cp.sha256:
            return replace(cp, state=state)
        ref = InstanceRef(namespace, cp.workflow_id, cp.instance_key)

        async def txn(conn: Conn) -> Checkpoint | None:
            return await self.checkpoints.get_txn(conn, ref, cp.sequence, with_state=True)

        if cp.size_bytes >= _LARGE_READ_BYTES:
            # Large reads queue here, first come first served and without a timeout (the caller's deadline
            # bounds the wait), rather than for a pooled connection: many at once would otherwise wait
            # past the pool timeout (UNAVAILABLE), and hold every connection the small calls need.
            async with self._large_reads:
                full = await self.db.transaction(txn)
        else:
            full = await self.db.transaction(txn)
        if full is None or full.state is None:
            raise NotFound(f"checkpoint {cp.sequence} of {cp.workflow_id}/{cp.instance_key} was pruned")
        if cached:
            await self.cache.put_state(namespace, cp.workflow_id, cp.instance_key, cp.sequence, full.state)
        return full

    async def latest(self, ref: InstanceRef, *, include_state: bool) -> Checkpoint:
        check_ref(ref)

        # One statement; a state the cache would serve no faster comes along with it. A large one is read
        # apart (with_state), through the gate for large reads.
        state_below = (min(self.cache_min_bytes if self.cache.enabled else _LARGE_READ_BYTES, _LARGE_READ_BYTES)
                       if include_state else 0)

        async def one(conn: Conn) -> tuple[bool, Checkpoint | None]:
            return await self.checkpoints.latest_txn(conn, ref, state_below=state_below)

        exists, cp = await self.db.single(one)
        if not exists:
            raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} does not exist")
        if cp is None:
            raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} has no checkpoints yet")
        if include_state and cp.state is None:
            return await self.with_state(ref.namespace, cp)
        return cp

    async def get(self, ref: InstanceRef, sequence: int, *, include_state: bool) -> Checkpoint:
        check_ref(ref)
        if sequence < 1:
            raise InvalidArgument("sequence must be 1 or more")

        async def txn(conn: Conn) -> Checkpoint | None:
            return await self.checkpoints.get_txn(conn, ref, sequence, with_state=False)

        cp = await self.db.transaction(txn)
        if cp is None:
            raise NotFound(f"checkpoint {sequence} of {ref.workflow_id}/{ref.instance_key} does not exist")
        return await self.with_state(ref.namespace, cp) if include_state else cp

    async def list_checkpoints(self, ref: InstanceRef, page: Page, *, include_state: bool) -> tuple[list[Checkpoint], str]:
        check_ref(ref)

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


