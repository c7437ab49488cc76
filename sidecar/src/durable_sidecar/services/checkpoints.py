"""CheckpointService: validate, fence, deduplicate and append checkpoints in one transaction per batch."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from .. import failpoints, metrics, validation
from ..domain import (
    Checkpoint,
    Instance,
    InstanceRef,
    KeyCompleted,
    KeyCompletion,
    KeyRef,
    NewCheckpoint,
    NewClaim,
    Page,
    PrunePolicy,
    PruneResult,
    SavedCheckpoint,
)
from ..errors import DomainError, FailedPrecondition, InvalidArgument, NotFound, StaleFencingToken, TooLarge
from ..memory.states import StateMemory
from ..stores.base import (
    BatchSave,
    CheckpointAdvance,
    Conn,
    Database,
    NewCheckpointRow,
    SingleSave,
    StepSave,
)
from ..stores.cache import Cache
from ..stores.checkpoints import CheckpointStore
from ..stores.instances import InstanceStore
from ..stores.states import EncodedState
from .grouping import StatementGroups

if TYPE_CHECKING:
    from .idempotency import ClaimItem, IdempotencyService

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
# A batch of plain items up to this many encoded bytes is one statement (its states go as one bytea).
_ONE_STATEMENT_BATCH_BYTES = 8 * 1024 * 1024
_HELPERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="durable-compress")
# Lone plain saves up to this many encoded bytes that arrive while others of their namespace are being
# written go together as one statement (services/grouping.py); larger ones are written on their own.
_GROUPED_BYTES = 64 * 1024
_GROUP_FLUSHERS = 2
_GROUP_MAX_ITEMS = 64


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
    add_step_result: bool = False
    complete_key: CompleteKey | None = None
    complete_instance: bool = False
    # The next Guard's key, claimed after the batch saved (see CheckpointService.save).
    claim_next: ClaimItem | None = None
    # The caller has checked that state is JSON and every identifier's length and characters (the gRPC
    # boundary does for every request): not checked twice.
    json_checked: bool = False


class InstanceCompleter(Protocol):
    """Completes an instance inside the caller's transaction (InstanceService.complete_txn)."""

    def __call__(self, conn: Conn, ref: InstanceRef, *, actor: str) -> Awaitable[Instance]: ...


@dataclass(frozen=True)
class CompleteKey:
    """SaveCheckpointItem.complete_key as the transport decoded it."""

    scope: str
    key: str
    attempt: int
    result_json: bytes


@dataclass
class _Locked:
    """What the transaction knows of one instance while it walks a batch."""

    status_final: bool
    last_sequence: int
    last_step: str
    latest: Checkpoint | None  # the stored newest checkpoint's metadata, once read
    lease_length: int  # the instance's lease length: renewals that name none last this long
    pending: int | None = None  # index (in the batch's rows) of its newest checkpoint not yet inserted
    pending_sha256: str = ""
    added: int = 0
    owner: str = ""
    lease_seconds: int = 0
    # The instance's current state (newest checkpoint of the batch or stored, else
    # its start item, else None for {}), once a step result needed it.
    current: bytes | None = None
    current_known: bool = False


@dataclass(frozen=True)
class _Planned:
    """An item's outcome before the inserts: a stored checkpoint, or a row of the batch (new or repeated)."""

    stored: Checkpoint | None
    row: int
    deduplicated: bool
    new: NewCheckpoint  # as saved: a step result merged into the state it was added to


@dataclass(frozen=True)
class _Premerged:
    """A step result _save_step merged into the remembered state `base` but could not write: the transaction
    that decides instead reuses the merge (the same bytes, or the same refusal) where it finds that state."""

    base: bytes | None
    merged: tuple[NewCheckpoint, EncodedState] | None
    refusal: InvalidArgument | TooLarge | None = None  # the merge refused the item (merged is None)


_UNENCODED = EncodedState(b"", 0)


