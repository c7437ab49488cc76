"""Domain records to protobuf messages and back."""

from __future__ import annotations

from datetime import UTC, datetime

from durable.v1 import common_pb2, instance_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from ..domain import Checkpoint, Instance, InstanceStatus, Resumable, ResumeReason, StartOutcome

_STATUS_TO_PB = {
    InstanceStatus.RUNNING: common_pb2.INSTANCE_STATUS_RUNNING,
    InstanceStatus.COMPLETED: common_pb2.INSTANCE_STATUS_COMPLETED,
    InstanceStatus.FAILED: common_pb2.INSTANCE_STATUS_FAILED,
    InstanceStatus.CANCELLED: common_pb2.INSTANCE_STATUS_CANCELLED,
}
STATUS_FROM_PB: dict[int, InstanceStatus] = {int(v): k for k, v in _STATUS_TO_PB.items()}

OUTCOME_TO_PB = {
    StartOutcome.STARTED: instance_pb2.START_OUTCOME_STARTED,
    StartOutcome.RESUMED: instance_pb2.START_OUTCOME_RESUMED,
    StartOutcome.FINISHED: instance_pb2.START_OUTCOME_FINISHED,
    StartOutcome.BUSY: instance_pb2.START_OUTCOME_BUSY,
}

_REASON_TO_PB = {
    ResumeReason.STALLED: instance_pb2.RESUME_REASON_STALLED,
    ResumeReason.WAKE_UP: instance_pb2.RESUME_REASON_WAKE_UP,
}


def ts(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    out = Timestamp()
    out.FromDatetime(value.astimezone(UTC))
    return out


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
    )


def resumable(item: Resumable) -> instance_pb2.ResumableInstance:
    return instance_pb2.ResumableInstance(
        instance=instance(item.instance),
        reason=_REASON_TO_PB[item.reason],
        claim_token=item.claim_token,
        latest_checkpoint=checkpoint(item.latest),
    )
