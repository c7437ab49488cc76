"""Log lines name their instance: the call's (context) inside a call, the line's own extra= outside one."""

from __future__ import annotations

import json
import logging

from durable_sidecar import logs


def _line(formatter: logging.Formatter, **extra: object) -> str:
    record = logging.getLogger("durable_sidecar.test").makeRecord(
        "durable_sidecar.test", logging.WARNING, __file__, 1, "instance suspended", (), None, extra=extra)
    logs._ContextFilter().filter(record)
    return formatter.format(record)


def test_a_line_outside_a_call_keeps_the_instance_it_names() -> None:
    # A sweep suspending an instance runs in no call: its line names the instance itself (a user trial found
    # "instance suspended attempts=20" with no instance).
    named = {"namespace": "ns", "workflow_id": "wf", "instance_key": "order-7", "attempts": 20}
    text = _line(logs.TextFormatter(), **named)
    assert "[ order-7]" in text and "workflow_id=wf" in text and "attempts=20" in text
    assert json.loads(_line(logs.JsonFormatter(), **named))["instance_key"] == "order-7"


def test_a_line_inside_a_call_carries_the_calls_instance() -> None:
    token = logs.instance_key_var.set("order-8")
    try:
        assert json.loads(_line(logs.JsonFormatter()))["instance_key"] == "order-8"
        assert json.loads(_line(logs.JsonFormatter(), instance_key="order-9"))["instance_key"] == "order-9"
    finally:
        logs.instance_key_var.reset(token)
