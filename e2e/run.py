"""`make run`: the sidecar and a real n8n with our nodes, the examples and the credential, on one machine.

With no DURABLE_DATABASE_URL the sidecar keeps its state in SQLite under the
data folder and n8n keeps its own in SQLite too, so nothing but Python and
Node.js is needed. Set DURABLE_DATABASE_URL / DURABLE_REDIS_URL to use
PostgreSQL / Redis for the sidecar instead. Ctrl-C stops everything.

Prints `READY` on a line of its own once n8n is ready and the examples' webhooks
are registered (the automated first-run test waits for it). Readiness is probed
without running a workflow: n8n's /healthz/readiness, the REST API's list of
active workflows, and an OPTIONS request to each example webhook, which n8n
answers from its webhook registry without starting an execution.

It supervises the sidecar and n8n as a process manager would: when one dies
(`kill -9` of n8n in the middle of an order, the demo the product is about),
it says in one line what died and how, starts it again, and says when the
orders it was running resume. The demo order services (payment, inventory,
shipping, coupon) run inside this process, so their ledger (`GET /stats`)
outlives any crash of n8n; it is also kept in the data folder across runs,
and `POST /slow?payment=10` makes a service slow enough to kill n8n mid-call.

The phases of the run (the Makefile's install steps, written to
`phases.tsv` in the data folder, and this program's own) are printed with
their times before READY.

Ctrl-C (SIGINT), SIGTERM and SIGHUP stop every child: each runs in a process
group of its own, and the whole group is stopped. Every line printed goes
through say(), which survives a closed stdout (`make run | tee log` after
Ctrl-C kills tee), so the cleanup always runs to the end. The process groups
are also written to the data folder, so a run that was killed with -9 has its
leftovers stopped by the next one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from types import FrameType
from typing import Any

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness import REPO, Process, _bcrypt, create_api_key, free_port, http, install_node_package, n8n_base_env, tail

OWNER_EMAIL = "admin@example.com"
PREFIX = "[make run]"


class Stop(Exception):
    """A stop signal arrived (Ctrl-C, SIGTERM, SIGHUP): unwind to the cleanup."""


class RunError(Exception):
    """make run cannot go on; the message says why."""


class _Output:
    """Writes to stdout/stderr that never raise: a closed pipe turns the stream off, not the cleanup."""

    def __init__(self) -> None:
        self.closed: set[int] = set()

    def write(self, text: str, stream: Any = None) -> None:
        stream = stream or sys.stdout
        fd = stream.fileno() if hasattr(stream, "fileno") else -1
        if fd in self.closed:
            return
        try:
            stream.write(text + "\n")
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.closed.add(fd)
            # Point the dead descriptor at /dev/null, so that Python's own flush at exit
            # does not complain about the broken pipe either.
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, fd)
                os.close(devnull)


OUT = _Output()


def say(msg: str) -> None:
    OUT.write(f"{PREFIX} {msg}")


def install_package(user_folder: Path) -> None:
    """Installs the packed tarball as README says: `npm install <tgz>` in ~/.n8n/nodes (picks up rebuilds)."""
    package_dir = Path(os.environ.get("DURABLE_E2E_PACKAGE_DIR", str(REPO / "node-package")))
    tarballs = sorted(package_dir.glob("n8n-nodes-durable-*.tgz"))
    if not tarballs:
        raise RunError("no node package tarball: run `make node-pack` (make run does)")
    install_node_package(user_folder / ".n8n" / "nodes", tarballs[-1])


def how_it_ended(proc: Process) -> str:
    """One line on how a child ended: the signal that killed it, or its exit code."""
    code = proc.proc.returncode if proc.proc is not None else None
    if code is None:
        return "ended"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


class Phases:
    """What took how long, from the Makefile's steps (phases.tsv) to READY: printed before READY."""

    def __init__(self, data: Path) -> None:
        self.rows: list[tuple[str, float]] = []
        path = data / "phases.tsv"
        if path.exists():
            for line in path.read_text().splitlines():
                name, _, seconds = line.rpartition("\t")
                with contextlib.suppress(ValueError):
                    self.rows.append((name, float(seconds)))
            path.unlink()
        self.mark = time.monotonic()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.rows.append((name, now - self.mark))
        self.mark = now

    def table(self) -> str:
        width = max((len(n) for n, _ in self.rows), default=0)
        lines = [f"    {n:<{width}}  {s:6.1f} s" for n, s in self.rows]
        lines.append(f"    {'total':<{width}}  {sum(s for _, s in self.rows):6.1f} s")
        return "\n".join(lines)