def _dumps(value: Any) -> bytes:
    """Deterministic JSON: no whitespace, keys in their order, so a retried step result hashes the same."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise InvalidArgument("the state holds a number beyond the double range (such as 1e400), which a "
                              "merged state cannot keep: save the state with STATE_MODE_REPLACE") from None
    except RecursionError:
        raise InvalidArgument("the state is nested too deeply to merge a step result into it") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape parsed from an older state: keep it escaped
        return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def _loads(field: str, raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except RecursionError:
        raise InvalidArgument(f"{field} is nested too deeply to merge a step result into it") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InvalidArgument(f"{field} cannot be merged: {exc}") from None


def add_step_result(current: bytes | None, step_name: str, result: bytes) -> bytes:
    """The instance's state with the step's result set under its name (STATE_MODE_ADD_STEP_RESULT).

    A current state that is not a JSON object is kept under "state". Setting a
    key that exists keeps its place, so adding the same result again gives the
    same bytes (a retry deduplicates).
    """
    state = _loads("the current state", current) if current else {}
    if not isinstance(state, dict):
        state = {"state": state}
    state[step_name] = _loads("state_json", result)
    return _dumps(state)


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
        # Concurrent lone plain saves of a namespace as one statement (group commit).
        self._groups: StatementGroups[tuple[NewCheckpoint, EncodedState], list[SavedCheckpoint] | None] = (
            StatementGroups(lambda ns, pair: self._save_single(ns, *pair), self._save_group,
                            flushers=_GROUP_FLUSHERS, max_items=min(_GROUP_MAX_ITEMS, max_batch_items)))

    def remember_start(self, ref: InstanceRef, start_item_json: bytes, encoded: EncodedState | None) -> None:
        """A new instance's state is its start item (none: no state) until its first checkpoint."""
        if self.memory.enabled:
            self.memory.put(ref, 0, start_item_json or None,
                            hashlib.sha256(encoded.data).hexdigest() if encoded is not None else "")

    def remember(self, ref: InstanceRef, checkpoint: Checkpoint) -> None:
        """The instance's newest checkpoint, read with its state (a resume)."""
        if self.memory.enabled and checkpoint.state is not None:
            self.memory.put(ref, checkpoint.sequence, checkpoint.state, checkpoint.sha256)

    def check_state(self, field: str, raw: bytes, *, object_only: bool = False, json_checked: bool = False) -> None:
        """A state-like payload: at most DURABLE_MAX_STATE_BYTES (TooLarge above) of JSON (InvalidArgument)."""
        if len(raw) > self.max_state_bytes:
            raise TooLarge(
                f"{field} is {len(raw)} bytes; the limit is {self.max_state_bytes} bytes "
                "(DURABLE_MAX_STATE_BYTES): save fewer fields"
            )
        if json_checked:
            if not raw:
                raise InvalidArgument(f"{field} is required (JSON)")
        else:
            validation.json_bytes(field, raw)
        # Valid JSON that starts with "{" is an object: no second parse needed.
        if object_only and not raw.lstrip(b" \t\r\n").startswith(b"{"):
            raise InvalidArgument(f"{field} must be a JSON object")

    def _validate(self, namespace: str, index: int, item: SaveItem) -> NewCheckpoint:
        state = item.state
        try:
            if not item.json_checked:
                validation.identifier("workflow_id", item.workflow_id)
                validation.identifier("instance_key", item.instance_key)
                validation.identifier("step_name", item.step_name)
                validation.identifier("execution_id", item.execution_id)
                validation.identifier("node_name", item.node_name, required=False)
            elif not (item.workflow_id and item.instance_key and item.step_name and item.execution_id):
                # The boundary checked every identifier's length and characters: only requiredness is left.
                for field, value in (("workflow_id", item.workflow_id), ("instance_key", item.instance_key),
                                     ("step_name", item.step_name), ("execution_id", item.execution_id)):
                    if not value:
                        raise InvalidArgument(f"{field} is required")
            # 0 stays 0: the instance's own lease length.
            lease = validation.in_range("lease_seconds", item.lease_seconds, 1, 86_400, default=0)
            if item.expected_sequence is not None and item.expected_sequence < 0:
                raise InvalidArgument("expected_sequence must not be negative")
            self.check_state("state_json", state, json_checked=item.json_checked)
            completion = self._completion(namespace, item) if item.complete_key is not None else None
            if item.complete_instance and self.completer is None:
                raise InvalidArgument("complete_instance is not served here (no instance service)")
        except (InvalidArgument, TooLarge) as exc:
            raise type(exc)(f"items[{index}]: {exc}") from None
        return NewCheckpoint(
            ref=InstanceRef(namespace, item.workflow_id, item.instance_key),
            step_name=item.step_name,
            state=state,
            sha256=hashlib.sha256(state).hexdigest(),
            execution_id=item.execution_id,
            node_name=item.node_name,
            expected_sequence=item.expected_sequence,
            lease_seconds=lease,
            add_step_result=item.add_step_result,
            complete_key=completion,
            complete_instance=item.complete_instance,
        )

    def _completion(self, namespace: str, item: SaveItem) -> KeyCompletion:
        assert item.complete_key is not None
        if self.keys is None:
            raise InvalidArgument("complete_key is not served here (no idempotency service)")
        ck = item.complete_key
        ref = KeyRef(namespace, ck.scope, ck.key)
        # The step result is the key's result unless the caller sent its own.
        result = ck.result_json or item.state
        try:
            self.keys.check_completion(ref, attempt=ck.attempt, result_json=result)
        except (InvalidArgument, TooLarge) as exc:
            raise type(exc)(f"complete_key: {exc}") from None
        return KeyCompletion(ref, ck.attempt, result)

    def _prepare(self, namespace: str, items: list[SaveItem]) -> list[tuple[NewCheckpoint, EncodedState]]:
        out = []
        validate, encode = self._validate, self.checkpoints.encode
        for i, item in enumerate(items):
            if item.add_step_result:
                # A step result is encoded once merged into the instance's state (in the transaction).
                out.append((self._validate(namespace, i, item), _UNENCODED))
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
        _check_completions([new for new, _ in prepared])
        premerged: _Premerged | None = None
        if (len(prepared) == 1 and prepared[0][0].add_step_result and self.checkpoints.one_statement_step_save
                and self.memory.enabled and not failpoints.enabled("checkpoint.after_insert")):
            step = await self._save_step(namespace, prepared[0][0], claim_with_write)
            if isinstance(step, list):
                return step
            premerged = step
            metrics.STEP_SAVES.labels("transaction").inc()
        if len(prepared) == 1 and self.checkpoints.one_statement_save and _single_statement(prepared[0][0]):
            single = await self._save_lone(namespace, *prepared[0])
            if single is not None:
                return single
        elif (len(prepared) > 1 and all(_single_statement(new) for new, _ in prepared)
              and sum(len(encoded.data) for _, encoded in prepared) <= _ONE_STATEMENT_BATCH_BYTES):
            batch = await self._save_batch(namespace, prepared)
            if batch is not None:
                return batch

        async def txn(conn: Conn) -> tuple[list[SavedCheckpoint], list[NewCheckpoint], list[KeyCompleted]]:
            # Three statements per batch, whatever its size: lock the instances (in a
            # fixed order, so concurrent batches cannot deadlock), insert the new
            # checkpoints, advance the instances (the last two in one where the store
            # can). Keys to complete add theirs.
            instances = await self.instances.lock_many_txn(conn, [new.ref for new, _ in prepared])
            locked = {ref: _Locked(i.status.final, i.last_sequence, i.last_step, None,
                                   i.lease_seconds or self.default_lease_seconds)
                      for ref, i in instances.items()}
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
        self._saved(namespace, saved_items, results)
        return results

    async def _save_step(self, namespace: str, new: NewCheckpoint,
                         claim: NewClaim | None = None) -> list[SavedCheckpoint] | _Premerged | None:
        """A step result merged into the remembered state and saved, its key completed, in one statement.

        None or _Premerged (nothing written): no state remembered, or the
        database found the instance elsewhere than the remembered state says
        (StateMemory); the transaction then decides, reading the state, and
        reuses the merge handed back where that state is the remembered one.
        """
        remembered = self.memory.get(new.ref)
        if remembered is None or (new.expected_sequence is not None and new.expected_sequence != remembered.sequence):
            return None
        try:
            merged, encoded = await self._merge(0, new, remembered.state)
        except (InvalidArgument, TooLarge) as exc:
            return _Premerged(remembered.state, None, exc)  # the transaction refuses it, in its order of checks
        row = NewCheckpointRow(new.ref, 0, new.step_name, encoded, merged.sha256, len(merged.state), new.execution_id,
                               new.node_name)
        del encoded
        kc = new.complete_key

        async def one(conn: Conn) -> StepSave | None:
            return await self.checkpoints.save_step_txn(
                conn, row, expected_sequence=new.expected_sequence, lease_seconds=new.lease_seconds,
                default_lease_seconds=self.default_lease_seconds, base_sequence=remembered.sequence,
                base_digest=remembered.digest, complete=(kc.ref, kc.attempt, kc.result_json) if kc else None,
                claim=claim, complete_instance=new.complete_instance)

        failpoints.hit("checkpoint.before_insert")
        # The save, its key's completion and the next key's claim or the instance's completion: one statement.
        done = await self.db.single(one)
        if done is None:
            self.memory.forget(new.ref)
            return _Premerged(remembered.state, (merged, row.encoded))
        failpoints.hit("checkpoint.after_commit")
        metrics.STEP_SAVES.labels("one_statement").inc()
        if done.key is not None:
            assert self.keys is not None
            await self.keys.completed([KeyCompleted(done.key, done.now, changed=True)])
        next_claim = None
        if done.claimed is not None:
            assert self.keys is not None
            next_claim = self.keys.acquired_with_write(done.claimed)
        results = [SavedCheckpoint(done.checkpoint, deduplicated=False, state=merged.state, completed_key=done.key,
                                   completed_instance=done.finished, next_claim=next_claim)]
        self._saved(namespace, [merged], results)
        return results

    async def _save_lone(self, namespace: str, new: NewCheckpoint,
                         encoded: EncodedState) -> list[SavedCheckpoint] | None:
        """One plain item: a small one joins the concurrent saves of its namespace in one statement (group
        commit, services/grouping.py), a large one is written alone; None: take the batch path."""
        if len(encoded.data) <= _GROUPED_BYTES:
            return await self._groups.write(namespace, (new, encoded))
        return await self._save_single(namespace, new, encoded)

    async def _save_single(self, namespace: str, new: NewCheckpoint,
                           encoded: EncodedState) -> list[SavedCheckpoint] | None:
        """One item as one statement (one round trip), where the backend has one; None: take the batch path."""
        row = NewCheckpointRow(new.ref, 0, new.step_name, encoded, new.sha256, len(new.state), new.execution_id,
                               new.node_name)
        del encoded  # the row holds the encoded state; nothing else keeps a copy through the write

        async def one(conn: Conn) -> SingleSave | None:
            return await self.checkpoints.save_single_txn(conn, row, expected_sequence=new.expected_sequence,
                                                          lease_seconds=new.lease_seconds,
                                                          default_lease_seconds=self.default_lease_seconds)

        failpoints.hit("checkpoint.before_insert")
        done = await self.db.single(one)
        if done is None:
            return None
        if done.outcome == "not_found":
            raise _not_found(0, new.ref)
        if done.outcome == "finished":
            raise _finished(0, new.ref)
        if done.outcome == "stale":
            assert new.expected_sequence is not None
            raise _stale(0, new.expected_sequence, done.last_sequence)
        assert done.checkpoint is not None, f"unexpected outcome {done.outcome}"
        failpoints.hit("checkpoint.after_commit")
        results = [SavedCheckpoint(done.checkpoint, deduplicated=done.outcome == "deduplicated")]
        self._saved(namespace, [new], results)
        return results

    async def _save_batch(self, namespace: str,
                          prepared: list[tuple[NewCheckpoint, EncodedState]]) -> list[SavedCheckpoint] | None:
        """Plain items (no step result, no key) as one statement, where the backend has one; None: the batch path."""

        async def one(conn: Conn) -> BatchSave | None:
            return await self.checkpoints.save_many_txn(conn, prepared,
                                                        default_lease_seconds=self.default_lease_seconds)

        failpoints.hit("checkpoint.before_insert")
        done = await self.db.single(one)
        if done is None:
            return None
        if done.refusal:
            new = prepared[done.index][0]
            if done.refusal == "not_found":
                raise _not_found(done.index, new.ref)
            if done.refusal == "finished":
                raise _finished(done.index, new.ref)
            assert done.refusal == "stale" and new.expected_sequence is not None, f"unexpected {done.refusal}"
            raise _stale(done.index, new.expected_sequence, done.last_sequence)
        failpoints.hit("checkpoint.after_commit")
        results = [SavedCheckpoint(cp, deduplicated=dup) for cp, dup in done.saved]
        self._saved(namespace, [new for new, _ in prepared], results)
        return results

    async def _save_group(self, namespace: str, group: list[tuple[NewCheckpoint, EncodedState]]
                          ) -> list[list[SavedCheckpoint] | BaseException | None]:
        """Lone plain saves of several callers as one statement, each caller's answer its own.

        A refusal of one item (the statement then wrote nothing) sends every item its own way, one
        statement each in arrival order, so each caller gets what saving alone would have given it.
        """
        try:
            saved = await self._save_batch(namespace, group)
        except (NotFound, FailedPrecondition, StaleFencingToken):
            pass  # one item refused: nothing was written
        else:
            if saved is None:
                return [None] * len(group)  # the store has no one-statement batch: each takes the transaction
            metrics.GROUPED_SAVES.inc(len(group))
            return [[one] for one in saved]
        outcomes: list[list[SavedCheckpoint] | BaseException | None] = []
        for new, encoded in group:
            try:
                outcomes.append(await self._save_single(namespace, new, encoded))
            except DomainError as exc:
                outcomes.append(exc)
        return outcomes

    def _saved(self, namespace: str, saved_items: list[NewCheckpoint], results: list[SavedCheckpoint]) -> None:
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
                        locked: dict[InstanceRef, _Locked], rows: list[NewCheckpointRow], *,
                        premerged: _Premerged | None = None) -> _Planned:
        """Checks one item against where its instance stands (earlier items of the batch included)."""
        ref = new.ref
        state = locked.get(ref)
        if state is None:
            raise _not_found(index, ref)
        if new.add_step_result:
            new, encoded = await self._merged(conn, index, new, state, premerged)
        if state.last_sequence > 0 and state.last_step == new.step_name:
            # The same step saved again with the same state (a retry) is the checkpoint already there.
            if state.pending is not None:
                if state.pending_sha256 == new.sha256:
                    return _Planned(None, state.pending, deduplicated=True, new=new)
            else:
                if state.latest is None:
                    state.latest = await self.checkpoints.get_txn(conn, ref, state.last_sequence, with_state=False)
                if state.latest is not None and state.latest.sha256 == new.sha256:
                    return _Planned(state.latest, -1, deduplicated=True, new=new)
        if state.status_final:
            raise _finished(index, ref)
        if new.expected_sequence is not None and new.expected_sequence != state.last_sequence:
            raise _stale(index, new.expected_sequence, state.last_sequence)
        sequence = state.last_sequence + 1
        rows.append(NewCheckpointRow(ref, sequence, new.step_name, encoded, new.sha256, len(new.state),
                                     new.execution_id, new.node_name))
        state.last_sequence, state.last_step = sequence, new.step_name
        state.pending, state.pending_sha256 = len(rows) - 1, new.sha256
        state.current, state.current_known = new.state, True
        state.added += 1
        state.owner, state.lease_seconds = new.execution_id, new.lease_seconds or state.lease_length
        return _Planned(None, len(rows) - 1, deduplicated=False, new=new)

    async def _merged(self, conn: Conn, index: int, new: NewCheckpoint, state: _Locked,
                      premerged: _Premerged | None) -> tuple[NewCheckpoint, EncodedState]:
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
        return await self._merge(index, new, state.current)

    async def _merge(self, index: int, new: NewCheckpoint, current: bytes | None) -> tuple[NewCheckpoint, EncodedState]:
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
        _check_ref(ref)

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


