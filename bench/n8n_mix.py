"""The RPCs a durable n8n order sends on the documented wiring, as requests: written once for bench.n8n_rpcs
(the mix replayed against one sidecar, its CPU per RPC) and the micro-bench's `n8n_mix` cells (its latency per
RPC against the floors of the same run, issue 42).

Per order: StartOrResume with the webhook's item as start item (include_state), claiming the first call's key
ahead (claim_on_start, the v2 Guard's fingerprint {instanceKey, workflowId}, tied to the instance); then per call
a SaveCheckpoints item with STATE_MODE_ADD_STEP_RESULT that completes the key the claim took and claims the next
call's (claim_next), the last one completing the instance instead (the Save option Complete Instance).

The micro-bench's calls carry a session, as the nodes' do (bench/sidecar.py, Session): each order's first call
records its execution against it before it answers; so do bench.n8n_rpcs's (but with --no-session).
"""

from __future__ import annotations

import json

from durable.v1 import checkpoint_pb2, idempotency_pb2, instance_pb2

CALLS = ("payment", "inventory", "shipping")
# StartOrResume, then a SaveCheckpoints per call (the Guards' claims ride on them; the last completes the instance).
RPCS_PER_ORDER = 1 + len(CALLS)


def start_item(key: str) -> bytes:
    """The Webhook's item as n8n hands it to the Resume Point (what the instance stores as its start item)."""
    return json.dumps({"headers": {"host": "127.0.0.1:5678", "user-agent": "Python-urllib/3.12",
                                   "content-type": "application/json", "content-length": "80"},
                       "params": {}, "query": {}, "body": {"orderId": key, "amount": 42.0, "email": f"{key}@example.com"},
                       "webhookUrl": "http://localhost:5678/webhook/bench-durable",
                       "executionMode": "production"}).encode()


def claim(workflow: str, key: str, execution: str, scope: str) -> idempotency_pb2.ClaimItem:
    fingerprint = json.dumps({"instanceKey": key, "workflowId": workflow}).encode()
    return idempotency_pb2.ClaimItem(scope=scope, key=key, payload_json=fingerprint, holder=execution,
                                     workflow_id=workflow, instance_key=key)


def start_request(workflow: str, key: str, execution: str) -> instance_pb2.StartOrResumeRequest:
    return instance_pb2.StartOrResumeRequest(workflow_id=workflow, instance_key=key, execution_id=execution,
                                             include_state=True, start_item_json=start_item(key),
                                             claim_on_start=claim(workflow, key, execution, CALLS[0]))


def save_request(workflow: str, key: str, execution: str, n: int, attempt: int) -> checkpoint_pb2.SaveCheckpointsRequest:
    """The Save after call `n` (0-based): its result added to the state, the key of attempt `attempt` completed,
    the next call's key claimed, or (the last) the instance completed."""
    call, last = CALLS[n], n == len(CALLS) - 1
    result = json.dumps({"ok": True, "service": call, "orderId": key}).encode()
    return checkpoint_pb2.SaveCheckpointsRequest(items=[checkpoint_pb2.SaveCheckpointItem(
        workflow_id=workflow, instance_key=key, step_name=call, state_json=result, execution_id=execution,
        node_name=f"Save {call}", state_mode=checkpoint_pb2.STATE_MODE_ADD_STEP_RESULT,
        complete_key=checkpoint_pb2.KeyCompletion(scope=call, key=key, attempt=attempt),
        complete_instance=last, claim_next=None if last else claim(workflow, key, execution, CALLS[n + 1]))])
