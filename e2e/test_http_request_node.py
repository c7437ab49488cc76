"""n8n's own HTTP Request node calls the sidecar's HTTP/JSON face: a plain workflow, no community node.

What someone on n8n Cloud (who cannot install community nodes) can build: Webhook → HTTP Request
StartOrResume → HTTP Request SaveCheckpoints (two steps in one batch) → HTTP Request
CompleteInstance, each a POST of protobuf JSON to /durable.v1.<Service>/<Method> with
`Authorization: Bearer <token>`. The result is read back over gRPC: the instance, its checkpoints
with their states, and its audit trail naming the n8n execution.

`http_face_workflow` is also used by e2e/test_console_browser.py: with `"complete": false` in the
order the last call is a GetInstance instead, and the instance stays RUNNING (for the console to cancel).
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import Any

from conftest import REPORT, Stack
from durable.v1 import audit_pb2, audit_pb2_grpc, common_pb2
from harness import TOKEN, http, import_workflow

HTTP_WF = "durableHttpFaceOrders"
HTTP_PATH = "http-face-orders"
_NS = uuid.UUID("5b0f3c1e-7d7e-4c55-9f39-3f7f3a0f8e21")


def _id(name: str) -> str:
    return str(uuid.uuid5(_NS, name))


def _call(name: str, method: str, body: str, x: int, sidecar_url: str, url_suffix: str = "") -> dict[str, Any]:
    """An HTTP Request node posting protobuf JSON to one RPC of the HTTP/JSON face."""
    return {
        "id": _id(name), "name": name, "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2, "position": [x, 0],
        "parameters": {
            "method": "POST",
            "url": f"={sidecar_url}/durable.v1.{method}{url_suffix}",
            "sendHeaders": True,
            "headerParameters": {"parameters": [{"name": "Authorization", "value": f"Bearer {TOKEN}"}]},
            "sendBody": True, "specifyBody": "json", "jsonBody": body, "options": {},
        },
    }


def http_face_workflow(sidecar_url: str) -> dict[str, Any]:
    order = "$('Webhook').item.json.body"
    ref = f"workflowId: '{HTTP_WF}', instanceKey: {order}.orderId"
    state = "JSON.stringify({{ orderId: {o}.orderId, amount: {o}.amount{extra} }}).base64Encode()"
    received = state.format(o=order, extra="")
    priced = state.format(o=order, extra=f", total: Math.round({order}.amount * 120) / 100")
    save_item = ("{{ " + ref + ", stepName: '{step}', nodeName: 'Save Checkpoints', executionId: $execution.id, "
                 "stateJson: {state} }}")
    nodes = [
        {"id": _id("Webhook"), "name": "Webhook", "type": "n8n-nodes-base.webhook", "typeVersion": 2.1,
         "position": [0, 0], "webhookId": _id("webhook-id"),
         "parameters": {"httpMethod": "POST", "path": HTTP_PATH, "responseMode": "lastNode", "options": {}}},
        _call("Start Or Resume", "InstanceService/StartOrResume",
              f"={{{{ JSON.stringify({{ {ref}, executionId: $execution.id }}) }}}}", 220,
              sidecar_url),
        _call("Save Checkpoints", "CheckpointService/SaveCheckpoints",
              "={{ JSON.stringify({ items: [" + save_item.format(step="received", state=received) + ", "
              + save_item.format(step="priced", state=priced) + "] }) }}", 440, sidecar_url),
        # CompleteInstance, or (an order with "complete": false) only GetInstance: the instance stays RUNNING.
        _call("Complete Instance", "InstanceService/",
              f"={{{{ JSON.stringify({order}.complete === false ? {{ {ref} }} : {{ {ref}, executionId: $execution.id, "
              f"resultJson: JSON.stringify({{ total: Math.round({order}.amount * 120) / 100 }}).base64Encode() }}) }}}}",
              660, sidecar_url, url_suffix=f"{{{{ {order}.complete === false ? 'GetInstance' : 'CompleteInstance' }}}}"),
    ]
    chain = [n["name"] for n in nodes]
    connections = {a: {"main": [[{"node": b, "type": "main", "index": 0}]]} for a, b in itertools.pairwise(chain)}
    return {"id": HTTP_WF, "name": "Orders over the HTTP/JSON face (HTTP Request nodes only)", "active": False,
            "nodes": nodes, "connections": connections, "settings": {"executionOrder": "v1"}, "pinData": {}}


_installed: set[str] = set()


def install_http_face_workflow(stack: Stack) -> None:
    """Imports and publishes the workflow once per stack; n8n restarts to pick the publication up."""
    if stack.n8n.url in _installed:
        return
    path = stack.work / f"{HTTP_WF}.json"
    path.write_text(json.dumps(http_face_workflow(stack.sidecar.http_url)))
    import_workflow(stack.n8n, path, {})
    # A workflow published while n8n runs is applied by its publication outbox; when that is slow, a
    # restart applies it at start-up.
    try:
        stack.n8n.wait_webhook(HTTP_PATH, timeout=45)
    except (AssertionError, RuntimeError):
        stack.main.stop()
        stack.restart_n8n()
        stack.n8n.wait_webhook(HTTP_PATH)
    _installed.add(stack.n8n.url)


def post_http_face_order(stack: Stack, order_id: str, amount: float, *, complete: bool = True) -> dict[str, Any]:
    status, body = http("POST", f"{stack.n8n.url}/webhook/{HTTP_PATH}",
                        {"orderId": order_id, "amount": amount, "complete": complete}, timeout=60)
    assert status == 200, f"the workflow answered {status}: {body[:500]!r}"
    return dict(json.loads(body))


def test_http_request_nodes_drive_an_instance_over_the_http_json_face(stack: Stack) -> None:
    t0 = time.monotonic()
    install_http_face_workflow(stack)
    order = f"http-{uuid.uuid4().hex[:8]}"
    answer = post_http_face_order(stack, order, 50)
    # The last HTTP Request node's output is the CompleteInstance response, in protobuf JSON.
    assert answer["instance"]["status"] == "INSTANCE_STATUS_COMPLETED", answer

    sidecar = stack.sidecar
    inst = sidecar.instance(HTTP_WF, order)
    assert inst is not None and inst.status == common_pb2.INSTANCE_STATUS_COMPLETED
    assert json.loads(inst.result_json) == {"total": 60}
    assert sidecar.trail(HTTP_WF, order) == ["received", "priced"]
    assert sidecar.latest_state(HTTP_WF, order) == {"orderId": order, "amount": 50, "total": 60}
    audit = audit_pb2_grpc.AuditServiceStub(sidecar.channel)
    events = audit.ListInstanceEvents(audit_pb2.ListInstanceEventsRequest(workflow_id=HTTP_WF, instance_key=order),
                                      metadata=sidecar.md, timeout=5).events
    assert [e.kind for e in events] == ["started", "completed"]
    execution = inst.created_by_execution_id
    assert execution.isdigit() and [e.execution_id for e in events] == [execution, execution]

    REPORT.add("HTTP Request nodes over the HTTP/JSON face", 1, 1, 0, time.monotonic() - t0,
               note="StartOrResume + SaveCheckpoints + CompleteInstance, checked over gRPC")
