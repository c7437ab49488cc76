"""End-to-end: one n8n, two sidecars on one database behind a credential that lists both; one is killed mid-run."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from conftest import ORDER_WF, REPORT, Stack
from durable.v1 import common_pb2
from harness import CREDENTIAL_ID, TOKEN, Sidecar, wait_until

SIDE_EFFECTS = ("payment", "inventory", "shipping", "coupon")
FULL_TRAIL = ["paid", "reserved", "shipped", "couponed"]


def _credential(stack: Stack, host: str) -> None:
    """Re-imports the stack's credential (same id, so the examples use it) with this Host field."""
    path = stack.n8n.work / "credentials-two-sidecars.json"
    path.write_text(json.dumps([{
        "id": CREDENTIAL_ID, "type": "durableSidecarApi", "name": "Durable Sidecar (e2e)",
        "data": {"host": host, "port": stack.sidecar.port, "tls": False, "token": TOKEN, "deadlineSeconds": 10},
    }]))
    stack.n8n.cli("import:credentials", f"--input={path}")


@pytest.fixture
def second_sidecar(stack: Stack) -> Iterator[Sidecar]:
    """A second sidecar process on the stack's sidecar database; the credential lists both while it lives."""
    work = stack.work / "sidecar-b"
    work.mkdir(exist_ok=True)
    b = Sidecar(work, stack.sidecar.database)
    b.start()
    _credential(stack, f"127.0.0.1:{stack.sidecar.port}, 127.0.0.1:{b.port}")
    try:
        yield b
    finally:
        _credential(stack, "127.0.0.1")  # back to the one sidecar the other scenarios use
        b.close()


def _done(stack: Stack, keys: list[str]) -> bool:
    for k in keys:
        inst = stack.sidecar.instance(ORDER_WF, k)
        if inst is None or inst.status != common_pb2.INSTANCE_STATUS_COMPLETED:
            return False
    return True


def test_13_two_sidecars_one_killed_mid_run_every_order_completes_once(stack: Stack, second_sidecar: Sidecar) -> None:
    t0 = time.monotonic()
    run = uuid.uuid4().hex[:6]
    keys = [f"twosc-{run}-{i:02d}" for i in range(8)]
    stack.services.stall("shipping")
    try:
        for k in keys:
            assert stack.post_order(k) == 200
        wait_until("every order to be inside the shipping call",
                   lambda: stack.services.in_flight("shipping") >= len(keys), timeout=90)
        second_sidecar.process.kill9()  # and it stays down: sidecar a carries on alone
        killed = time.monotonic()
    finally:
        stack.services.unstall()
    more = [f"twosc-{run}-late-{i:02d}" for i in range(4)]
    for k in more:  # new deliveries after the kill take only the live sidecar
        assert stack.post_order(k) == 200
    every = keys + more
    try:
        wait_until(f"{len(every)} orders to complete", lambda: _done(stack, every), timeout=180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stack.diagnose(every)}") from None
    done = time.monotonic() - killed
    for k in every:
        assert stack.sidecar.trail(ORDER_WF, k) == FULL_TRAIL, f"{k}: {stack.sidecar.trail(ORDER_WF, k)}"
    dups = stack.services.duplicate_effects(every, SIDE_EFFECTS)
    assert dups == [], f"side effects not exactly once: {dups}\n{stack.diagnose(every)}"
    REPORT.add("13. two sidecars, one killed -9 mid-run", len(every), len(every), len(dups), time.monotonic() - t0,
               note=f"kill -9 of sidecar b with shipping in flight → all completed {done:.1f} s later on sidecar a",
               kill_to_completed_s=done)
