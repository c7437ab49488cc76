"""Bulk operations by filter (issue 44): a preview, then an operation run in batches by the sidecar's loop, which
acts on each matching instance once, can be paused, continued and cancelled, and goes on after a kill -9."""

from __future__ import annotations

import asyncio
import json
import uuid

import grpc
import pytest
from durable.v1 import audit_pb2, checkpoint_pb2, common_pb2, instance_pb2, operations_pb2, version_pb2

from tests.conftest import Harness
from tests.sidecar.helpers import SidecarProcess, Stubs, channel, create_database, drop_database
from tests.sidecar.storage import fetch
from tests.sidecar.test_server import _cli

FAILED = common_pb2.INSTANCE_STATUS_FAILED
RETRY = operations_pb2.BULK_ACTION_RETRY
COMPLETED = operations_pb2.OPERATION_STATUS_COMPLETED


async def failed_instances(s: Stubs, wf: str, n: int, error: str = "payment API 503") -> list[str]:
    keys = [f"order-{i:04d}" for i in range(n)]
    for key in keys:
        await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
            workflow_id=wf, instance_key=key, execution_id="exec-1"), metadata=s.metadata)
        await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
            workflow_id=wf, instance_key=key, execution_id="exec-1", error_message=error), metadata=s.metadata)
    return keys


def selector(wf: str, **kw: object) -> operations_pb2.BulkSelector:
    return operations_pb2.BulkSelector(workflow_id=wf, statuses=[FAILED], **kw)


async def finished(s: Stubs, op_id: int, timeout: float = 60) -> operations_pb2.Operation:
    async with asyncio.timeout(timeout):
        while True:
            op = (await s.operations.GetOperation(operations_pb2.GetOperationRequest(id=op_id),
                                                  metadata=s.metadata)).operation
            if op.status == COMPLETED:
                return op
            await asyncio.sleep(0.1)


async def retried_events(url: str, wf: str) -> dict[str, int]:
    rows = await fetch(url, "SELECT instance_key, count(*) FROM durable_instance_events WHERE workflow_id = %s "
                            "AND kind = 'retried' GROUP BY instance_key", wf)
    return {r[0]: int(r[1]) for r in rows}


async def test_a_preview_then_a_bulk_retry_acts_on_each_matching_instance_once(harness: Harness,
                                                                              database_url: str) -> None:
    s = harness.alpha
    wf = f"wf-bulk-{uuid.uuid4().hex[:8]}"
    keys = await failed_instances(s, wf, 30)
    await failed_instances(s, wf + "-other", 3)  # another workflow: not matched
    # Two of them failed for another reason: the error text narrows the selection.
    for key in ("zz-1", "zz-2"):
        await failed_instances_named(s, wf, key, "address invalid")
    preview = await s.operations.PreviewOperation(operations_pb2.PreviewOperationRequest(
        selector=selector(wf, error_contains="503"), sample_size=5), metadata=s.metadata)
    assert preview.count == 30 and [i.instance_key for i in preview.sample] == keys[:5]
    started = await s.operations.StartOperation(operations_pb2.StartOperationRequest(
        action=RETRY, selector=selector(wf, error_contains="503"), actor="alice", reason="provider back"),
        metadata=s.metadata)
    op = await finished(s, started.operation.id)
    # The dry run equals the run.
    assert op.matched_at_start == 30 and op.acted == 30 and op.skipped == 0 and op.HasField("finished_at")
    assert '"error_contains":"503"' in op.selector_json and op.actor == "alice"
    assert await retried_events(database_url, wf) == dict.fromkeys(keys, 1)
    detail = await fetch(database_url, "SELECT actor, detail FROM durable_instance_events WHERE workflow_id = %s "
                                       "AND instance_key = %s AND kind = 'retried'", wf, keys[0])
    assert detail[0][0] == "alice" and f"provider back (bulk operation {op.id})" in detail[0][1]
    inst = (await s.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=wf, instance_key=keys[0]),
                                          metadata=s.metadata)).instance
    assert inst.status == common_pb2.INSTANCE_STATUS_RUNNING
    # The same operation again matches nothing now: it completes with nothing done.
    again = await s.operations.StartOperation(operations_pb2.StartOperationRequest(
        action=RETRY, selector=selector(wf, error_contains="503"), actor="alice", reason="again"), metadata=s.metadata)
    assert (await finished(s, again.operation.id)).acted == 0
    listed = await s.operations.ListOperations(operations_pb2.ListOperationsRequest(), metadata=s.metadata)
    assert [o.id for o in listed.operations][:2] == [again.operation.id, op.id]
    # Another namespace sees none of them.
    with pytest.raises(grpc.aio.AioRpcError) as other:
        await harness.beta.operations.GetOperation(operations_pb2.GetOperationRequest(id=op.id),
                                                   metadata=harness.beta.metadata)
    assert other.value.code() == grpc.StatusCode.NOT_FOUND


