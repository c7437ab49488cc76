"""The boundary's check of a batch's items a field at a time: the same verdict and the same error as item by item."""

from __future__ import annotations

import pytest
from durable.v1 import checkpoint_pb2
from durable_sidecar.errors import InvalidArgument, TooLarge
from durable_sidecar.transport.boundary import Boundary, PageTokens, StreamLimits

MAX_JSON = 4096


def boundary() -> Boundary:
    return Boundary(max_json_bytes=MAX_JSON, max_repeated=1000, tokens=PageTokens(b"k" * 32),
                    streams=StreamLimits(per_namespace=1, min_poll_interval_ms=100))


def batch(n: int = 6) -> checkpoint_pb2.SaveCheckpointsRequest:
    return checkpoint_pb2.SaveCheckpointsRequest(items=[
        checkpoint_pb2.SaveCheckpointItem(workflow_id="wf", instance_key=f"order-{i}", step_name="Charge",
                                          state_json=b'{"i": %d}' % i, execution_id="exec-1", node_name="Node",
                                          lease_seconds=30)
        for i in range(n)])


def refusal(request: checkpoint_pb2.SaveCheckpointsRequest) -> str:
    with pytest.raises((InvalidArgument, TooLarge)) as err:
        boundary().check(request)
    return str(err.value)


def test_a_clean_batch_passes_with_every_kind_of_field_set() -> None:
    request = batch()
    request.items[1].expected_sequence = 3
    request.items[2].state_mode = checkpoint_pb2.STATE_MODE_ADD_STEP_RESULT
    request.items[3].complete_key.scope = "payments"
    request.items[3].complete_key.key = "charge-1"
    request.items[3].complete_key.result_json = b'{"ok": true}'
    request.items[4].workflow_id = "Bestellung-Ä"  # not ASCII, still an identifier: the full check decides
    request.items[5].node_name = ""
    boundary().check(request)


def test_the_first_bad_item_in_order_is_named_whatever_the_field() -> None:
    request = batch()
    request.items[4].workflow_id = "wf\x00"
    request.items[2].state_json = b"{not json"
    assert refusal(request).startswith("items[2].state_json")
    request.items[1].state_mode = 7
    assert refusal(request).startswith("items[1].state_mode")


@pytest.mark.parametrize("change, named", [
    (lambda it: setattr(it, "instance_key", "k\x85"), "items[3].instance_key"),
    (lambda it: setattr(it, "step_name", "s" * 300), "items[3].step_name"),
    (lambda it: setattr(it, "state_json", b'{"a": "' + b"x" * MAX_JSON + b'"}'), "items[3].state_json"),
    (lambda it: setattr(it, "state_json", '{"a": 1}'.encode("utf-16")), "items[3].state_json"),
    (lambda it: setattr(it, "expected_sequence", -1), "items[3].expected_sequence"),
    (lambda it: setattr(it, "expected_sequence", 2**53), "items[3].expected_sequence"),
    (lambda it: setattr(it, "lease_seconds", -5), "items[3].lease_seconds"),
    (lambda it: it.complete_key.MergeFrom(checkpoint_pb2.KeyCompletion(scope="s", key="k\x01")),
     "items[3].complete_key.key"),
    (lambda it: it.complete_key.MergeFrom(checkpoint_pb2.KeyCompletion(scope="s", key="k", result_json=b"[")),
     "items[3].complete_key.result_json"),
])
def test_each_check_holds_in_a_batch_and_names_the_item(change: object, named: str) -> None:
    request = batch()
    change(request.items[3])  # type: ignore[operator]
    assert refusal(request).startswith(named)
    # The same item alone is refused with the same words (its index aside).
    single = checkpoint_pb2.SaveCheckpointsRequest(items=[request.items[3]])
    assert refusal(single) == refusal(request).replace("items[3]", "items[0]", 1)
