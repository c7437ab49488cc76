"""What every store shares: the Database that runs transactions, its transaction handle, and the rows stores trade.

A store (stores/instances.py, checkpoints.py, idempotency.py, versions.py,
waits.py) is one class over a backend's Runner. Its `*_txn` methods do their
work inside the transaction whose handle (`Conn`) they are given, so several
store calls share one transaction; `Database.transaction` opens it, retries it
on transient errors and commits it. Every time a store writes or compares is
database time: PostgreSQL's `now()`, or the sidecar's clock for the embedded
SQLite file that one sidecar process owns. tests/sidecar runs the same suite
against both backends.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from ..domain import Checkpoint, IdempotencyKey, Instance, InstanceRef
from .states import EncodedState

T = TypeVar("T")


class Conn:
    """An open transaction of one backend: services pass it through to store methods and never look inside.

    Each backend subclasses it; its stores refuse a handle of another backend.
    """

    __slots__ = ()


# How often the sidecar looks whether its tables are due for VACUUM or ANALYZE while autovacuum is off.
MAINTENANCE_INTERVAL_SECONDS = 10


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

    async def stand_in_for_autovacuum(self) -> list[str]:
        """Where the database's own maintenance is off, VACUUMs and ANALYZEs the sidecar's tables that its
        rules say are due; returns what it did ("VACUUM (ANALYZE) durable_instances", ...). Nothing by default."""
        return []

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
