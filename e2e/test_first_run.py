"""`make run`'s program (e2e/run.py) on embedded storage, started the way a user does: `make run 2>&1 | tee log`.

One run serves the tests in order: nothing fails at start, an order completes end to end, and
Ctrl-C after the pipe's reader died stops every process the run started.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import REPORT
from harness import REPO, free_port, http, tail, wait_until


@dataclass
class MakeRun:
    shell: subprocess.Popen[bytes]  # bash running `run.py ... 2>&1 | tee log`, leader of the pipeline's group
    data: Path
    log: Path
    rc_file: Path
    n8n_port: int
    env: dict[str, str]

    def executions(self) -> list[tuple[str, str, str]]:
        """(id, status, workflowId) of every execution in n8n's own SQLite database."""
        with sqlite3.connect(self.data / "n8n" / ".n8n" / "database.sqlite", timeout=30) as conn:
            rows = conn.execute('SELECT id, status, "workflowId" FROM execution_entity ORDER BY id').fetchall()
        return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]

    def failed_executions(self) -> list[tuple[str, str, str]]:
        return [e for e in self.executions() if e[1] not in ("success", "running", "new", "waiting")]

    def run_py(self) -> psutil.Process:
        for child in psutil.Process(self.shell.pid).children(recursive=True):
            if "run.py" in " ".join(child.cmdline()):
                return child
        raise AssertionError("run.py is not running")


@pytest.fixture(scope="module")
def make_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MakeRun]:
    tmp = tmp_path_factory.mktemp("make-run")
    env = {k: v for k, v in os.environ.items() if k not in ("DURABLE_DATABASE_URL", "DURABLE_REDIS_URL")}
    env["DURABLE_METRICS_ADDRESS"] = f"127.0.0.1:{free_port()}"
    env["DURABLE_HTTP_LISTEN_ADDRESS"] = f"127.0.0.1:{free_port()}"
    n8n_port, sidecar_port, services_port = free_port(), free_port(), free_port()
    log, rc_file = tmp / "run.log", tmp / "run.rc"
    argv = (f"{sys.executable} {REPO / 'e2e' / 'run.py'} --data-dir {tmp / 'data'} --n8n-port {n8n_port} "
            f"--sidecar-port {sidecar_port} --services-port {services_port}")
    # The pipeline of `make run 2>&1 | tee log` in a session of its own: a signal to its group is
    # what Ctrl-C in a terminal sends to every process of the foreground job.
    shell = subprocess.Popen(["bash", "-c", f"{{ {argv}; echo $? >{rc_file}; }} 2>&1 | tee {log}"],
                             env=env, cwd=REPO, stdout=subprocess.DEVNULL, start_new_session=True)
    run = MakeRun(shell, tmp / "data", log, rc_file, n8n_port, env)
    try:
        wait_until("make run to print READY",
                   lambda: (log.exists() and "READY" in log.read_text()) or shell.poll() is not None, 600, 1)
        assert shell.poll() is None, f"make run exited:\n{log.read_text()[-4000:]}"
        yield run
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGTERM)
            try:
                shell.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(shell.pid, signal.SIGKILL)
        print(tail(log, 15))


def test_8_make_run_leaves_no_execution_after_start(make_run: MakeRun) -> None:
    # Its readiness probe runs no workflow: not one execution, so none that failed.
    assert make_run.executions() == [], make_run.executions()


def test_8_make_run_serves_the_console(make_run: MakeRun) -> None:
    address = make_run.env["DURABLE_HTTP_LISTEN_ADDRESS"]
    assert f"http://{address}/console/" in make_run.log.read_text()
    status, body = http("GET", f"http://{address}/console/")
    assert status == 200 and b"<html" in body.lower(), (status, body[:200])


def test_8_make_run_on_embedded_storage_completes_an_order(make_run: MakeRun) -> None:
    t0 = time.monotonic()
    status, _ = http("POST", f"http://127.0.0.1:{make_run.n8n_port}/webhook/orders",
                     {"orderId": "A-1001", "amount": 42, "email": "ann@example.com"})
    assert status == 200
    database = make_run.data / "durable.sqlite3"
    assert database.exists(), "the sidecar did not keep its state in the embedded SQLite file"
    cli_env = {**make_run.env, "DURABLE_DATABASE_URL": f"sqlite:///{database}"}

    def shown() -> str:
        out = subprocess.run([str(REPO / ".venv/bin/durable-sidecar"), "instances", "show",
                              "durableOrderTracking", "A-1001"], env=cli_env, capture_output=True, text=True,
                             timeout=60)
        return out.stdout + out.stderr

    wait_until("order A-1001 to complete", lambda: "status: completed" in shown(), 180, 2)
    assert "last_step: couponed" in shown(), shown()
    wait_until("n8n to finish its executions",
               lambda: all(e[1] not in ("running", "new") for e in make_run.executions()), 60, 1)
    assert make_run.executions(), "the order ran no execution"
    assert make_run.failed_executions() == [], make_run.failed_executions()
    REPORT.add("8. make run on embedded SQLite: one order", 1, 1, 0, time.monotonic() - t0,
               note="sidecar SQLite + in-process cache; n8n SQLite")


def test_8_ctrl_c_with_stdout_piped_and_closed_stops_every_child(make_run: MakeRun) -> None:
    run_py = make_run.run_py()
    started = {p.pid: p.create_time() for p in run_py.children(recursive=True)}
    names = {p.pid: p.name() for p in run_py.children(recursive=True)}
    assert len(started) >= 3, f"expected the sidecar, n8n and its task runner under run.py: {names}"
    # The reader of the pipe goes first (tee dies on Ctrl-C too), so every line the cleanup
    # prints meets a closed pipe; then Ctrl-C reaches the whole job.
    tee = next(p for p in psutil.Process(make_run.shell.pid).children(recursive=True) if p.name() == "tee")
    tee.send_signal(signal.SIGINT)
    tee.wait(timeout=10)
    os.killpg(make_run.shell.pid, signal.SIGINT)
    run_py.wait(timeout=90)

    def survivors() -> list[str]:
        alive = []
        for pid, created in started.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{pid} {names[pid]}")
            except psutil.NoSuchProcess:
                pass
        return alive

    wait_until("every child of make run to exit", lambda: not survivors(), 30, 0.5)
    make_run.shell.wait(timeout=30)
    assert make_run.rc_file.read_text().strip() == "0", f"run.py exited with {make_run.rc_file.read_text()}"
    assert http("GET", f"http://127.0.0.1:{make_run.n8n_port}/healthz", timeout=2)[0] == 0, "n8n still answers"
    assert not (make_run.data / "run.pids").exists()
