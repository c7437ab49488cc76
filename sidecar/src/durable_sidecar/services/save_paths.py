"""Which statement path a save takes: one statement where the store has it (PostgreSQL's functions in
stores/postgres/sql/), else None and the service's transaction decides.

The choice only: what a save means is services/save_rules.py and the transaction
of services/checkpoints.py, and both paths give the same outcomes
(tests/sidecar/test_save_rules_conformance.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .. import failpoints, metrics
from ..domain import KeyCompleted, NewCheckpoint, NewClaim, SavedCheckpoint
from ..errors import DomainError, FailedPrecondition, InvalidArgument, NotFound, StaleFencingToken, TooLarge
from ..memory.states import StateMemory
from ..stores.base import BatchSave, Conn, Database, NewCheckpointRow, SingleSave, StepSave
from ..stores.checkpoints import CheckpointStore
from ..stores.states import EncodedState
from .grouping import StatementGroups
from .save_rules import Premerged, refusal

if TYPE_CHECKING:
    from .idempotency import IdempotencyService

# A batch of plain items up to this many encoded bytes is one statement (its states go as one bytea).
_ONE_STATEMENT_BATCH_BYTES = 8 * 1024 * 1024
# Lone plain saves up to this many encoded bytes that arrive while others of their namespace are being
# written go together as one statement (services/grouping.py); larger ones are written on their own.
_GROUPED_BYTES = 64 * 1024
_GROUP_FLUSHERS = 2
_GROUP_MAX_ITEMS = 64


class SaveHost(Protocol):
    """What the one-statement paths use of the CheckpointService that runs them."""

    db: Database
    checkpoints: CheckpointStore
    memory: StateMemory
    keys: IdempotencyService | None
    default_lease_seconds: int

    async def merge_step_result(self, index: int, new: NewCheckpoint,
                                current: bytes | None) -> tuple[NewCheckpoint, EncodedState]: ...

    def after_commit(self, namespace: str, saved_items: list[NewCheckpoint],
                     results: list[SavedCheckpoint]) -> None: ...


def single_statement(new: NewCheckpoint) -> bool:
    """Whether a lone item can be saved by one statement: a step result is merged and a key completed in the
    batch path's transaction; a test's failpoint between insert and commit needs that transaction too."""
    return (not new.add_step_result and new.complete_key is None and not new.complete_instance and not new.files
            and not failpoints.enabled("checkpoint.after_insert"))


class OneStatementSaves:
    """The saves a store can write in one statement, and the choice of which one a batch takes."""

    def __init__(self, host: SaveHost, *, max_batch_items: int) -> None:
        self.host = host
        # Concurrent lone plain saves of a namespace as one statement (group commit).
        self._groups: StatementGroups[tuple[NewCheckpoint, EncodedState], list[SavedCheckpoint] | None] = (
            StatementGroups(lambda ns, pair: self.save_single(ns, *pair), self.save_group,
                            flushers=_GROUP_FLUSHERS, max_items=min(_GROUP_MAX_ITEMS, max_batch_items)))

    async def save(self, namespace: str, prepared: list[tuple[NewCheckpoint, EncodedState]],
                   claim_with_write: NewClaim | None) -> tuple[list[SavedCheckpoint] | None, Premerged | None]:
        """(the batch's answers, None) where one statement saved it; else (None, a step result merged ahead
        of a statement that could not write, or None) and the caller's transaction decides."""
        premerged: Premerged | None = None
        store = self.host.checkpoints
        if (len(prepared) == 1 and prepared[0][0].add_step_result and not prepared[0][0].files
                and store.one_statement_step_save
                and self.host.memory.enabled and not failpoints.enabled("checkpoint.after_insert")):
            step = await self.save_step(namespace, prepared[0][0], claim_with_write)
            if isinstance(step, list):
                return step, None
            premerged = step
            metrics.STEP_SAVES.labels("transaction").inc()
        if len(prepared) == 1 and store.one_statement_save and single_statement(prepared[0][0]):
            single = await self.save_lone(namespace, *prepared[0])
            if single is not None:
                return single, None
        elif (len(prepared) > 1 and all(single_statement(new) for new, _ in prepared)
              and sum(len(encoded.data) for _, encoded in prepared) <= _ONE_STATEMENT_BATCH_BYTES):
            batch = await self.save_batch(namespace, prepared)
            if batch is not None:
                return batch, None
        return None, premerged

    async def save_step(self, namespace: str, new: NewCheckpoint,
                         claim: NewClaim | None = None) -> list[SavedCheckpoint] | Premerged | None:
        """A step result merged into the remembered state and saved, its key completed, in one statement.

        None or Premerged (nothing written): no state remembered, or the
        database found the instance elsewhere than the remembered state says
        (StateMemory); the transaction then decides, reading the state, and
        reuses the merge handed back where that state is the remembered one.
        """
        remembered = self.host.memory.get(new.ref)
        if remembered is None or (new.expected_sequence is not None and new.expected_sequence != remembered.sequence):
            return None
        try:
            merged, encoded = await self.host.merge_step_result(0, new, remembered.state)
        except (InvalidArgument, TooLarge) as exc:
            return Premerged(remembered.state, None, exc)  # the transaction refuses it, in its order of checks
        row = NewCheckpointRow(new.ref, 0, new.step_name, encoded, merged.sha256, len(merged.state), new.execution_id,
                               new.node_name)
        del encoded
        kc = new.complete_key

        async def one(conn: Conn) -> StepSave | None:
            return await self.host.checkpoints.save_step_txn(
                conn, row, expected_sequence=new.expected_sequence, lease_seconds=new.lease_seconds,
                default_lease_seconds=self.host.default_lease_seconds, base_sequence=remembered.sequence,
                base_digest=remembered.digest, complete=(kc.ref, kc.attempt, kc.result_json) if kc else None,
                claim=claim, complete_instance=new.complete_instance)

        failpoints.hit("checkpoint.before_insert")
        # The save, its key's completion and the next key's claim or the instance's completion: one statement.
        done = await self.host.db.single(one)
        if done is None:
            self.host.memory.forget(new.ref)
            return Premerged(remembered.state, (merged, row.encoded))
        failpoints.hit("checkpoint.after_commit")
        metrics.STEP_SAVES.labels("one_statement").inc()
        if done.key is not None:
            assert self.host.keys is not None
            await self.host.keys.completed([KeyCompleted(done.key, done.now, changed=True)])
        next_claim = None
        if done.claimed is not None:
            assert self.host.keys is not None
            next_claim = self.host.keys.acquired_with_write(done.claimed)
        results = [SavedCheckpoint(done.checkpoint, deduplicated=False, state=merged.state, completed_key=done.key,
                                   completed_instance=done.finished, next_claim=next_claim)]
        self.host.after_commit(namespace, [merged], results)
        return results

    async def save_lone(self, namespace: str, new: NewCheckpoint,
                         encoded: EncodedState) -> list[SavedCheckpoint] | None:
        """One plain item: a small one joins the concurrent saves of its namespace in one statement (group
        commit, services/grouping.py), a large one is written alone; None: take the batch path."""
        if len(encoded.data) <= _GROUPED_BYTES:
            return await self._groups.write(namespace, (new, encoded))
        return await self.save_single(namespace, new, encoded)

    async def save_single(self, namespace: str, new: NewCheckpoint,
                           encoded: EncodedState) -> list[SavedCheckpoint] | None:
        """One item as one statement (one round trip), where the backend has one; None: take the batch path."""
        row = NewCheckpointRow(new.ref, 0, new.step_name, encoded, new.sha256, len(new.state), new.execution_id,
                               new.node_name)
        del encoded  # the row holds the encoded state; nothing else keeps a copy through the write

        async def one(conn: Conn) -> SingleSave | None:
            return await self.host.checkpoints.save_single_txn(conn, row, expected_sequence=new.expected_sequence,
                                                          lease_seconds=new.lease_seconds,
                                                          default_lease_seconds=self.host.default_lease_seconds)

        failpoints.hit("checkpoint.before_insert")
        done = await self.host.db.single(one)
        if done is None:
            return None
        if done.outcome in ("not_found", "finished", "stale"):
            raise refusal(done.outcome, 0, new, done.last_sequence)
        assert done.checkpoint is not None, f"unexpected outcome {done.outcome}"
        failpoints.hit("checkpoint.after_commit")
        results = [SavedCheckpoint(done.checkpoint, deduplicated=done.outcome == "deduplicated")]
        self.host.after_commit(namespace, [new], results)
        return results

    async def save_batch(self, namespace: str,
                          prepared: list[tuple[NewCheckpoint, EncodedState]]) -> list[SavedCheckpoint] | None:
        """Plain items (no step result, no key) as one statement, where the backend has one; None: the batch path."""

        async def one(conn: Conn) -> BatchSave | None:
            return await self.host.checkpoints.save_many_txn(conn, prepared,
                                                        default_lease_seconds=self.host.default_lease_seconds)

        failpoints.hit("checkpoint.before_insert")
        done = await self.host.db.single(one)
        if done is None:
            return None
        if done.refusal:
            raise refusal(done.refusal, done.index, prepared[done.index][0], done.last_sequence)
        failpoints.hit("checkpoint.after_commit")
        results = [SavedCheckpoint(cp, deduplicated=dup) for cp, dup in done.saved]
        self.host.after_commit(namespace, [new for new, _ in prepared], results)
        return results

    async def save_group(self, namespace: str, group: list[tuple[NewCheckpoint, EncodedState]]
                          ) -> list[list[SavedCheckpoint] | BaseException | None]:
        """Lone plain saves of several callers as one statement, each caller's answer its own.

        A refusal of one item (the statement then wrote nothing) sends every item its own way, one
        statement each in arrival order, so each caller gets what saving alone would have given it.
        """
        try:
            saved = await self.save_batch(namespace, group)
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
                outcomes.append(await self.save_single(namespace, new, encoded))
            except DomainError as exc:
                outcomes.append(exc)
        return outcomes

