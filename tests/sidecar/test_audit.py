"""AuditService: an instance's audit trail (ListInstanceEvents) and counts by status; the new ListInstances filters."""

from __future__ import annotations

import datetime as dt
import json

import grpc
import pytest
from durable.v1 import audit_pb2, common_pb2, idempotency_pb2, instance_pb2, version_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.storage import expire_instance_lease
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start
from tests.sidecar.version_helpers import workflow


async def events(s: Stubs, key: str, **kw: object) -> audit_pb2.ListInstanceEventsResponse:
    reply: audit_pb2.ListInstanceEventsResponse = await s.audit.ListInstanceEvents(
        audit_pb2.ListInstanceEventsRequest(workflow_id=WF, instance_key=key, **kw), metadata=s.metadata)
    return reply


async def test_instance_events_list_the_trail_oldest_first_with_executions(harness: Harness,
                                                                           database_url: str) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, "exec-1")
    await save(s, item(key, "payment", {"paid": True}))
    await expire_instance_lease(database_url, key)
    await start(s, key, "exec-2")
    await s.instances.CancelInstance(instance_pb2.CancelInstanceRequest(
        workflow_id=WF, instance_key=key, actor="operator:ann", reason="customer asked"), metadata=s.metadata)
    trail = (await events(s, key)).events
    assert [e.kind for e in trail] == ["started", "resumed", "cancelled"]
    assert [e.execution_id for e in trail] == ["exec-1", "exec-2", ""]
    assert trail[2].actor == "operator:ann" and trail[2].detail == "customer asked"
    assert trail[0].id < trail[1].id < trail[2].id
    assert trail[0].created_at.ToDatetime() <= trail[2].created_at.ToDatetime()


