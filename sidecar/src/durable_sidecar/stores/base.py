"""The store interface both backends implement: a Database that runs transactions, and one store per table group.

Services hold these abstract types only. A `*_txn` method does its work inside
the transaction whose handle (`Conn`) it is given, so several store calls share
one transaction; `Database.transaction` opens it, retries it on transient
errors and commits it. Every time a store writes or compares is database time:
PostgreSQL's `now()`, or the sidecar's clock for the embedded SQLite file that
one sidecar process owns. Each method states the contract both backends keep;
tests/sidecar runs the same suite against both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, TypeVar

from ..domain import (
    ChangeLogEntry,
    Checkpoint,
    IdempotencyKey,
    Instance,
    InstanceEvent,
    InstanceFilter,
    InstanceMove,
    InstanceRef,
    InstanceStatus,
    KeyFilter,
    KeyRef,
    KeyStatus,
    MoveCandidate,
    MoveSelector,
    NewCheckpoint,
    NewClaim,
    NewVersion,
    Page,
    PrunePolicy,
    PruneResult,
    ResumeReason,
    StatusCounts,
    Version,
    WorkflowHead,
)
from .states import EncodedState, encode_state

T = TypeVar("T")


class Conn:
    """An open transaction of one backend: services pass it through to store methods and never look inside.

    Each backend subclasses it; its stores refuse a handle of another backend.
    """

    __slots__ = ()


class Database(ABC):
    """The connection (pool, or the one embedded connection) and its transactions."""

    @abstractmethod
    async def open(self) -> None:
        """Connects; fails fast (Unavailable, FailedPrecondition) with a message naming what is wrong."""

    @abstractmethod
    async def close(self) -> None:
        """Waits for the running transaction, if any, and releases every connection (and lock)."""

    @abstractmethod
    async def ping(self) -> bool:
        """Whether the database answers now (readiness); never raises."""

    @abstractmethod
    def pool_stats(self) -> dict[str, int]:
        """pool_size, pool_available and requests_waiting, for the metrics gauges."""

    @abstractmethod
    async def installation_id(self) -> str:
        """This database's identity (made by a migration); FailedPrecondition when the schema predates it."""

    @abstractmethod
    async def transaction(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Runs fn in one transaction and commits; on a transient error the whole fn runs again.

        A domain error raised by fn rolls everything back. Unavailable when the
        database cannot serve within the configured time or attempts.
        """

    async def single(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Runs fn, which issues one statement, with no transaction around it: the statement commits alone.

        One round trip instead of three (BEGIN, the statement, COMMIT), retried
        like `transaction`. A backend whose transactions cost no round trips
        runs it as one.
        """
        return await self.transaction(fn)


# --- rows the services hand the checkpoint stores ----------------------------------------


@dataclass(frozen=True)
class NewCheckpointRow:
    """One checkpoint of a batch, numbered and encoded, ready to insert."""

    ref: InstanceRef
    sequence: int
    step_name: str
    encoded: EncodedState
    sha256: str
    size_bytes: int
    execution_id: str
    node_name: str


@dataclass(frozen=True)
class CheckpointAdvance:
    """Where one instance stands after a batch: its newest checkpoint, and the lease of the execution that saved it."""

    ref: InstanceRef
    sequence: int
    step_name: str
    added: int
    owner: str
    lease_seconds: int


@dataclass(frozen=True)
class StepSave:
    """What the one-statement step-result save wrote: the checkpoint and, with a key named, the completed key."""

    checkpoint: Checkpoint
    key: IdempotencyKey | None
    now: datetime  # the database's time of the statement (the key's updated_at, else the checkpoint's created_at)
    # The next Guard's key the statement claimed (see save_step_txn's claim); None: not claimed by it.
    claimed: IdempotencyKey | None = None
    # The instance the statement completed (save_step_txn's complete_instance).
    finished: Instance | None = None


@dataclass(frozen=True)
class SingleSave:
    """What the one-statement save of one checkpoint did.

    outcome: 'written' or 'deduplicated' (checkpoint set), or 'not_found',
    'finished', 'stale' (last_sequence: where the instance stands).
    """

    outcome: str
    last_sequence: int
    checkpoint: Checkpoint | None


@dataclass(frozen=True)
class BatchSave:
    """What the one-statement save of a batch did.

    saved: every item's checkpoint (metadata) and whether it was there already; or, when
    refusal is 'not_found', 'finished' or 'stale', item `index` refused the batch (nothing
    was written; last_sequence: where its instance stands).
    """

    saved: list[tuple[Checkpoint, bool]]
    refusal: str = ""
    index: int = 0
    last_sequence: int = 0


@dataclass(frozen=True)
class StartedNew:
    """An instance the one-statement start created, with the workflow's current version it is bound to."""

    instance: Instance
    current_version: int
    # The next Guard's key the statement claimed (see start_new_txn's claim); None: not claimed by it.
    claimed: IdempotencyKey | None = None


@dataclass(frozen=True)
class SingleClaim:
    """What the one-statement claim found: the key it inserted (attempt 1), or the key as it stood, at database time now."""

    key: IdempotencyKey
    inserted: bool
    now: datetime


# --- stores ---------------------------------------------------------------------


class InstanceStore(ABC):
    """Rows of durable_instances and their audit events."""

    # Whether start_new_txn does its work (one statement); else the services take the general path at once.
    one_statement_start: ClassVar[bool] = False
    # Whether finish_running_txn does its work (one statement); else the services take the locked path at once.
    one_statement_finish: ClassVar[bool] = False

    @abstractmethod
    async def create_txn(self, conn: Conn, ref: InstanceRef, *, execution_id: str, lease_seconds: int,
                         bound_version: int, version_label: str, hold_seconds: int = 0) -> Instance | None:
        """Inserts a new running instance leased to execution_id; None when the key exists.

        lease_seconds is the instance's lease length; this lease lasts it plus hold_seconds.
        """

    async def start_new_txn(self, conn: Conn, ref: InstanceRef, *, execution_id: str, lease_seconds: int,
                            version_label: str, start_item: EncodedState | None,
                            start_item_bytes: int, claim: NewClaim | None = None,
                            hold_seconds: int = 0) -> StartedNew | None:
        """Creates the instance bound to its workflow's current version, with its start item and STARTED event,
        in one statement (run it with Database.single).

        With claim (a start's claim_on_start, validated), the same statement inserts that key in progress
        with attempt 1 when it does not exist (StartedNew.claimed); an existing key is left alone and
        claimed stays None: the caller claims it the usual way.

        None when the key exists, and from a backend without such a statement:
        the caller then takes the general path (create_txn and friends).
        """
        return None

    @abstractmethod
    async def get_txn(self, conn: Conn, ref: InstanceRef, *, for_update: bool = False) -> Instance | None:
        """The instance; with for_update its row stays locked until the transaction ends."""

    @abstractmethod
    async def lease_state_txn(self, conn: Conn, ref: InstanceRef) -> tuple[bool, bool]:
        """(lease alive, wake-up in the future) judged by database time."""

    @abstractmethod
    async def take_lease_txn(self, conn: Conn, ref: InstanceRef, *, owner: str, lease_seconds: int,
                             count_resume: bool, hold_seconds: int = 0) -> Instance:
        """Leases the (locked) instance to owner and clears any wake-up; lease_seconds becomes its lease length,
        and this lease lasts it plus hold_seconds."""

    @abstractmethod
    async def ever_held_txn(self, conn: Conn, ref: InstanceRef, execution_id: str) -> bool:
        """Whether the execution ever held the instance's lease (it started or resumed the instance)."""

    @abstractmethod
    async def put_start_item_txn(self, conn: Conn, ref: InstanceRef, encoded: EncodedState, *,
                                 size_bytes: int) -> None:
        """Stores the start item of the instance just created (written once, never changed)."""

    @abstractmethod
    async def start_item_txn(self, conn: Conn, ref: InstanceRef) -> bytes | None:
        """The instance's start item, decoded; None when it has none."""

    @abstractmethod
    async def lock_many_txn(self, conn: Conn, refs: list[InstanceRef]) -> dict[InstanceRef, Instance]:
        """The existing instances among refs (one namespace), locked until the transaction ends.

        Locks are taken in (workflow_id, instance_key) order, so concurrent
        batches over overlapping instances cannot deadlock each other.
        """

    @abstractmethod
    async def record_checkpoints_txn(self, conn: Conn, advances: list[CheckpointAdvance]) -> None:
        """Advances each (locked) instance to its newest sequence and renews the lease for the saving execution.

        The renewal lasts each advance's lease_seconds; the instance's recorded lease length is not changed.
        """

    @abstractmethod
    async def finish_txn(self, conn: Conn, ref: InstanceRef, *, status: InstanceStatus, error_message: str = "",
                         result_json: bytes | None = None) -> Instance:
        """Moves the (locked) instance to a final status, dropping its lease and wake-up."""

    async def finish_running_txn(self, conn: Conn, ref: InstanceRef, *, status: InstanceStatus, actor: str,
                                 error_message: str = "", result_json: bytes | None = None) -> Instance | None:
        """finish_txn and its event (kind = the status, detail = error_message) in one statement (Database.single),
        for an instance that is not final yet (running or suspended).

        None when there is no such instance, and from a backend without such a statement:
        the caller then takes the locked path, which says why.
        """
        return None

    @abstractmethod
    async def schedule_wake_txn(self, conn: Conn, ref: InstanceRef, *, wake_at: datetime | None,
                                delay_seconds: int | None) -> Instance:
        """Parks the (locked) instance until wake_at (or now + delay): lease released."""

    @abstractmethod
    async def claim_resumable_txn(self, conn: Conn, namespace: str, *, workflow_ids: list[str], limit: int,
                                  lease_seconds: int, token_prefix: str) -> list[tuple[Instance, ResumeReason, str]]:
        """Leases up to `limit` stalled and due instances, oldest first, to fresh claim tokens.

        An instance another transaction is claiming is skipped, never handed out twice.
        """

    @abstractmethod
    async def list_txn(self, conn: Conn, namespace: str, flt: InstanceFilter,
                       page: Page) -> tuple[list[Instance], str]:
        """Newest first, keyset-paged; returns the rows and the next page token ('' at the end)."""

    @abstractmethod
    async def select_for_move_txn(self, conn: Conn, namespace: str, selector: MoveSelector, *,
                                  lock: bool) -> list[MoveCandidate]:
        """Instances matching every criterion of the selector, by key, with their last checkpoint's node.

        With lock, the rows stay locked (in key order, like batched checkpoint
        saves, so the two cannot deadlock) until the transaction ends.
        """

    @abstractmethod
    async def existing_keys_txn(self, conn: Conn, namespace: str, workflow_id: str, keys: list[str]) -> set[str]:
        """Which of the keys exist in the workflow."""

    @abstractmethod
    async def rebind_txn(self, conn: Conn, namespace: str, workflow_id: str, keys: list[str], *,
                         to_version: int) -> int:
        """Binds the (locked) instances to another version; returns how many rows changed."""

    @abstractmethod
    async def add_event_txn(self, conn: Conn, ref: InstanceRef, kind: str, *, actor: str = "",
                            detail: str = "") -> None:
        """Appends a lifecycle event to the instance's audit trail."""

    @abstractmethod
    async def events_txn(self, conn: Conn, ref: InstanceRef, page: Page) -> tuple[list[InstanceEvent], str]:
        """The instance's audit trail, oldest first (the page token carries the last id)."""

    @abstractmethod
    async def count_txn(self, conn: Conn, namespace: str, flt: InstanceFilter) -> StatusCounts:
        """Instances matching the filter (its statuses and stalled_only ignored), by status."""


class CheckpointStore(ABC):
    """Append-only rows of durable_checkpoints, compressed above a threshold."""

    # Whether save_single_txn does its work (one statement); else the services take the batch path at once.
    one_statement_save: ClassVar[bool] = False
    # Whether save_step_txn can write (see StateMemory): the service only merges ahead of it then.
    one_statement_step_save: ClassVar[bool] = False

    def __init__(self, *, compress_threshold_bytes: int) -> None:
        self.compress_threshold_bytes = compress_threshold_bytes

    def encode(self, state: bytes) -> EncodedState:
        """Compresses states from the threshold on (see states.py)."""
        return encode_state(state, compress_threshold_bytes=self.compress_threshold_bytes)

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

    @abstractmethod
    async def insert_many_txn(self, conn: Conn, rows: list[NewCheckpointRow]) -> list[Checkpoint]:
        """Appends the checkpoints (one namespace); returns their metadata (without states) in the same order."""

    async def append_txn(self, conn: Conn, rows: list[NewCheckpointRow],
                         advances: list[CheckpointAdvance]) -> list[Checkpoint] | None:
        """insert_many_txn and InstanceStore.record_checkpoints_txn (the locked instances) in one statement.

        None from a backend without such a statement: the caller then runs the two.
        """
        return None

    @abstractmethod
    async def latest_txn(self, conn: Conn, ref: InstanceRef, *,
                         state_below: int) -> tuple[bool, Checkpoint | None]:
        """(whether the instance exists, its newest checkpoint) in one statement.

        The state comes along, decoded, when smaller than state_below bytes; else state is None.
        """

    @abstractmethod
    async def get_txn(self, conn: Conn, ref: InstanceRef, sequence: int, *,
                      with_state: bool) -> Checkpoint | None:
        """One checkpoint, its state decoded when asked for."""

    @abstractmethod
    async def list_txn(self, conn: Conn, ref: InstanceRef, page: Page, *,
                       with_state: bool) -> tuple[list[Checkpoint], str]:
        """In sequence order, keyset-paged."""

    @abstractmethod
    async def prune_txn(self, conn: Conn, namespace: str, policy: PrunePolicy) -> PruneResult:
        """Deletes by policy, always keeping each instance's newest checkpoint; updates counters."""


class IdempotencyStore(ABC):
    """Rows of durable_idempotency_keys; every time is database time."""

    @abstractmethod
    async def now_txn(self, conn: Conn) -> datetime:
        """The transaction's database time: the same now() every statement of it uses."""

    @abstractmethod
    async def get_txn(self, conn: Conn, ref: KeyRef, *, for_update: bool = False) -> IdempotencyKey | None:
        """The key, expired or not; with for_update its row stays locked until the transaction ends."""

    @abstractmethod
    async def insert_txn(self, conn: Conn, claim: NewClaim) -> IdempotencyKey | None:
        """Inserts the key in progress with attempt 1; None when it exists (the unique key decides).

        It lives `ttl` after its acquisition, and never ends before the lease it was given.
        """

    @abstractmethod
    async def acquire_txn(self, conn: Conn, claim: NewClaim, *, new_life: bool) -> IdempotencyKey:
        """Gives the locked key to a new holder with the next attempt number.

        A new life (the key had expired) also takes the claim's fingerprint and
        starts its age again; a take-over keeps both.
        """

    async def claim_single_txn(self, conn: Conn, claim: NewClaim) -> SingleClaim | None:
        """Inserts the key as insert_txn does or, when it exists, reads it (unlocked), in one statement.

        Run with Database.single. A completed key read this way may be replayed
        (it cannot change before it expires); any other existing key, and None
        (no row seen), goes to the locked path. This default takes two statements
        (fine where statements cost no round trip); PostgreSQL overrides it.
        """
        created = await self.insert_txn(conn, claim)
        if created is not None:
            return SingleClaim(created, True, await self.now_txn(conn))
        found = await self.get_txn(conn, claim.ref)
        return SingleClaim(found, False, await self.now_txn(conn)) if found is not None else None

    async def complete_held_txn(self, conn: Conn, ref: KeyRef, *, attempt: int,
                                result_json: bytes | None) -> tuple[IdempotencyKey, datetime] | None:
        """Completes the key in one statement when attempt holds it in progress: the key and the database time.

        None when it does not: the caller takes the locked path, which knows why.
        This default locks and updates in two statements; PostgreSQL overrides it.
        """
        found = await self.get_txn(conn, ref, for_update=True)
        if found is None or found.attempt != attempt or found.status is not KeyStatus.IN_PROGRESS:
            return None
        return await self.complete_txn(conn, ref, result_json=result_json), await self.now_txn(conn)

    @abstractmethod
    async def complete_txn(self, conn: Conn, ref: KeyRef, *, result_json: bytes | None) -> IdempotencyKey:
        """Marks the locked key completed with its result."""

    @abstractmethod
    async def release_txn(self, conn: Conn, ref: KeyRef, *, error_message: str) -> IdempotencyKey:
        """Marks the locked key failed: the next claim acquires it."""

    @abstractmethod
    async def list_txn(self, conn: Conn, namespace: str, flt: KeyFilter,
                       page: Page) -> tuple[list[IdempotencyKey], str]:
        """Newest first, keyset-paged."""

    @abstractmethod
    async def reap_expired_txn(self, conn: Conn, *, limit: int) -> list[KeyRef]:
        """Deletes up to `limit` expired keys that are not in progress, skipping rows a claim has locked."""


class VersionStore(ABC):
    """Workflow snapshots, the per-workflow head row and the version change log."""

    @abstractmethod
    async def head_txn(self, conn: Conn, namespace: str, workflow_id: str) -> WorkflowHead | None:
        """The workflow's head row, when it has one."""

    @abstractmethod
    async def lock_head_txn(self, conn: Conn, namespace: str, workflow_id: str) -> WorkflowHead:
        """Creates the head row if needed and locks it until the transaction ends."""

    @abstractmethod
    async def set_head_txn(self, conn: Conn, namespace: str, workflow_id: str, *, latest: int, current: int) -> None:
        """Sets the (locked) head's latest and current version numbers."""

    @abstractmethod
    async def claim_n8n_check_txn(self, conn: Conn, namespace: str, workflow_id: str, *,
                                  interval_seconds: int) -> bool:
        """Whether this caller should ask n8n now, judged by database time.

        Always true while the workflow has no version (nothing to bind otherwise);
        else true for one caller per interval (0: never), who records the time.
        """

    @abstractmethod
    async def mark_n8n_checked_txn(self, conn: Conn, namespace: str, workflow_id: str) -> None:
        """Records that n8n was asked now (creating the head row if needed)."""

    @abstractmethod
    async def find_by_hash_txn(self, conn: Conn, namespace: str, workflow_id: str,
                               content_hash: str) -> tuple[Version, int] | None:
        """The version with this content and the workflow's current version number."""

    @abstractmethod
    async def insert_txn(self, conn: Conn, new: NewVersion, version: int) -> Version:
        """Stores the snapshot as the given version number."""

    @abstractmethod
    async def get_txn(self, conn: Conn, namespace: str, workflow_id: str, version: int, *,
                      with_definition: bool) -> Version | None:
        """One version, with its definition JSON when asked for."""

    @abstractmethod
    async def node_names_txn(self, conn: Conn, namespace: str, workflow_id: str,
                             versions: list[int]) -> dict[int, frozenset[str]]:
        """The step names of each of the versions that exist."""

    @abstractmethod
    async def list_txn(self, conn: Conn, namespace: str, workflow_id: str,
                       page: Page) -> tuple[list[Version], str]:
        """Newest first, without definitions, keyset-paged."""

    @abstractmethod
    async def log_registration_txn(self, conn: Conn, new: NewVersion, *, from_version: int, to_version: int,
                                   reason: str) -> None:
        """Appends a version_registered entry to the change log."""

    @abstractmethod
    async def log_moves_txn(self, conn: Conn, namespace: str, workflow_id: str, moves: list[InstanceMove], *,
                            actor: str, reason: str) -> None:
        """One instance_moved change-log entry per moved instance."""

    @abstractmethod
    async def changes_txn(self, conn: Conn, namespace: str, workflow_id: str, instance_key: str,
                          page: Page) -> tuple[list[ChangeLogEntry], str]:
        """The change log, newest first, optionally of one workflow or one instance."""