def _single_statement(new: NewCheckpoint) -> bool:
    """Whether a lone item can be saved by one statement: a step result is merged and a key completed in the
    batch path's transaction; a test's failpoint between insert and commit needs that transaction too."""
    return (not new.add_step_result and new.complete_key is None and not new.complete_instance
            and not failpoints.enabled("checkpoint.after_insert"))


def _check_completions(saved: list[NewCheckpoint]) -> None:
    """complete_instance only on an instance's last item of the batch: a later one would save to it completed."""
    if len(saved) < 2 or not any(new.complete_instance for new in saved):
        return
    last = {new.ref: i for i, new in enumerate(saved)}
    for i, new in enumerate(saved):
        if new.complete_instance and last[new.ref] != i:
            raise InvalidArgument(
                f"items[{i}]: complete_instance is set, but items[{last[new.ref]}] saves to the same instance "
                f"after it; set complete_instance on the instance's last item of the batch only")


def _not_found(index: int, ref: InstanceRef) -> NotFound:
    return NotFound(f"items[{index}]: instance {ref.workflow_id}/{ref.instance_key} does not exist: "
                    "start it with StartOrResume (the Resume Point node) before saving checkpoints")


def _finished(index: int, ref: InstanceRef) -> FailedPrecondition:
    return FailedPrecondition(f"items[{index}]: instance {ref.workflow_id}/{ref.instance_key} is finished; "
                              "a finished instance takes no more checkpoints")


def _stale(index: int, expected: int, last: int) -> StaleFencingToken:
    return StaleFencingToken(f"items[{index}]: expected newest sequence {expected} but it is {last}: another "
                             "execution saved in between; re-read the instance")


def _check_ref(ref: InstanceRef) -> None:
    validation.identifier("workflow_id", ref.workflow_id)
    validation.identifier("instance_key", ref.instance_key)
