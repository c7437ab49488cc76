"""`make run` on embedded storage: a fresh data folder, no PostgreSQL or Redis URL, one order end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPORT
from harness import REPO, free_port, http, tail, wait_until


def test_8_make_run_on_embedded_storage_completes_an_order(tmp_path: Path) -> None:
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("DURABLE_DATABASE_URL", "DURABLE_REDIS_URL")}
    n8n_port, sidecar_port, services_port = free_port(), free_port(), free_port()
    env.update({"DURABLE_METRICS_ADDRESS": f"127.0.0.1:{free_port()}"})
    log = tmp_path / "run.log"
    # The same program `make run` runs, on a data folder of its own.
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(REPO / "e2e" / "run.py"), "--data-dir", str(tmp_path / "data"),
                                 "--n8n-port", str(n8n_port), "--sidecar-port", str(sidecar_port),
                                 "--services-port", str(services_port)],
                                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        wait_until("make run to print READY", lambda: "READY" in log.read_text() or proc.poll() is not None, 600, 1)
        assert proc.poll() is None, f"make run exited:\n{log.read_text()[-4000:]}"
        status, _ = http("POST", f"http://127.0.0.1:{n8n_port}/webhook/orders",
                         {"orderId": "A-1001", "amount": 42, "email": "ann@example.com"})
        assert status == 200
        database = tmp_path / "data" / "durable.sqlite3"
        assert database.exists(), "the sidecar did not keep its state in the embedded SQLite file"
        cli_env = {**env, "DURABLE_DATABASE_URL": f"sqlite:///{database}"}

        def shown() -> str:
            out = subprocess.run([str(REPO / ".venv/bin/durable-sidecar"), "instances", "show",
                                  "durableOrderTracking", "A-1001"], env=cli_env, capture_output=True, text=True,
                                 timeout=60)
            return out.stdout + out.stderr

        wait_until("order A-1001 to complete", lambda: "status: completed" in shown(), 180, 2)
        text = shown()
        assert "last_step: couponed" in text, text
        REPORT.add("8. make run on embedded SQLite: one order", 1, 1, 0, time.monotonic() - t0,
                   note="sidecar SQLite + in-process cache; n8n SQLite")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(tail(log, 15))
    assert proc.returncode == 0, f"make run did not stop cleanly on SIGTERM:\n{tail(log, 30)}"
