"""`make run`'s program (e2e/run.py) on embedded storage, started the way a user does: `make run 2>&1 | tee log`.

One run serves the tests in order: nothing fails at start, an order completes end to end, the
walk-through of docs/recovery.md ("Crash it yourself": slow mode, an order, kill -9 of n8n in the
middle of the charge, make run restarting n8n, the order completed with one charge, its timeline
in the console in a real browser), and Ctrl-C after the pipe's reader died stops every process
the run started. The walk-through's screenshots go to e2e/results/ (DURABLE_E2E_CONSOLE_PNG_DIR
chooses the folder: docs/images refreshes the ones in the docs).
"""

from __future__ import annotations

import json
import os
import re
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
    services_port: int
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
    # SIGINT as a terminal's foreground job has it: a runner started in the background (nohup … &) hands its
    # children SIGINT ignored, which bash and tee would keep.
    shell = subprocess.Popen(["bash", "-c", f"{{ {argv}; echo $? >{rc_file}; }} 2>&1 | tee {log}"],
                             env=env, cwd=REPO, stdout=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    run = MakeRun(shell, tmp / "data", log, rc_file, n8n_port, services_port, env)
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
    # make run gives the sidecar an n8n API key: the order is bound to a snapshot of its workflow's version.
    bound = next((line.split(":", 1)[1].strip() for line in shown().splitlines()
                  if line.strip().startswith("bound_version:")), "")
    assert bound.isdigit() and int(bound) >= 1, shown()
    # The CLI make run prints carries this run's settings, n8n's API included: versions sync reads n8n.
    printed = make_run.data / "durable-sidecar"
    assert str(printed) in make_run.log.read_text()
    synced = subprocess.run([str(printed), "versions", "sync", "durableOrderTracking"], env=make_run.env,
                            capture_output=True, text=True, timeout=60)
    assert synced.returncode == 0 and f"version {bound}" in synced.stdout + synced.stderr, synced
    wait_until("n8n to finish its executions",
               lambda: all(e[1] not in ("running", "new") for e in make_run.executions()), 60, 1)
    assert make_run.executions(), "the order ran no execution"
    assert make_run.failed_executions() == [], make_run.failed_executions()
    REPORT.add("8. make run on embedded SQLite: one order", 1, 1, 0, time.monotonic() - t0,
               note="sidecar SQLite + in-process cache; n8n SQLite")


def instance_shown(run: MakeRun, key: str) -> str:
    database = run.data / "durable.sqlite3"
    out = subprocess.run([str(REPO / ".venv/bin/durable-sidecar"), "instances", "show", "durableOrderTracking", key],
                         env={**run.env, "DURABLE_DATABASE_URL": f"sqlite:///{database}"}, capture_output=True,
                         text=True, timeout=60)
    return out.stdout + out.stderr


def test_8_crash_it_yourself_the_walk_through_of_docs_recovery(make_run: MakeRun) -> None:
    """docs/recovery.md's five steps, as a user does them, then the order's timeline in the console."""
    from test_console_browser import CHROMIUM, VIEWPORT, _kinds, _shot, playwright_api

    demo = f"http://127.0.0.1:{make_run.services_port}"
    key = "W-2001"
    # 1. The banner: the console's log-in link and the n8n process.
    banner = make_run.log.read_text()
    link = re.search(r"(http://\S+/console/#token=\S+)", banner)
    assert link, f"no console log-in link in the banner:\n{banner[-3000:]}"
    assert "Phases of this run:" in banner and re.search(r"total\s+[\d.]+ s", banner), banner[-2000:]
    # 2. Slow mode: each charge takes 20 s.
    assert http("POST", f"{demo}/slow?payment=20")[0] == 200
    # 3. An order, answered at once.
    t0 = time.monotonic()
    status, body = http("POST", f"http://127.0.0.1:{make_run.n8n_port}/webhook/orders",
                        {"orderId": key, "amount": 42, "email": "walk@example.com"}, timeout=60)
    assert status == 200 and json.loads(body) == {"accepted": key}, (status, body)

    def stats() -> dict[str, object]:
        got = json.loads(http("GET", f"{demo}/stats")[1])
        assert isinstance(got, dict)
        return got

    wait_until("the charge to be in flight", lambda: dict(stats()["in_flight"]).get("payment", 0) >= 1, 60, 0.5)
    # 4. kill -9 of n8n (its main process, as `pkill -9 -f 'n8n start'` does) in the middle of the charge.
    n8n = next(p for p in make_run.run_py().children(recursive=True) if "start" in p.cmdline()
               and any("n8n" in part for part in p.cmdline()))
    n8n.kill()
    wait_until("make run to restart n8n", lambda: "n8n is back" in make_run.log.read_text(), 120, 1)
    log = make_run.log.read_text()
    assert "n8n was killed by SIGKILL; starting it again" in log, log[-2000:]
    assert "were freed seconds after it died (its session ended)" in log, log[-2000:]
    assert http("POST", f"{demo}/slow?payment=0")[0] == 200
    # 5. The order completes, charged once; the resumed execution's call was answered from the record.
    wait_until(f"order {key} to complete after the crash", lambda: "status: completed" in instance_shown(
        make_run, key), 300, 2)
    effects = dict(stats()["effects"])
    assert {s: dict(effects[s]).get(key) for s in ("payment", "inventory", "shipping", "coupon")} == {
        "payment": 1, "inventory": 1, "shipping": 1, "coupon": 1}, effects
    REPORT.add("8. make run walk-through: kill -9 of n8n mid-charge", 1, 1, 0, time.monotonic() - t0,
               note="make run restarted n8n; one charge per order")

    # The console, logged in by the banner's link: the order's timeline shows the crash and the resume.
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_context(viewport=VIEWPORT).new_page()
            page.set_default_timeout(60_000)
            page.goto(link.group(1))
            page.wait_for_selector(f"tr[data-key='{key}']")
            assert "#token=" not in page.url, "the token stayed in the address bar"
            _shot(page, "crash-instances.png")
            page.click(f"a:text-is('{key}')")
            page.wait_for_selector("[data-testid=timeline]")
            kinds = _kinds(page)
            assert kinds[0] == "started" and kinds[-1] == "completed", kinds
            assert "resumed" in kinds and kinds.count("checkpoint") == 4, kinds
            _shot(page, "crash-timeline.png")
        finally:
            browser.close()


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
