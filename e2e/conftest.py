"""The stack every scenario shares: PostgreSQL databases, the fake services, the sidecar, n8n with our nodes."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fake_services import FakeServices
from harness import (
    REPO,
    N8n,
    Sidecar,
    create_db,
    drop_db,
    import_credential,
    import_workflow,
    tail,
    wait_until,
    work_dir,
)

T = TypeVar("T")

ORDER_WF = "durableOrderTracking"
RENEWAL_WF = "durableRenewalReminder"
WAIT_S = 20


def customise(workflow: dict[str, Any], services_url: str) -> dict[str, Any]:
    """The examples as a user imports them, with this run's service URL and a wait of WAIT_S seconds.

    Every lease and poll option stays at its default: a crashed n8n is noticed through its session
    (issue 39), not through a short lease.
    """
    text = json.dumps(workflow).replace("http://127.0.0.1:8099", services_url)
    wf = json.loads(text)
    for node in wf["nodes"]:
        params = node["parameters"]
        if params.get("operation") == "scheduleResume":
            params["amount"], params["unit"] = WAIT_S, "seconds"
    return dict(wf)


@dataclass
class Report:
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, scenario: str, orders: int, completed: int, duplicates: int, seconds: float, note: str = "",
            **measures: float | int) -> None:
        """One row; `measures` are named numbers for the README (e.g. kill_to_resumed_s, lost)."""
        self.rows.append({"scenario": scenario, "orders": orders, "completed": completed,
                          "duplicate_side_effects": duplicates, "seconds": round(seconds, 1), "note": note,
                          **{k: round(v, 1) if isinstance(v, float) else v for k, v in measures.items()}})


REPORT = Report()


@dataclass
class Stack:
    work: Path
    services: FakeServices
    sidecar: Sidecar
    n8n: N8n
    main: Any
    workflows: dict[str, dict[str, Any]]

    def restart_n8n(self) -> None:
        self.main = self.n8n.start_main()
        self.n8n.wait_webhook("orders")

    def kill_n8n_inside(self, service: str, count: int, deliver: Callable[[], T]) -> tuple[T, float]:
        """Holds `service`'s calls, runs `deliver`, and kills n8n (-9) once `count` calls wait inside it.

        Returns what `deliver` returned and the moment of the kill (time.monotonic()). n8n stays down;
        the held calls are released after the kill, so the dead executions' calls complete at the service.
        """
        self.services.stall(service)
        try:
            delivered = deliver()
            wait_until(f"{count} calls to be inside the {service} call",
                       lambda: self.services.in_flight(service) >= count, timeout=90)
            self.main.kill9()  # the executions die with their calls in flight
            return delivered, time.monotonic()
        finally:
            self.services.unstall()

    def post_order(self, order_id: str, amount: float = 42.0, path: str = "orders", base_url: str | None = None) -> int:
        return self.deliver(order_id, amount, path, base_url)[0]

    def deliver(self, order_id: str, amount: float = 42.0, path: str = "orders",
                base_url: str | None = None) -> tuple[int, bytes]:
        """POSTs an order as a sender would; the HTTP status and body n8n answered."""
        from harness import http

        return http("POST", f"{base_url or self.n8n.url}/webhook/{path}",
                    {"orderId": order_id, "amount": amount, "email": f"{order_id}@example.com"}, timeout=60)

    def diagnose(self, orders: list[str], workflow_id: str = ORDER_WF) -> str:
        """What every party saw, for a failure message."""
        lines = []
        for o in orders:
            inst = self.sidecar.instance(workflow_id, o)
            status = inst.status if inst else "missing"
            trail = self.sidecar.trail(workflow_id, o) if inst else []
            effects = {s: self.services.effects(s, o) for s in ("payment", "inventory", "shipping", "coupon", "notify")}
            lines.append(f"{o}: status={status} trail={trail} effects={effects}")
        lines.append("--- n8n log ---\n" + tail(self.n8n.processes[-1].log, 30))
        lines.append("--- sidecar log ---\n" + tail(self.sidecar.process.log, 20))
        return "\n".join(lines)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    with build_stack() as built:
        yield built


@contextlib.contextmanager
def build_stack() -> Iterator[Stack]:
    # DURABLE_E2E_PACKAGE_DIR: where the packed tarball is (default: where `make node-pack` writes it).
    package_dir = Path(os.environ.get("DURABLE_E2E_PACKAGE_DIR", str(REPO / "node-package")))
    sidecar_db, n8n_db = create_db("durable_e2e"), create_db("n8n_e2e")
    services = FakeServices().start()
    with work_dir() as work:
        n8n = N8n(work, n8n_db, package_dir)
        sidecar = Sidecar(work, sidecar_db, console_n8n_url=n8n.url)
        try:
            sidecar.start()
            import_credential(n8n, sidecar)
            workflows = {}
            for name in ("order-tracking.json", "renewal-reminder.json"):
                source = json.loads((REPO / "examples" / name).read_text())
                wf = customise(source, services.url)
                path = work / name
                path.write_text(json.dumps(wf))
                workflows[wf["id"]] = import_workflow(n8n, path, {})
            started = time.monotonic()
            main = n8n.start_main()
            n8n.wait_webhook("orders")
            print(f"\nn8n ready in {time.monotonic() - started:.1f} s at {n8n.url}; sidecar on {sidecar.port}")
            yield Stack(work, services, sidecar, n8n, main, workflows)
        finally:
            n8n.stop_all()
            sidecar.close()
            services.stop()
            drop_db(n8n_db)
            drop_db(sidecar_db)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not REPORT.rows:
        return
    tr = terminalreporter
    tr.section("end-to-end results")
    tr.write_line(f"{'scenario':<52} {'orders':>6} {'completed':>9} {'dup effects':>11} {'time s':>7}")
    for r in REPORT.rows:
        extra = {k: v for k, v in r.items()
                 if k not in ("scenario", "orders", "completed", "duplicate_side_effects", "seconds", "note")}
        measures = "  " + " ".join(f"{k}={v}" for k, v in extra.items()) if extra else ""
        tr.write_line(f"{r['scenario']:<52} {r['orders']:>6} {r['completed']:>9} {r['duplicate_side_effects']:>11} "
                      f"{r['seconds']:>7}  {r['note']}{measures}")
    out = REPO / "e2e" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"e2e-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"n8n": os.environ.get("N8N_E2E_VERSION", ""), "rows": REPORT.rows}, indent=2))
    tr.write_line(f"report: {path}")
