"""Domain records to protobuf messages and back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Protocol

from durable.v1 import common_pb2, idempotency_pb2, instance_pb2, version_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from ..domain import (
    ChangeKind,
    ChangeLogEntry,
    Checkpoint,
    Claimed,
    ClaimOutcome,
    FieldCondition,
    IdempotencyKey,
    Instance,
    InstanceFilter,
    InstanceMove,
    InstanceStatus,
    KeyStatus,
    MailboxEvent,
    Resumable,
    ResumeReason,
    RetryPolicy,
    RetryPolicyGiven,
    RunState,
    SearchOp,
    StartOutcome,
    Version,
)
from ..domain_files import FileRef
from ..errors import InvalidArgument
from ..services.idempotency import ClaimItem
from ..services.search_fields import fields_json, parse_condition

_STATUS_TO_PB = {
    InstanceStatus.RUNNING: common_pb2.INSTANCE_STATUS_RUNNING,
    InstanceStatus.COMPLETED: common_pb2.INSTANCE_STATUS_COMPLETED,
    InstanceStatus.FAILED: common_pb2.INSTANCE_STATUS_FAILED,
    InstanceStatus.CANCELLED: common_pb2.INSTANCE_STATUS_CANCELLED,
    InstanceStatus.SUSPENDED: common_pb2.INSTANCE_STATUS_SUSPENDED,
}
STATUS_FROM_PB: dict[int, InstanceStatus] = {int(v): k for k, v in _STATUS_TO_PB.items()}

OUTCOME_TO_PB = {
    StartOutcome.STARTED: instance_pb2.START_OUTCOME_STARTED,
    StartOutcome.RESUMED: instance_pb2.START_OUTCOME_RESUMED,
    StartOutcome.FINISHED: instance_pb2.START_OUTCOME_FINISHED,
    StartOutcome.BUSY: instance_pb2.START_OUTCOME_BUSY,
    StartOutcome.DIFFERENT: instance_pb2.START_OUTCOME_DIFFERENT,
}

_REASON_TO_PB = {
    ResumeReason.STALLED: instance_pb2.RESUME_REASON_STALLED,
    ResumeReason.WAKE_UP: instance_pb2.RESUME_REASON_WAKE_UP,
    ResumeReason.EVENT: instance_pb2.RESUME_REASON_EVENT,
    ResumeReason.TIMEOUT: instance_pb2.RESUME_REASON_TIMEOUT,
    ResumeReason.RETRY: instance_pb2.RESUME_REASON_RETRY,
    ResumeReason.REDRIVE: instance_pb2.RESUME_REASON_REDRIVE,
}


def reason(value: ResumeReason | None) -> instance_pb2.ResumeReason:
    return instance_pb2.RESUME_REASON_UNSPECIFIED if value is None else _REASON_TO_PB[value]


_RUN_STATE_TO_PB = {
    RunState.NONE: common_pb2.RUN_STATE_UNSPECIFIED,
    RunState.ACTIVE: common_pb2.RUN_STATE_ACTIVE,
    RunState.WAITING: common_pb2.RUN_STATE_WAITING,
    RunState.SCHEDULED: common_pb2.RUN_STATE_SCHEDULED,
    RunState.STALLED: common_pb2.RUN_STATE_STALLED,
}


def retry_policy(p: RetryPolicy | None) -> common_pb2.RetryPolicy | None:
    if p is None:
        return None
    return common_pb2.RetryPolicy(max_automatic_resumes=p.max_automatic_resumes,
                                  initial_backoff_ms=p.initial_backoff_ms, max_backoff_ms=p.max_backoff_ms,
                                  backoff_multiplier=p.backoff_multiplier, jitter=p.jitter)


def retry_policy_from(msg: common_pb2.RetryPolicy) -> RetryPolicy | RetryPolicyGiven:
    if msg.defaults_for_unset:
        # Only what the caller sent; the service completes it from its defaults.
        return RetryPolicyGiven(
            max_automatic_resumes=msg.max_automatic_resumes if msg.HasField("max_automatic_resumes") else None,
            initial_backoff_ms=msg.initial_backoff_ms if msg.HasField("initial_backoff_ms") else None,
            max_backoff_ms=msg.max_backoff_ms if msg.HasField("max_backoff_ms") else None,
            backoff_multiplier=msg.backoff_multiplier if msg.HasField("backoff_multiplier") else None,
            jitter=msg.jitter if msg.HasField("jitter") else None)
    return RetryPolicy(max_automatic_resumes=msg.max_automatic_resumes, initial_backoff_ms=msg.initial_backoff_ms,
                       max_backoff_ms=msg.max_backoff_ms, backoff_multiplier=msg.backoff_multiplier,
                       jitter=msg.jitter)


def event(e: MailboxEvent | None) -> common_pb2.Event | None:
    return None if e is None else event_pb(e)


def event_pb(e: MailboxEvent) -> common_pb2.Event:
    return common_pb2.Event(workflow_id=e.workflow_id, instance_key=e.instance_key, event_name=e.event_name,
                            dedupe_id=e.dedupe_id, payload_json=e.payload_json or b"", sender=e.sender,
                            received_at=ts(e.received_at), consumed_at=ts(e.consumed_at))


def status(value: InstanceStatus) -> common_pb2.InstanceStatus:
    return _STATUS_TO_PB[value]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ts(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    # Integer arithmetic (Timestamp.FromDatetime is pure Python and converts time zones first): a
    # batch reply converts a hundred of these.
    delta = (value if value.tzinfo is not None else value.astimezone(UTC)) - _EPOCH
    return Timestamp(seconds=delta.days * 86_400 + delta.seconds, nanos=delta.microseconds * 1000)


def from_ts(value: Timestamp) -> datetime:
    return value.ToDatetime(tzinfo=UTC)


def instance(inst: Instance) -> common_pb2.Instance:
    return common_pb2.Instance(
        workflow_id=inst.workflow_id,
        instance_key=inst.instance_key,
        status=_STATUS_TO_PB[inst.status],
        bound_version=inst.bound_version,
        version_label=inst.version_label,
        lease_owner=inst.lease_owner,
        lease_expires_at=ts(inst.lease_expires_at),
        wake_at=ts(inst.wake_at),
        last_sequence=inst.last_sequence,
        last_step=inst.last_step,
        checkpoint_count=inst.checkpoint_count,
        resume_count=inst.resume_count,
        error_message=inst.error_message,
        result_json=inst.result_json or b"",
        created_by_execution_id=inst.created_by_execution_id,
        created_at=ts(inst.created_at),
        updated_at=ts(inst.updated_at),
        finished_at=ts(inst.finished_at),
        lease_seconds=inst.lease_seconds,
        run_state=_RUN_STATE_TO_PB[inst.run_state(datetime.now(UTC))],
        awaited_event=inst.awaited_event,
        wait_deadline=ts(inst.wake_at) if inst.awaited_event else None,
        retry_policy=retry_policy(inst.retry_policy),
        attempt=inst.attempt,
        last_error=inst.last_error,
        suspended_at=ts(inst.suspended_at),
        search_fields_json=fields_json(inst.search_fields) if inst.search_fields else b"",
    )


_OP_FROM_PB = {
    common_pb2.SEARCH_FIELD_OP_UNSPECIFIED: SearchOp.EQ,
    common_pb2.SEARCH_FIELD_OP_EQ: SearchOp.EQ,
    common_pb2.SEARCH_FIELD_OP_LT: SearchOp.LT,
    common_pb2.SEARCH_FIELD_OP_LTE: SearchOp.LTE,
    common_pb2.SEARCH_FIELD_OP_GT: SearchOp.GT,
    common_pb2.SEARCH_FIELD_OP_GTE: SearchOp.GTE,
}


def search_conditions(filters: Sequence[common_pb2.SearchFieldFilter]) -> tuple[FieldCondition, ...]:
    """A listing's search-field conditions, each checked (InvalidArgument naming search_fields[i])."""
    out = []
    for i, f in enumerate(filters):
        op = _OP_FROM_PB.get(f.op)
        if op is None:
            raise InvalidArgument(f"search_fields[{i}].op is not a known comparison")
        out.append(parse_condition(i, f.name, op, f.value_json))
    return tuple(out)


