"""The save rules: what an item of SaveCheckpoints means, its validation, and the refusals a save answers with.

Both paths decide by these rules: the transaction of services/checkpoints.py
and the one-statement functions of stores/postgres/sql/ (chosen in
services/save_paths.py); tests/sidecar/test_save_rules_conformance.py holds
them to the same outcomes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .. import validation
from ..domain import Checkpoint, Instance, InstanceRef, KeyCompletion, KeyRef, NewCheckpoint
from ..domain_files import FileRef
from ..errors import DomainError, FailedPrecondition, InvalidArgument, NotFound, StaleFencingToken, TooLarge
from ..stores.base import Conn
from ..stores.states import EncodedState

if TYPE_CHECKING:
    from .idempotency import ClaimItem, IdempotencyService


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
    # Search fields set after the batch saved (a JSON object; empty: none).
    search_fields: bytes = b""
    # The files the checkpoint carries (FileService checks them).
    files: tuple[FileRef, ...] = ()
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
class Locked:
    """What the transaction knows of one instance while it walks a batch."""

    status_final: bool
    last_sequence: int
    last_step: str
    latest: Checkpoint | None  # the stored newest checkpoint's metadata, once read
    lease_length: int  # the instance's lease length: renewals that name none last this long
    pending: int | None = None  # index (in the batch's rows) of its newest checkpoint not yet inserted
    pending_sha256: str = ""
    pending_files: tuple[FileRef, ...] = ()
    added: int = 0
    owner: str = ""
    lease_seconds: int = 0
    # The instance's current state (newest checkpoint of the batch or stored, else
    # its start item, else None for {}), once a step result needed it.
    current: bytes | None = None
    current_known: bool = False


@dataclass(frozen=True)
class Planned:
    """An item's outcome before the inserts: a stored checkpoint, or a row of the batch (new or repeated)."""

    stored: Checkpoint | None
    row: int
    deduplicated: bool
    new: NewCheckpoint  # as saved: a step result merged into the state it was added to


@dataclass(frozen=True)
class Premerged:
    """A step result the one-statement step save merged into the remembered state `base` but could not write: the transaction
    that decides instead reuses the merge (the same bytes, or the same refusal) where it finds that state."""

    base: bytes | None
    merged: tuple[NewCheckpoint, EncodedState] | None
    refusal: InvalidArgument | TooLarge | None = None  # the merge refused the item (merged is None)


UNENCODED = EncodedState(b"", 0)


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


def check_state(field: str, raw: bytes, *, max_state_bytes: int, object_only: bool = False,
                json_checked: bool = False) -> None:
    """A state-like payload: at most max_state_bytes (DURABLE_MAX_STATE_BYTES; TooLarge above) of JSON (InvalidArgument)."""
    if len(raw) > max_state_bytes:
        raise TooLarge(
            f"{field} is {len(raw)} bytes; the limit is {max_state_bytes} bytes "
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


def validate_item(namespace: str, index: int, item: SaveItem, *, max_state_bytes: int,
                  keys: IdempotencyService | None, completes_instances: bool) -> NewCheckpoint:
    """The item as the save will treat it (hashed, its key completion checked); the refusals name items[index]."""
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
        check_state("state_json", state, max_state_bytes=max_state_bytes, json_checked=item.json_checked)
        completion = key_completion(namespace, item, keys) if item.complete_key is not None else None
        if item.complete_instance and not completes_instances:
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
        files=item.files,
    )


def key_completion(namespace: str, item: SaveItem, keys: IdempotencyService | None) -> KeyCompletion:
    """The item's complete_key, checked as a Complete of that key would be."""
    assert item.complete_key is not None
    if keys is None:
        raise InvalidArgument("complete_key is not served here (no idempotency service)")
    ck = item.complete_key
    ref = KeyRef(namespace, ck.scope, ck.key)
    # The step result is the key's result unless the caller sent its own.
    result = ck.result_json or item.state
    try:
        keys.check_completion(ref, attempt=ck.attempt, result_json=result)
    except (InvalidArgument, TooLarge) as exc:
        raise type(exc)(f"complete_key: {exc}") from None
    return KeyCompletion(ref, ck.attempt, result)


def check_completions(saved: list[NewCheckpoint]) -> None:
    """complete_instance only on an instance's last item of the batch: a later one would save to it completed."""
    if len(saved) < 2 or not any(new.complete_instance for new in saved):
        return
    last = {new.ref: i for i, new in enumerate(saved)}
    for i, new in enumerate(saved):
        if new.complete_instance and last[new.ref] != i:
            raise InvalidArgument(
                f"items[{i}]: complete_instance is set, but items[{last[new.ref]}] saves to the same instance "
                f"after it; set complete_instance on the instance's last item of the batch only")


def not_found(index: int, ref: InstanceRef) -> NotFound:
    return NotFound(f"items[{index}]: instance {ref.workflow_id}/{ref.instance_key} does not exist: "
                    "start it with StartOrResume (the Resume Point node) before saving checkpoints")


def finished(index: int, ref: InstanceRef) -> FailedPrecondition:
    return FailedPrecondition(f"items[{index}]: instance {ref.workflow_id}/{ref.instance_key} is finished; "
                              "a finished instance takes no more checkpoints")


def stale(index: int, expected: int, last: int) -> StaleFencingToken:
    return StaleFencingToken(f"items[{index}]: expected newest sequence {expected} but it is {last}: another "
                             "execution saved in between; re-read the instance")


def check_ref(ref: InstanceRef) -> None:
    validation.identifier("workflow_id", ref.workflow_id)
    validation.identifier("instance_key", ref.instance_key)


def refusal(outcome: str, index: int, new: NewCheckpoint, last_sequence: int) -> DomainError:
    """The error a one-statement save's refusal stands for (the outcomes the functions in stores/postgres/sql/ name)."""
    if outcome == "not_found":
        return not_found(index, new.ref)
    if outcome == "finished":
        return finished(index, new.ref)
    assert outcome == "stale" and new.expected_sequence is not None, f"unexpected outcome {outcome}"
    return stale(index, new.expected_sequence, last_sequence)