async def failed_instances_named(s: Stubs, wf: str, key: str, error: str) -> None:
    await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
        workflow_id=wf, instance_key=key, execution_id="exec-1"), metadata=s.metadata)
    await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
        workflow_id=wf, instance_key=key, execution_id="exec-1", error_message=error), metadata=s.metadata)


async def test_bad_operations_are_refused_and_record_nothing(harness: Harness) -> None:
    s = harness.alpha
    wf = "wf-bulk-bad"
    bad = [
        operations_pb2.StartOperationRequest(selector=selector(wf), actor="alice", reason="r"),  # no action
        operations_pb2.StartOperationRequest(action=RETRY, selector=selector(wf), reason="r"),  # no actor
        operations_pb2.StartOperationRequest(action=RETRY, selector=selector(wf), actor="alice"),  # no reason
        operations_pb2.StartOperationRequest(action=RETRY, selector=selector(wf, error_contains="x" * 257),
                                             actor="alice", reason="r"),
        operations_pb2.StartOperationRequest(action=RETRY, selector=operations_pb2.BulkSelector(
            statuses=[99]), actor="alice", reason="r"),
        operations_pb2.StartOperationRequest(action=RETRY, selector=operations_pb2.BulkSelector(
            search_fields=[common_pb2.SearchFieldFilter(name="1bad")]), actor="alice", reason="r"),
    ]
    for request in bad:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await s.operations.StartOperation(request, metadata=s.metadata)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request
    listed = await s.operations.ListOperations(operations_pb2.ListOperationsRequest(), metadata=s.metadata)
    assert not listed.operations
    with pytest.raises(grpc.aio.AioRpcError) as too_many:
        await s.operations.PreviewOperation(operations_pb2.PreviewOperationRequest(
            selector=selector(wf), sample_size=101), metadata=s.metadata)
    assert too_many.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for call in (s.operations.PauseOperation, s.operations.CancelOperation, s.operations.ContinueOperation):
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await call(operations_pb2.OperationActionRequest(id=12345678, actor="alice"), metadata=s.metadata)
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    # A finished operation cannot be paused or cancelled.
    done = await s.operations.StartOperation(operations_pb2.StartOperationRequest(
        action=RETRY, selector=selector(wf), actor="alice", reason="nothing matches"), metadata=s.metadata)
    await finished(s, done.operation.id)
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await s.operations.PauseOperation(operations_pb2.OperationActionRequest(id=done.operation.id, actor="alice"),
                                          metadata=s.metadata)
    assert late.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_paused_operation_waits_and_a_cancelled_one_stops(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    wf = f"wf-bulk-{uuid.uuid4().hex[:8]}"
    keys = await failed_instances(s, wf, 250)  # three batches of at most 100
    start = operations_pb2.StartOperationRequest(action=RETRY, selector=selector(wf), actor="alice", reason="r")
    op = (await s.operations.StartOperation(start, metadata=s.metadata)).operation
    # Paused while its first batch runs: the batch in hand completes, no later one starts.
    paused = (await s.operations.PauseOperation(operations_pb2.OperationActionRequest(id=op.id, actor="bob"),
                                                metadata=s.metadata)).operation
    assert paused.status == operations_pb2.OPERATION_STATUS_PAUSED
    await asyncio.sleep(3)  # the loop's idle pause is 2 s: a paused operation is not taken again
    held = (await s.operations.GetOperation(operations_pb2.GetOperationRequest(id=op.id), metadata=s.metadata)).operation
    assert held.status == operations_pb2.OPERATION_STATUS_PAUSED and held.acted < 250
    assert sum((await retried_events(database_url, wf)).values()) == held.acted
    resumed = await s.operations.ContinueOperation(operations_pb2.OperationActionRequest(id=op.id, actor="bob"),
                                                   metadata=s.metadata)
    assert resumed.operation.status == operations_pb2.OPERATION_STATUS_RUNNING
    assert (await finished(s, op.id)).acted == 250
    assert await retried_events(database_url, wf) == dict.fromkeys(keys, 1)
    # Cancelled before it ran a batch: nothing is acted on.
    wf2 = f"wf-bulk-{uuid.uuid4().hex[:8]}"
    await failed_instances(s, wf2, 250)
    op2 = (await s.operations.StartOperation(operations_pb2.StartOperationRequest(
        action=RETRY, selector=selector(wf2), actor="alice", reason="r"), metadata=s.metadata)).operation
    cancelled = (await s.operations.CancelOperation(operations_pb2.OperationActionRequest(id=op2.id, actor="bob"),
                                                    metadata=s.metadata)).operation
    assert cancelled.status == operations_pb2.OPERATION_STATUS_CANCELLED and cancelled.HasField("finished_at")
    await asyncio.sleep(1)
    after = (await s.operations.GetOperation(operations_pb2.GetOperationRequest(id=op2.id), metadata=s.metadata)).operation
    assert after.status == operations_pb2.OPERATION_STATUS_CANCELLED and after.acted < 250
    assert sum((await retried_events(database_url, wf2)).values()) == after.acted
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await s.operations.ContinueOperation(operations_pb2.OperationActionRequest(id=op2.id, actor="bob"),
                                             metadata=s.metadata)
    assert late.value.code() == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize("storage", ["postgres", "sqlite"])
async def test_an_operation_goes_on_after_its_sidecar_is_killed_mid_batch(storage: str, tmp_path: object) -> None:
    """The sidecar dies (kill -9 at a failpoint) inside its second batch: the first batch stays done, the second
    rolls back, and the next sidecar takes the operation over once the lease lapsed: each instance once."""
    url = create_database() if storage == "postgres" else f"sqlite:///{tmp_path}/bulk.db"
    token, wf = "t-" + uuid.uuid4().hex[:8], "wf-bulk-kill"
    env = {"DURABLE_DATABASE_URL": url, "DURABLE_REDIS_URL": "", "DURABLE_AUTH_TOKENS": f"{token}=ns-bulk"}
    dying = SidecarProcess({**env, "DURABLE_FAILPOINTS": "operation.mid_batch"})
    second = SidecarProcess(env)
    try:
        await asyncio.to_thread(dying.start)
        ch = channel(dying.port)
        s = Stubs(ch, token)
        keys = await failed_instances(s, wf, 250)
        op = (await s.operations.StartOperation(operations_pb2.StartOperationRequest(
            action=RETRY, selector=selector(wf), actor="alice", reason="provider back"), metadata=s.metadata)).operation
        assert op.matched_at_start == 250
        await asyncio.to_thread(dying.proc.wait, 30)  # type: ignore[union-attr]
        assert dying.proc is not None and dying.proc.returncode == 86  # died at the failpoint
        await ch.close()
        done = await retried_events(url, wf)
        assert sum(done.values()) == 100 and set(done.values()) == {1}  # the first batch only
        await asyncio.to_thread(second.start)
        ch = channel(second.port)
        s = Stubs(ch, token)
        result = await finished(s, op.id, timeout=60)
        await ch.close()
        assert result.acted == 250 and result.skipped == 0
        assert await retried_events(url, wf) == dict.fromkeys(keys, 1)
    finally:
        dying.stop()
        second.stop()
        if storage == "postgres":
            drop_database(url)


async def test_the_cli_previews_starts_and_follows_an_operation_the_sidecar_runs(harness: Harness,
                                                                                 database_url: str) -> None:
    s = harness.alpha
    ns = harness.sidecar.settings.tokens[s.token]
    wf = f"wf-bulk-{uuid.uuid4().hex[:8]}"
    keys = await failed_instances(s, wf, 12)

    async def cli(*args: str) -> str:
        done = await asyncio.to_thread(_cli, database_url, "operations", *args, "--namespace", ns)
        assert done.returncode == 0, done.stderr
        return done.stdout

    preview = await cli("preview", "--workflow", wf, "--status", "failed", "--error", "503", "--sample", "3")
    assert "12 instances match" in preview and keys[0] in preview and keys[3] not in preview
    started = await cli("start", "retry", "--workflow", wf, "--status", "failed", "--reason", "provider back",
                        "--actor", "alice")
    op_id = int(started.split()[1].rstrip(":"))
    assert (await finished(s, op_id)).acted == 12  # the sidecar's loop ran what the CLI recorded
    shown = await cli("show", str(op_id))
    assert "retry completed, 12 of 12 taken (12 acted on, 0 skipped); by alice: provider back" in shown
    assert str(op_id) in await cli("list")
    refused = await asyncio.to_thread(_cli, database_url, "operations", "pause", str(op_id), "--namespace", ns)
    assert refused.returncode != 0 and "completed; it cannot become paused" in refused.stderr


async def test_list_and_count_filter_by_error_text_as_operations_do(harness: Harness) -> None:
    s = harness.alpha
    wf = f"wf-bulk-{uuid.uuid4().hex[:8]}"
    await failed_instances(s, wf, 3, error="payment API 503")
    await failed_instances_named(s, wf, "zz-9", "address invalid")
    listed = await s.instances.ListInstances(instance_pb2.ListInstancesRequest(
        workflow_id=wf, error_contains="API 503"), metadata=s.metadata)
    assert sorted(i.instance_key for i in listed.instances) == ["order-0000", "order-0001", "order-0002"]
    counted = await s.audit.CountInstances(audit_pb2.CountInstancesRequest(workflow_id=wf, error_contains="invalid"),
                                           metadata=s.metadata)
    assert counted.total == 1
    assert not (await s.instances.ListInstances(instance_pb2.ListInstancesRequest(
        workflow_id=wf, error_contains="api 503"), metadata=s.metadata)).instances  # case sensitive
    with pytest.raises(grpc.aio.AioRpcError) as long:
        await s.instances.ListInstances(instance_pb2.ListInstancesRequest(error_contains="x" * 257),
                                        metadata=s.metadata)
    assert long.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "error_contains" in long.value.details()
    # A NUL (PostgreSQL text cannot hold one) or another control character is a clear refusal, never INTERNAL.
    for field, value in (("error_contains", "503\x00"), ("instance_key_prefix", "order-\x00"),
                         ("instance_key_prefix", "order-\x1b")):
        for call in (s.instances.ListInstances(instance_pb2.ListInstancesRequest(**{field: value}),
                                               metadata=s.metadata),
                     s.operations.PreviewOperation(operations_pb2.PreviewOperationRequest(
                         selector=operations_pb2.BulkSelector(**{field: value})), metadata=s.metadata)):
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await call
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in bad.value.details(), field



async def test_a_bulk_move_is_an_admins_and_moves_the_running_ones(operate_and_admin: tuple[Stubs, Stubs],
                                                                   database_url: str) -> None:
    operate, admin = operate_and_admin
    wf = f"wf-bulk-{uuid.uuid4().hex[:8]}"
    for n in (1, 2):
        await admin.versions.RegisterVersion(version_pb2.RegisterVersionRequest(
            workflow_id=wf, definition_json=json.dumps({"nodes": [{"name": f"Step {n}", "type": "x"}],
                                                        "connections": {}}).encode(), label=f"1.{n}.0"),
            metadata=admin.metadata)
    await admin.versions.RegisterVersion(version_pb2.RegisterVersionRequest(
        workflow_id=wf, definition_json=json.dumps({"nodes": [{"name": "Step 3", "type": "x"}],
                                                    "connections": {}}).encode(), label="1.3.0"),
        metadata=admin.metadata)
    for key in ("m-1", "m-2", "m-3"):
        await admin.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
            workflow_id=wf, instance_key=key, execution_id="exec-1"), metadata=admin.metadata)
    await admin.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=wf, instance_key="m-3", execution_id="exec-1"), metadata=admin.metadata)
    move = operations_pb2.StartOperationRequest(action=operations_pb2.BULK_ACTION_MOVE, to_version=1,
                                                selector=operations_pb2.BulkSelector(workflow_id=wf),
                                                actor="alice", reason="back to 1.1.0")
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await operate.operations.StartOperation(move, metadata=operate.metadata)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED and "admin" in denied.value.details()
    for bad in (operations_pb2.StartOperationRequest(action=operations_pb2.BULK_ACTION_MOVE, actor="a", reason="r",
                                                     selector=operations_pb2.BulkSelector(workflow_id=wf)),
                operations_pb2.StartOperationRequest(action=operations_pb2.BULK_ACTION_MOVE, actor="a", reason="r",
                                                     to_version=9, selector=operations_pb2.BulkSelector(workflow_id=wf)),
                operations_pb2.StartOperationRequest(action=operations_pb2.BULK_ACTION_MOVE, actor="a", reason="r",
                                                     to_version=1),
                operations_pb2.StartOperationRequest(action=RETRY, actor="a", reason="r", to_version=1,
                                                     selector=operations_pb2.BulkSelector(workflow_id=wf))):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await admin.operations.StartOperation(bad, metadata=admin.metadata)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
    op = (await admin.operations.StartOperation(move, metadata=admin.metadata)).operation
    done = await finished(admin, op.id)
    # The two running ones moved; the completed one is skipped with the reason.
    assert (done.acted, done.skipped) == (2, 1) and "completed" in done.last_skip and done.to_version == 1
    for key, version in (("m-1", 1), ("m-2", 1), ("m-3", 3)):
        inst = (await admin.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=wf, instance_key=key),
                                                  metadata=admin.metadata)).instance
        assert inst.bound_version == version, (key, inst.bound_version)
    log = await fetch(database_url, "SELECT count(*) FROM durable_version_changes WHERE workflow_id = %s "
                                    "AND kind = 'instance_moved'", wf)
    assert int(log[0][0]) == 2