class FilterMessage(Protocol):
    """The filter fields ListInstancesRequest, CountInstancesRequest and BulkSelector share (by name, not number)."""

    @property
    def workflow_id(self) -> str: ...
    @property
    def bound_version(self) -> int: ...
    @property
    def instance_key_prefix(self) -> str: ...
    @property
    def last_step(self) -> str: ...
    @property
    def created_after(self) -> Timestamp: ...
    @property
    def created_before(self) -> Timestamp: ...
    @property
    def search_fields(self) -> Sequence[common_pb2.SearchFieldFilter]: ...
    @property
    def error_contains(self) -> str: ...
    def HasField(self, field_name: str) -> bool: ...  # noqa: N802


def instance_filter(msg: FilterMessage, *, statuses: tuple[InstanceStatus, ...] = (), stalled_only: bool = False,
                    sort_field: str = "", sort_descending: bool = False) -> InstanceFilter:
    """An instance filter from a message's shared filter fields; what only some messages carry comes as arguments.

    Callers convert statuses first, so an unknown status is reported before a bad search field.
    """
    return InstanceFilter(
        workflow_id=msg.workflow_id,
        statuses=statuses,
        bound_version=msg.bound_version,
        stalled_only=stalled_only,
        key_prefix=msg.instance_key_prefix,
        last_step=msg.last_step,
        created_after=from_ts(msg.created_after) if msg.HasField("created_after") else None,
        created_before=from_ts(msg.created_before) if msg.HasField("created_before") else None,
        fields=search_conditions(msg.search_fields),
        sort_field=sort_field,
        sort_descending=sort_descending,
        error_contains=msg.error_contains,
    )


def checkpoint(cp: Checkpoint | None) -> common_pb2.Checkpoint | None:
    return None if cp is None else checkpoint_pb(cp)


