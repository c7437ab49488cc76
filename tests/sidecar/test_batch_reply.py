"""SaveCheckpoints' reply, built in place for a batch, is the message the per-checkpoint conversion gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from durable.v1 import checkpoint_pb2
from durable_sidecar.domain import Checkpoint, IdempotencyKey, KeyStatus, SavedCheckpoint
from durable_sidecar.transport import convert
from durable_sidecar.transport.checkpoints import _save_response


def reference(saved: list[SavedCheckpoint]) -> checkpoint_pb2.SaveCheckpointsResponse:
    return checkpoint_pb2.SaveCheckpointsResponse(results=[
        checkpoint_pb2.SaveCheckpointResult(
            checkpoint=convert.checkpoint(s.checkpoint), deduplicated=s.deduplicated, state_json=s.state or b"",
            completed_key=convert.idempotency_key(s.completed_key) if s.completed_key is not None else None)
        for s in saved])


def test_the_reply_matches_the_conversion_of_each_checkpoint() -> None:
    now = datetime(2026, 12, 1, 13, 45, 7, 123456, tzinfo=UTC)
    key = IdempotencyKey("ns", "payments", "charge-1", KeyStatus.COMPLETED, "f" * 64, 2, "", None, b'{"ok":true}', "",
                         now + timedelta(days=1), now, now)
    saved = [
        SavedCheckpoint(Checkpoint("wf", f"order-{i}", i + 1, "Charge", f"{i:064x}", 1024 + i, 300 + i, "exec-1",
                                   "Node" if i % 2 else "", now + timedelta(microseconds=i % 3)), deduplicated=i == 4)
        for i in range(7)
    ]
    saved.append(SavedCheckpoint(Checkpoint("wf", "order-x", 3, "Pay", "a" * 64, 10, 10, "e", "n", now, b'{"s":1}'),
                                 deduplicated=False, state=b'{"merged":1}', completed_key=key))
    saved.append(SavedCheckpoint(Checkpoint("wf", "order-y", 1, "Pay", "b" * 64, 10, 10, "e", "n",
                                            datetime(1, 1, 1, tzinfo=UTC)), deduplicated=True))
    assert _save_response(saved) == reference(saved)
    assert _save_response(saved).SerializeToString(deterministic=True) == \
        reference(saved).SerializeToString(deterministic=True)