def wait_sidecar(port: int, proc: Process, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        while time.monotonic() < deadline:
            if not proc.alive:
                raise RunError(f"the sidecar exited:\n{tail(proc.log)}")
            try:
                reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.3)
    raise RunError(f"the sidecar did not become healthy:\n{tail(proc.log)}")


class Leftovers:
    """The process groups of this data folder's run, on disk: a run killed with -9 leaves them behind."""

    def __init__(self, data: Path) -> None:
        self.path = data / "run.pids"

    def stop_previous(self) -> None:
        if not self.path.exists():
            return
        with contextlib.suppress(ValueError, OSError):
            for entry in json.loads(self.path.read_text()):
                try:
                    proc = psutil.Process(entry["pid"])
                    same = abs(proc.create_time() - entry["started"]) < 0.01
                except psutil.Error:
                    continue
                if same:
                    say(f"stopping {entry['name']} (process group {entry['pid']}) left running by an earlier make run")
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(entry["pid"], signal.SIGTERM)
                    with contextlib.suppress(psutil.Error):
                        proc.wait(timeout=20)
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(entry["pid"], signal.SIGKILL)
        self.path.unlink(missing_ok=True)

    def record(self, processes: list[Process]) -> None:
        entries = []
        for p in processes:
            if p.proc is not None and p.alive:
                with contextlib.suppress(psutil.Error):
                    entries.append({"name": p.name, "pid": p.proc.pid,
                                    "started": psutil.Process(p.proc.pid).create_time()})
        self.path.write_text(json.dumps(entries))

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def run_cli(argv: list[str], env: dict[str, str], timeout: float = 300) -> None:
    """An n8n CLI command in a process group of its own, stopped with it on any exception (Ctrl-C too)."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise RunError(f"{' '.join(argv[:2])} failed:\n{out[-2000:]}\n{err[-2000:]}")


def example_workflows() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((REPO / "examples").glob("*.json"))]


def webhook_paths(workflow: dict[str, Any]) -> list[tuple[str, str]]:
    """(HTTP method, path) of every Webhook trigger in a workflow."""
    return [(str(n["parameters"].get("httpMethod", "GET")), str(n["parameters"]["path"]))
            for n in workflow.get("nodes", [])
            if n.get("type") == "n8n-nodes-base.webhook" and n.get("parameters", {}).get("path")]


def n8n_login(base_url: str, email: str, password: str) -> urllib.request.OpenerDirector:
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    req = urllib.request.Request(f"{base_url}/rest/login", method="POST",
                                 data=json.dumps({"emailOrLdapLoginId": email, "password": password}).encode(),
                                 headers={"Content-Type": "application/json"})
    with opener.open(req, timeout=10) as resp:
        resp.read()
    return opener


def n8n_api_key(base_url: str, email: str, password: str) -> str:
    """A public-API key of n8n's owner, made as *Settings → n8n API → Create an API key* does: the sidecar reads
    the workflows with it, so each instance is bound to a snapshot of its workflow's version."""
    return create_api_key(base_url, n8n_login(base_url, email, password), "durable sidecar (make run)")