async def test_a_bulk_replay_forks_each_finished_instance_from_its_step_once(harness: Harness,
                                                                            database_url: str) -> None:
    s = harness.alpha
    wf = f"wf-bulk-{uuid.uuid4().hex[:8]}"
    for key in ("r-1", "r-2", "r-3"):
        await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
            workflow_id=wf, instance_key=key, execution_id="exec-1"), metadata=s.metadata)
        steps = ("paid", "shipped") if key != "r-3" else ("paid",)
        for step in steps:
            await s.checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[
                checkpoint_pb2.SaveCheckpointItem(workflow_id=wf, instance_key=key, step_name=step,
                                                  state_json=b'{"s": 1}', execution_id="exec-1")]),
                metadata=s.metadata)
        await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
            workflow_id=wf, instance_key=key, execution_id="exec-1"), metadata=s.metadata)
    op = (await s.operations.StartOperation(operations_pb2.StartOperationRequest(
        action=operations_pb2.BULK_ACTION_REPLAY, replay_from_step="paid",
        selector=operations_pb2.BulkSelector(workflow_id=wf), actor="alice", reason="payment had a bug"),
        metadata=s.metadata)).operation
    done = await finished(s, op.id)
    # Each original once; the forks (made after the operation started) are not taken again.
    assert (done.acted, done.skipped, done.matched_at_start) == (3, 0, 3), done
    forks = await fetch(database_url, "SELECT instance_key, last_sequence, last_step FROM durable_instances "
                                      "WHERE workflow_id = %s AND instance_key LIKE %s ORDER BY 1", wf, "%~r%")
    assert [tuple(r) for r in forks] == [("r-1~r1", 1, "paid"), ("r-2~r1", 1, "paid"), ("r-3~r1", 1, "paid")]
    # A step an instance never saved: that instance is skipped, with the reason.
    again = (await s.operations.StartOperation(operations_pb2.StartOperationRequest(
        action=operations_pb2.BULK_ACTION_REPLAY, replay_from_step="shipped",
        selector=operations_pb2.BulkSelector(workflow_id=wf, statuses=[common_pb2.INSTANCE_STATUS_COMPLETED]),
        actor="alice", reason="shipping had a bug"), metadata=s.metadata)).operation
    second = await finished(s, again.id)
    assert (second.acted, second.skipped) == (2, 1) and "no checkpoint of step shipped" in second.last_skip