def checkpoint_pb(cp: Checkpoint) -> common_pb2.Checkpoint:
    return common_pb2.Checkpoint(
        workflow_id=cp.workflow_id,
        instance_key=cp.instance_key,
        sequence=cp.sequence,
        step_name=cp.step_name,
        state_json=cp.state or b"",
        sha256=cp.sha256,
        size_bytes=cp.size_bytes,
        stored_bytes=cp.stored_bytes,
        execution_id=cp.execution_id,
        node_name=cp.node_name,
        created_at=ts(cp.created_at),
        file_count=cp.file_count,
    )


def file_refs(msgs: Iterable[common_pb2.FileRef]) -> tuple[FileRef, ...]:
    return tuple(FileRef(property=f.property, file_name=f.file_name, mime_type=f.mime_type, sha256=f.sha256,
                         size_bytes=f.size_bytes) for f in msgs)


def file_refs_pb(files: Iterable[FileRef]) -> list[common_pb2.FileRef]:
    return [common_pb2.FileRef(property=f.property, file_name=f.file_name, mime_type=f.mime_type, sha256=f.sha256,
                               size_bytes=f.size_bytes) for f in files]


def resumable(item: Resumable) -> instance_pb2.ResumableInstance:
    return instance_pb2.ResumableInstance(
        instance=instance(item.instance),
        reason=_REASON_TO_PB[item.reason],
        claim_token=item.claim_token,
        latest_checkpoint=checkpoint(item.latest),
        event=event(item.event),
    )


_KEY_STATUS_TO_PB = {
    KeyStatus.IN_PROGRESS: idempotency_pb2.KEY_STATUS_IN_PROGRESS,
    KeyStatus.COMPLETED: idempotency_pb2.KEY_STATUS_COMPLETED,
    KeyStatus.FAILED: idempotency_pb2.KEY_STATUS_FAILED,
}
KEY_STATUS_FROM_PB: dict[int, KeyStatus] = {int(v): k for k, v in _KEY_STATUS_TO_PB.items()}

CLAIM_OUTCOME_TO_PB = {
    ClaimOutcome.ACQUIRED: idempotency_pb2.CLAIM_OUTCOME_ACQUIRED,
    ClaimOutcome.DUPLICATE: idempotency_pb2.CLAIM_OUTCOME_DUPLICATE,
    ClaimOutcome.IN_PROGRESS: idempotency_pb2.CLAIM_OUTCOME_IN_PROGRESS,
}


def idempotency_key(key: IdempotencyKey) -> idempotency_pb2.IdempotencyKey:
    return idempotency_pb2.IdempotencyKey(
        scope=key.scope,
        key=key.key,
        status=_KEY_STATUS_TO_PB[key.status],
        fingerprint=key.fingerprint,
        attempt=key.attempt,
        lease_expires_at=ts(key.lease_expires_at),
        result_json=key.result_json or b"",
        error_message=key.error_message,
        expires_at=ts(key.expires_at),
        created_at=ts(key.created_at),
        updated_at=ts(key.updated_at),
        derived_key=key.ref.derived_key,
    )


def claim_item(i: idempotency_pb2.ClaimItem) -> ClaimItem:
    """A ClaimItem message (Claim's items, a save's claim_next, a start's claim_on_start) as the service takes it."""
    return ClaimItem(scope=i.scope, key=i.key, payload_json=i.payload_json, fingerprint=i.fingerprint,
                     lease_seconds=i.lease_seconds, ttl_seconds=i.ttl_seconds, holder=i.holder,
                     workflow_id=i.workflow_id, instance_key=i.instance_key)


def claim_result(c: Claimed) -> idempotency_pb2.ClaimResult:
    return idempotency_pb2.ClaimResult(outcome=CLAIM_OUTCOME_TO_PB[c.outcome], key=idempotency_key(c.key))


def version(v: Version) -> version_pb2.Version:
    """A version; the definition is included when the reader asked for it."""
    return version_pb2.Version(
        workflow_id=v.workflow_id,
        version=v.version,
        content_hash=v.content_hash,
        n8n_version_id=v.n8n_version_id,
        label=v.label,
        note=v.note,
        definition_json=v.definition_json or b"",
        created_at=ts(v.created_at),
        node_names=list(v.node_names),
    )


def instance_move(m: InstanceMove) -> version_pb2.InstanceMove:
    return version_pb2.InstanceMove(instance_key=m.instance_key, from_version=m.from_version, to_version=m.to_version,
                                    last_step=m.last_step, last_step_missing_in_target=m.last_step_missing_in_target)


_CHANGE_KIND_TO_PB = {
    ChangeKind.VERSION_REGISTERED: version_pb2.CHANGE_KIND_VERSION_REGISTERED,
    ChangeKind.INSTANCE_MOVED: version_pb2.CHANGE_KIND_INSTANCE_MOVED,
}


def change(e: ChangeLogEntry) -> version_pb2.ChangeLogEntry:
    return version_pb2.ChangeLogEntry(id=e.id, kind=_CHANGE_KIND_TO_PB[e.kind], workflow_id=e.workflow_id,
                                      instance_key=e.instance_key, from_version=e.from_version,
                                      to_version=e.to_version, actor=e.actor, reason=e.reason,
                                      created_at=ts(e.created_at))