async def test_instance_events_page_by_token(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    await start(s, key, "exec-1")
    for i in range(3):
        await s.instances.ScheduleWakeUp(instance_pb2.ScheduleWakeUpRequest(
            workflow_id=WF, instance_key=key, execution_id="exec-1", delay_seconds=3600 + i), metadata=s.metadata)
    first = await events(s, key, page_size=2)
    assert [e.kind for e in first.events] == ["started", "wake_scheduled"] and first.next_page_token
    second = await events(s, key, page_size=2, page_token=first.next_page_token)
    assert [e.kind for e in second.events] == ["wake_scheduled", "wake_scheduled"]
    third = await events(s, key, page_size=2, page_token=second.next_page_token) if second.next_page_token else None
    assert third is None or not third.events
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await events(s, key, page_token="not-a-token")
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_instance_events_of_an_unknown_or_foreign_instance_are_not_found(harness: Harness) -> None:
    key = new_key()
    await start(harness.alpha, key)
    for stubs, wanted in ((harness.alpha, "does-not-exist"), (harness.beta, key)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await events(stubs, wanted)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await events(harness.alpha, "")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def _ts(value: dt.datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(value)
    return out


async def test_list_and_count_instances_by_step_prefix_and_creation_time(harness: Harness) -> None:
    s = harness.alpha
    prefix = new_key() + "-"
    keys = [prefix + str(i) for i in range(3)]
    for k in keys:
        await start(s, k)
    await save(s, item(keys[0], "shipped", {"n": 0}), item(keys[1], "paid", {"n": 1}))
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=keys[0], execution_id="exec-1"), metadata=s.metadata)

    async def listed(**kw: object) -> list[str]:
        reply = await s.instances.ListInstances(instance_pb2.ListInstancesRequest(
            workflow_id=WF, instance_key_prefix=prefix, **kw), metadata=s.metadata)
        return sorted(i.instance_key for i in reply.instances)

    assert await listed(last_step="paid") == [keys[1]]
    now = dt.datetime.now(dt.UTC)
    assert await listed(created_after=_ts(now - dt.timedelta(hours=1))) == keys
    assert await listed(created_before=_ts(now - dt.timedelta(hours=1))) == []
    assert await listed(created_after=_ts(now + dt.timedelta(hours=1))) == []

    counts = await s.audit.CountInstances(audit_pb2.CountInstancesRequest(workflow_id=WF, instance_key_prefix=prefix),
                                          metadata=s.metadata)
    by_status = {c.status: c.count for c in counts.counts}
    assert by_status[common_pb2.INSTANCE_STATUS_RUNNING] == 2
    assert by_status[common_pb2.INSTANCE_STATUS_COMPLETED] == 1
    assert by_status[common_pb2.INSTANCE_STATUS_CANCELLED] == 0 and counts.total == 3 and counts.stalled == 0
    stepped = await s.audit.CountInstances(audit_pb2.CountInstancesRequest(
        workflow_id=WF, instance_key_prefix=prefix, last_step="shipped"), metadata=s.metadata)
    assert stepped.total == 1
    other = await harness.beta.audit.CountInstances(audit_pb2.CountInstancesRequest(workflow_id=WF),
                                                    metadata=harness.beta.metadata)
    assert other.total == 0  # another namespace sees none of them


async def test_count_instances_counts_stalled_running_ones(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    prefix = new_key() + "-"
    await start(s, prefix + "a")
    await start(s, prefix + "b")
    await expire_instance_lease(database_url, prefix + "a")
    counts = await s.audit.CountInstances(audit_pb2.CountInstancesRequest(instance_key_prefix=prefix),
                                          metadata=s.metadata)
    assert counts.stalled == 1 and counts.total == 2


async def test_audit_calls_need_a_token(harness: Harness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await harness.alpha.audit.CountInstances(audit_pb2.CountInstancesRequest(),
                                                 metadata=(("authorization", "Bearer wrong-token-x"),))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_list_keys_by_key_prefix_finds_an_instances_keys_in_every_scope(harness: Harness) -> None:
    s = harness.alpha
    order = new_key()
    for scope, key in (("payment", order), ("email", order + "-confirmation"), ("payment", new_key())):
        await s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[idempotency_pb2.ClaimItem(
            scope=scope, key=key, holder="exec-1")]), metadata=s.metadata)
    reply = await s.idempotency.ListKeys(idempotency_pb2.ListKeysRequest(key_prefix=order), metadata=s.metadata)
    assert sorted((k.scope, k.key) for k in reply.keys) == [("email", order + "-confirmation"), ("payment", order)]


async def test_get_caller_names_the_namespace_of_the_token(harness: Harness) -> None:
    alpha = await harness.alpha.audit.GetCaller(audit_pb2.GetCallerRequest(), metadata=harness.alpha.metadata)
    beta = await harness.beta.audit.GetCaller(audit_pb2.GetCallerRequest(), metadata=harness.beta.metadata)
    assert alpha.namespace.startswith("ns-alpha-") and beta.namespace.startswith("ns-beta-")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await harness.alpha.audit.GetCaller(audit_pb2.GetCallerRequest(), metadata=(("authorization", "Bearer nope-123"),))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def _all_workflows(s: Stubs, page_size: int) -> list[audit_pb2.WorkflowSummary]:
    out: list[audit_pb2.WorkflowSummary] = []
    token = ""
    while True:
        reply = await s.audit.ListWorkflows(audit_pb2.ListWorkflowsRequest(page_size=page_size, page_token=token),
                                            metadata=s.metadata)
        out.extend(reply.workflows)
        token = reply.next_page_token
        if not token:
            return out


async def test_list_workflows_shows_each_workflow_with_versions_or_instances_once_in_its_namespace(
        harness: Harness) -> None:
    s, run = harness.alpha, new_key()
    only_instances, versioned = f"wf-{run}-a", f"wf-{run}-b"
    for i in range(3):
        await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
            workflow_id=only_instances, instance_key=f"k{i}", execution_id="exec-1"), metadata=s.metadata)
    for label in ("1.0.0", "1.1.0"):
        await s.versions.RegisterVersion(version_pb2.RegisterVersionRequest(
            workflow_id=versioned, definition_json=json.dumps(workflow(ship=f"Ship {label}")).encode(), actor="tester",
            label=label), metadata=s.metadata)
    await s.instances.StartOrResume(instance_pb2.StartOrResumeRequest(
        workflow_id=versioned, instance_key="k0", execution_id="exec-1"), metadata=s.metadata)
    for size in (1, 2, 1000):  # paged one at a time, two at a time, or all at once: each workflow once, in order
        listed = await _all_workflows(s, size)
        ids = [w.workflow_id for w in listed]
        assert ids == sorted(set(ids)), size
        mine = {w.workflow_id: w for w in listed if w.workflow_id.startswith(f"wf-{run}")}
        assert (mine[only_instances].instances, mine[only_instances].versions,
                mine[only_instances].latest_version) == (3, 0, 0)
        assert (mine[versioned].instances, mine[versioned].versions, mine[versioned].latest_version,
                mine[versioned].latest_label) == (1, 2, 2, "1.1.0")
    assert not [w for w in await _all_workflows(harness.beta, 1000) if w.workflow_id.startswith(f"wf-{run}")]
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await s.audit.ListWorkflows(audit_pb2.ListWorkflowsRequest(page_token="not-a-token"), metadata=s.metadata)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