def n8n_ready(base_url: str, email: str, password: str) -> tuple[bool, str]:
    """Whether n8n serves the examples, found out without running them; with what it is still waiting for."""
    status, _ = http("GET", f"{base_url}/healthz/readiness", timeout=3)
    if status != 200:
        return False, "n8n to answer /healthz/readiness"
    try:
        opener = n8n_login(base_url, email, password)
        with opener.open(f"{base_url}/rest/active-workflows", timeout=10) as resp:
            active = set(json.loads(resp.read())["data"])
    except (OSError, ValueError, KeyError):
        return False, "n8n's REST API (log in, active workflows)"
    for wf in example_workflows():
        if wf.get("id") not in active:
            continue  # not published in this n8n (the user may have unpublished it): nothing to wait for
        for method, path in webhook_paths(wf):
            # An OPTIONS request with an Origin: n8n answers 204 and lists the methods its webhook
            # registry holds for the path in Access-Control-Allow-Methods. No execution is started
            # (a POST would start one) and nothing is logged (asking for one method would log an
            # error while it is not registered yet).
            req = urllib.request.Request(f"{base_url}/webhook/{path}", method="OPTIONS",
                                         headers={"Origin": base_url})
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    allowed = {m.strip() for m in resp.headers.get("Access-Control-Allow-Methods", "").split(",")}
                    ok = resp.status == 204 and method in allowed
            except OSError:
                ok = False
            if not ok:
                return False, f"the webhook {method} /webhook/{path} of \"{wf.get('name')}\" to be registered"
    return True, ""


class Run:
    """One `make run`: what it started, so that the cleanup can stop all of it whatever happened."""

    def __init__(self, args: argparse.Namespace, data: Path) -> None:
        self.args, self.data = args, data
        self.stopping = False
        self.processes: list[Process] = []
        self.demo: Any = None
        self.leftovers = Leftovers(data)
        self.phases = Phases(data)
        self.cli = ".venv/bin/durable-sidecar"  # the CLI as this run's data folder needs it (set in run)

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.stopping:
            return  # the cleanup is running; it ends every child itself
        self.stopping = True
        raise Stop(signal.Signals(signum).name)

    def cleanup(self) -> None:
        self.stopping = True  # later signals only wait for the cleanup
        started = [p for p in self.processes if p.proc is not None]
        if started:
            say("stopping n8n and the sidecar")
        for p in reversed(started):
            p.stop()
        if self.demo is not None:
            self.demo.stop()
        self.leftovers.clear()
        if started:
            say("stopped")

    def serve(self) -> int:
        args, data = self.args, self.data
        self.leftovers.stop_previous()
        secrets_file = data / "run-secrets.json"
        conf = json.loads(secrets_file.read_text()) if secrets_file.exists() else {
            "token": "run-" + secrets.token_urlsafe(24), "encryption_key": secrets.token_urlsafe(32),
            "password": "Durable-" + secrets.token_urlsafe(9)}
        if "password_hash" not in conf:
            # Kept: n8n's log-in session is tied to the owner's password hash, and a new bcrypt
            # salt on every start would log the user out at every make run.
            conf["password_hash"] = _bcrypt(n8n_base_env(), conf["password"])
            secrets_file.write_text(json.dumps(conf))
            secrets_file.chmod(0o600)

        # The sidecar: embedded SQLite and in-process cache unless URLs are set.
        sidecar_env = {**os.environ, "DURABLE_AUTH_TOKENS": f"{conf['token']}=default",
                       "DURABLE_LISTEN_ADDRESS": f"127.0.0.1:{args.sidecar_port}",
                       "DURABLE_METRICS_ADDRESS": os.environ.get("DURABLE_METRICS_ADDRESS", "127.0.0.1:9464"),
                       # The contract over HTTP/JSON and the web console on it, linked to this n8n.
                       "DURABLE_HTTP_LISTEN_ADDRESS": os.environ.get("DURABLE_HTTP_LISTEN_ADDRESS", "127.0.0.1:8080"),
                       "DURABLE_CONSOLE_ENABLED": os.environ.get("DURABLE_CONSOLE_ENABLED", "true"),
                       "DURABLE_CONSOLE_N8N_URL": os.environ.get("DURABLE_CONSOLE_N8N_URL",
                                                                 f"http://127.0.0.1:{args.n8n_port}"),
                       "DURABLE_DATA_DIR": str(data), "DURABLE_LOG_FORMAT": "text"}
        # n8n API access (the key made on the first run, unless you give your own): the sidecar binds each
        # instance to a snapshot of its workflow's version.
        n8n_access = {"DURABLE_N8N_BASE_URL": f"http://127.0.0.1:{args.n8n_port}"}
        if conf.get("n8n_api_key") and not os.environ.get("DURABLE_N8N_API_KEY"):
            sidecar_env.update(n8n_access, DURABLE_N8N_API_KEY=conf["n8n_api_key"])
        storage = "PostgreSQL" if os.environ.get("DURABLE_DATABASE_URL") else f"SQLite in {data / 'durable.sqlite3'}"
        sidecar = Process("sidecar", [str(REPO / ".venv/bin/durable-sidecar"), "serve"], sidecar_env,
                          data / "sidecar.log")

        # n8n: its own state in SQLite under the data folder, our package, the examples.
        base = n8n_base_env()
        user = data / "n8n"
        user.mkdir(exist_ok=True)
        n8n_env = {**base, "DB_TYPE": "sqlite", "N8N_USER_FOLDER": str(user),
                   "N8N_ENCRYPTION_KEY": conf["encryption_key"],
                   "N8N_PORT": str(args.n8n_port), "N8N_RUNNERS_BROKER_PORT": str(free_port()),
                   "N8N_WEBHOOK_URL": f"http://127.0.0.1:{args.n8n_port}/", "N8N_LOG_LEVEL": "warn",
                   "DB_SQLITE_POOL_SIZE": "2",
                   "N8N_INSTANCE_OWNER_MANAGED_BY_ENV": "true", "N8N_INSTANCE_OWNER_EMAIL": OWNER_EMAIL,
                   # n8n's own module switches: without its AI assistant, n8n opens on the workflows
                   # (not on the assistant's page), and the editor's checklist has no MCP item; without the
                   # MCP registry (as e2e/n8n-env.sh), n8n does not look for api.n8n.io at every start.
                   "N8N_DISABLED_MODULES": os.environ.get("N8N_DISABLED_MODULES", "instance-ai,mcp,mcp-registry")}
        n8n_env["N8N_INSTANCE_OWNER_PASSWORD_HASH"] = conf["password_hash"]
        say("installing the node package into n8n (npm install of the packed tarball in ~/.n8n/nodes)")
        install_package(user)
        n8n = Process("n8n", ["n8n", "start"], n8n_env, data / "n8n.log")
        self.processes += [sidecar, n8n]
        # The demo order services the example calls (payment, inventory, shipping, coupon) on :8099.
        from fake_services import FakeServices

        try:
            self.demo = FakeServices(args.services_port, journal=data / "demo-services.json").start()
        except OSError:
            say(f"port {args.services_port} is taken: the example workflow calls whatever listens there")

        say(f"starting the sidecar on 127.0.0.1:{args.sidecar_port} ({storage})")
        sidecar.start()
        self.leftovers.record(self.processes)
        wait_sidecar(args.sidecar_port, sidecar)
        self.phases.done("sidecar started")
        marker = user / ".durable-imported"
        if not marker.exists():
            self.import_examples(data, n8n_env, conf["token"])
            marker.write_text(time.strftime("%F %T"))
            self.phases.done("examples and credential imported into n8n (first run only)")
        say(f"starting n8n {base.get('N8N_E2E_VERSION', '')} on http://127.0.0.1:{args.n8n_port} (10-60 s)")
        n8n.start()
        self.leftovers.record(self.processes)
        base_url = f"http://127.0.0.1:{args.n8n_port}"
        self.wait_n8n(n8n, base_url, conf["password"])
        self.phases.done("n8n started and serving the examples")
        if "DURABLE_N8N_API_KEY" not in sidecar_env:
            # First run: an API key for the sidecar (kept in run-secrets.json), which starts again with it.
            conf["n8n_api_key"] = n8n_api_key(base_url, OWNER_EMAIL, conf["password"])
            secrets_file.write_text(json.dumps(conf))
            sidecar_env.update(n8n_access, DURABLE_N8N_API_KEY=conf["n8n_api_key"])
            say("restarting the sidecar with an n8n API key (first run only): it binds instances to workflow versions")
            sidecar.stop()
            sidecar.env = sidecar_env
            sidecar.start()
            self.leftovers.record(self.processes)
            wait_sidecar(args.sidecar_port, sidecar)
            self.phases.done("n8n API key for the sidecar (first run only)")
        console = f"http://{sidecar_env['DURABLE_HTTP_LISTEN_ADDRESS']}/console/"
        # The CLI with this run's settings: the embedded database where this run keeps it (DURABLE_RUN_DIR
        # moves it) and n8n's API (versions sync reads n8n itself); DURABLE_DATABASE_URL passes through.
        cli = str(self.write_cli(data, sidecar_env))
        self.cli = cli
        OUT.write(f"""
  n8n            {base_url}/workflow/durableOrderTracking
                 log in: {OWNER_EMAIL} / {conf['password']}
  console        {console}#token={conf['token']}
                 (that link logs you in; or paste the token {conf['token']})
  sidecar        127.0.0.1:{args.sidecar_port} ({storage}); secrets in {secrets_file}
  metrics        http://{sidecar_env['DURABLE_METRICS_ADDRESS']}/metrics

  Post an order:
    curl -X POST {base_url}/webhook/orders -H 'Content-Type: application/json' \\
         -d '{{"orderId": "A-1001", "amount": 42, "email": "ann@example.com"}}'
  and look at it:   {cli} instances show durableOrderTracking A-1001
  Demo order services (payment, inventory, shipping, coupon) on http://127.0.0.1:{args.services_port}:
  GET /stats counts every call and effect; POST /slow?payment=10 makes each charge take 10 s.
  Crash it yourself (docs/recovery.md): slow the payment, post an order, then kill -9 n8n
  (kill -9 {n8n.proc.pid if n8n.proc else '?'}: n8n's process id); make run starts it again.

  Ctrl-C stops everything. Logs: {data}/sidecar.log, {data}/n8n.log
  Phases of this run:
{self.phases.table()}
READY""")
        self.supervise(sidecar, n8n, args.sidecar_port, base_url, conf["password"])
        return 0

    def wait_n8n(self, n8n: Process, base_url: str, password: str) -> None:
        t0 = time.monotonic()
        last_said = t0
        while True:
            if not n8n.alive:
                raise RunError(f"n8n exited:\n{tail(n8n.log)}")
            ready, waiting_for = n8n_ready(base_url, OWNER_EMAIL, password)
            if ready:
                break
            if time.monotonic() - t0 > 300:
                raise RunError(f"n8n did not come up in 300 s (waiting for {waiting_for}):\n{tail(n8n.log)}")
            if time.monotonic() - last_said >= 15:
                say(f"  ... waiting for {waiting_for} ({time.monotonic() - t0:.0f} s)")
                last_said = time.monotonic()
            time.sleep(1)
        say(f"n8n is ready ({time.monotonic() - t0:.0f} s)")

    def supervise(self, sidecar: Process, n8n: Process, sidecar_port: int, base_url: str, password: str) -> None:
        """Restarts whichever of the two dies, saying what died, how, and when its orders go on.

        Five deaths of one process within five minutes end the run: something is broken, and
        its log says what.
        """
        deaths: dict[str, list[float]] = {"sidecar": [], "n8n": []}
        while True:
            time.sleep(0.5)
            for proc in (sidecar, n8n):
                if proc.alive:
                    continue
                how = how_it_ended(proc)
                now = time.monotonic()
                recent = [t for t in deaths[proc.name] if now - t < 300] + [now]
                deaths[proc.name] = recent
                if len(recent) >= 5:
                    raise RunError(f"{proc.name} {how}, the fifth time in five minutes; stopping. "
                                   f"Its log ({proc.log}):\n{tail(proc.log, 15)}")
                say(f"{proc.name} {how}; starting it again (log: {proc.log})")
                proc.stop()  # what is left of its process group (n8n's task runner)
                proc.start()
                self.leftovers.record(self.processes)
                t0 = time.monotonic()
                if proc is sidecar:
                    wait_sidecar(sidecar_port, sidecar)
                    say(f"the sidecar is back ({time.monotonic() - t0:.0f} s). Calls made while it was down "
                        "waited for it (the credential's deadline) or failed; a failed order resumes at once "
                        "(n8n released it), a failed delivery is sent again by its sender")
                else:
                    self.wait_n8n(n8n, base_url, password)
                    say(f"n8n is back ({time.monotonic() - t0:.0f} s, process {n8n.proc.pid if n8n.proc else '?'}). "
                        "The orders it was running were freed seconds after it died (its session ended) and resume "
                        f"now, each from its last checkpoint; watch them: {self.cli} instances list")

    @staticmethod
    def write_cli(data: Path, sidecar_env: dict[str, str]) -> Path:
        """data/durable-sidecar: the sidecar's CLI with this run's data folder and n8n API access (owner only)."""
        lines = ["#!/bin/sh", "# The sidecar's CLI with this make run's settings (written by make run at each start).",
                 f"export DURABLE_DATA_DIR={shlex.quote(str(data))}"]
        for name in ("DURABLE_N8N_BASE_URL", "DURABLE_N8N_API_KEY"):
            if sidecar_env.get(name):
                lines.append(f'export {name}="${{{name}:-{sidecar_env[name]}}}"')
        lines.append(f'exec {shlex.quote(str(REPO / ".venv/bin/durable-sidecar"))} "$@"')
        path = data / "durable-sidecar"
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o700)
        return path

    def import_examples(self, data: Path, n8n_env: dict[str, str], token: str) -> None:
        """The credential and the example workflows, through n8n's own CLI (first run only)."""
        say("importing the credential and the example workflows into n8n (first run only; ~20 s a command)")
        creds = [{"id": "durableSidecarE2E", "name": "Durable Sidecar", "type": "durableSidecarApi",
                  "data": {"host": "127.0.0.1", "port": self.args.sidecar_port, "tls": False, "token": token}}]
        cred_file = data / "credential.json"
        cred_file.write_text(json.dumps(creds))
        cli_env = {**n8n_env, "N8N_RUNNERS_BROKER_PORT": str(free_port())}
        say("  n8n import:credentials (the first command also creates n8n's database)")
        run_cli(["n8n", "import:credentials", f"--input={cred_file}"], cli_env)
        cred_file.unlink()
        for example in sorted((REPO / "examples").glob("*.json")):
            text = example.read_text().replace("http://127.0.0.1:8099",
                                               f"http://127.0.0.1:{self.args.services_port}")
            wf = json.loads(text)
            local = data / example.name
            local.write_text(text)
            say(f"  n8n import:workflow and publish:workflow: {example.name}")
            run_cli(["n8n", "import:workflow", f"--input={local}"], cli_env)
            run_cli(["n8n", "publish:workflow", f"--id={wf['id']}"], cli_env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default=os.environ.get("DURABLE_RUN_DIR", str(REPO / ".durable-data")))
    parser.add_argument("--n8n-port", type=int, default=int(os.environ.get("N8N_PORT", "5678")))
    parser.add_argument("--sidecar-port", type=int, default=int(os.environ.get("DURABLE_RUN_SIDECAR_PORT", "50051")))
    parser.add_argument("--services-port", type=int, default=int(os.environ.get("DURABLE_RUN_SERVICES_PORT", "8099")),
                        help="port of the demo order services")
    args = parser.parse_args()
    data = Path(args.data_dir).resolve()
    data.mkdir(parents=True, exist_ok=True)
    run = Run(args, data)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, run.on_signal)
    # A write to a closed pipe must raise (say() then turns that stream off), not end the process
    # before it has stopped its children. Python ignores SIGPIPE already; this states it.
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        return run.serve()
    except Stop as sig:
        say(f"{sig}: stopping")
        return 0
    except RunError as exc:
        OUT.write(f"{PREFIX} {exc}", sys.stderr)
        return 1
    finally:
        run.cleanup()


if __name__ == "__main__":
    sys.exit(main())
