"""The end-to-end harness: a real n8n (pinned, Node 24), our node package, the real sidecar, PostgreSQL, Redis.

Everything it starts it stops, also on failure. Processes log to files under
the run's work folder; a failure prints the tail of each log.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import psycopg
from durable.v1 import (
    checkpoint_pb2,
    checkpoint_pb2_grpc,
    common_pb2,
    instance_pb2,
    instance_pb2_grpc,
    version_pb2,
    version_pb2_grpc,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ports import free_port

REPO = Path(__file__).resolve().parents[1]
ADMIN_URL = os.environ.get("DURABLE_E2E_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
TOKEN = "e2e-token-" + uuid.uuid4().hex[:8]
# A second token of the same namespace with the read role (the console's role test logs in with it).
READ_TOKEN = "e2e-reader-" + uuid.uuid4().hex[:8]
NAMESPACE = "e2e"
CREDENTIAL_ID = "durableSidecarE2E"
OWNER_EMAIL = "owner@example.com"
OWNER_PASSWORD = "E2e-Passw0rd!"


def create_db(prefix: str) -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_db(name: str) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def db_url(name: str) -> str:
    return ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def n8n_base_env() -> dict[str, str]:
    """The environment e2e/n8n-env.sh builds (Node 24 first on PATH, offline, PostgreSQL)."""
    out = subprocess.run(["bash", "-c", f"source {REPO}/e2e/n8n-env.sh >/dev/null && env -0"], check=True,
                         capture_output=True)
    env = {}
    for entry in out.stdout.split(b"\0"):
        if b"=" in entry:
            k, _, v = entry.partition(b"=")
            env[k.decode()] = v.decode()
    return env


def _bcrypt(env: dict[str, str], password: str) -> str:
    """n8n wants the owner password as a bcrypt hash; n8n's own bcryptjs makes it."""
    out = subprocess.run(["node", "-e", "console.log(require('bcryptjs').hashSync(process.argv[1], 10))", password],
                         env=env, cwd=env["N8N_E2E_APP_DIR"], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def install_node_package(nodes_dir: Path, tarball: Path, env: dict[str, str] | None = None) -> None:
    """`cd ~/.n8n/nodes && npm install --legacy-peer-deps <tarball>`, as README tells a self-hosted user.

    The folder gets the package.json n8n itself writes there. --legacy-peer-deps: the package's one
    peer dependency (n8n-workflow) is n8n's own copy, which n8n provides when it loads the package;
    a second copy installed beside it is what n8n's own installer avoids too (it drops peer
    dependencies). The package has no dependencies, so this needs no network.
    """
    nodes_dir.mkdir(parents=True, exist_ok=True)
    manifest = nodes_dir / "package.json"
    if not manifest.exists():
        manifest.write_text(json.dumps({"name": "installed-nodes", "private": True, "dependencies": {}}, indent=2))
    out = subprocess.run(["npm", "install", "--legacy-peer-deps", "--no-audit", "--no-fund",
                          "--no-update-notifier", str(tarball)],
                         cwd=nodes_dir, env=env or dict(os.environ), capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"npm install {tarball} in {nodes_dir} failed ({out.returncode}):\n{out.stdout[-2000:]}\n"
                           f"{out.stderr[-2000:]}")


def tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"({path} missing)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class Process:
    """A child process with a log file; killed with its whole process group."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> None:
        self.name, self.argv, self.env, self.log, self.cwd = name, argv, env, log, cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        fh = open(self.log, "ab")
        fh.write(f"\n==== start {time.strftime('%H:%M:%S')} ====\n".encode())
        fh.flush()
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=fh, stderr=subprocess.STDOUT, cwd=self.cwd,
                                     start_new_session=True)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM to the whole group, SIGKILL after `timeout`; also ends a group whose leader died alone."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
        # Children of the leader (n8n's task runner) that outlived it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def create_api_key(base_url: str, opener: urllib.request.OpenerDirector, label: str) -> str:
    """An n8n public-API key with every scope for the user `opener` is logged in as (n8n's REST API, as *Settings
    → n8n API → Create an API key* makes one)."""
    def call(method: str, path: str, body: Any = None) -> Any:
        req = urllib.request.Request(f"{base_url}/rest{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with opener.open(req, timeout=30) as resp:
            return json.loads(resp.read())["data"]

    scopes = call("GET", "/api-keys/scopes")
    made = call("POST", "/api-keys", {"label": label, "scopes": scopes, "expiresAt": None})
    return str(made["rawApiKey"])


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
         timeout: float = 10) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc).encode()


class Sidecar:
    """`durable-sidecar serve` on a fixed port (so a restart is found again), on its own database."""

    def __init__(self, work: Path, database: str, *, console_n8n_url: str = "") -> None:
        self.port = free_port()
        # The HTTP/JSON face and the web console on it (e2e/test_console_browser.py, test_http_request_node.py).
        self.http_port = free_port()
        self.http_url = f"http://127.0.0.1:{self.http_port}"
        self.database = database
        env = {**os.environ,
               "DURABLE_DATABASE_URL": db_url(database),
               "DURABLE_REDIS_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/0",
               "DURABLE_LISTEN_ADDRESS": f"127.0.0.1:{self.port}",
               "DURABLE_METRICS_ADDRESS": "",
               "DURABLE_AUTH_TOKENS": f"{TOKEN}={NAMESPACE},{READ_TOKEN}={NAMESPACE}:read",
               "DURABLE_HTTP_LISTEN_ADDRESS": f"127.0.0.1:{self.http_port}",
               "DURABLE_CONSOLE_ENABLED": "true",
               "DURABLE_CONSOLE_N8N_URL": console_n8n_url,
               "DURABLE_LOG_FORMAT": "text"}
        self.base_env = env
        self.command = os.environ.get("DURABLE_E2E_SIDECAR", str(REPO / ".venv/bin/durable-sidecar"))
        self.process = Process("sidecar", [self.command, "serve"], env,
                               work / "sidecar.log")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}",
                                             options=[("grpc.use_local_subchannel_pool", 1)])
        self.instances = instance_pb2_grpc.InstanceServiceStub(self.channel)
        self.checkpoints = checkpoint_pb2_grpc.CheckpointServiceStub(self.channel)
        self.versions = version_pb2_grpc.VersionServiceStub(self.channel)
        self.md = (("authorization", f"Bearer {TOKEN}"),)

    def reconfigure(self, extra_env: dict[str, str]) -> None:
        """Restarts the sidecar (SIGTERM, drained) with these settings on top of the harness's own."""
        self.process.stop()
        self.process.env = {**self.base_env, **extra_env}
        self.start()

    def cli(self, *args: str) -> str:
        """`durable-sidecar ARGS` on this sidecar's database and settings, as an operator runs it."""
        out = subprocess.run([self.command, *args], env=self.process.env, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"durable-sidecar {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n"
                               f"{out.stderr}")
        return out.stdout

    def current_version(self, workflow_id: str) -> int:
        try:
            reply = self.versions.GetVersion(version_pb2.GetVersionRequest(workflow_id=workflow_id),
                                             metadata=self.md, timeout=5)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                return 0
            raise
        return int(reply.version.version)

    def change_log(self, workflow_id: str) -> list[version_pb2.ChangeLogEntry]:
        reply = self.versions.ListChangeLog(version_pb2.ListChangeLogRequest(workflow_id=workflow_id,
                                                                             page_size=1000),
                                            metadata=self.md, timeout=5)
        return list(reply.entries)

    def start(self) -> None:
        self.process.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.alive, f"sidecar exited:\n{tail(self.process.log)}"
            with contextlib.suppress(grpc.RpcError):
                reply = health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"sidecar not healthy in 60 s:\n{tail(self.process.log)}")

    def instance(self, workflow_id: str, key: str) -> common_pb2.Instance | None:
        try:
            return self.instances.GetInstance(instance_pb2.GetInstanceRequest(workflow_id=workflow_id,
                                                                              instance_key=key),
                                              metadata=self.md, timeout=5).instance
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                return None
            raise

    def trail(self, workflow_id: str, key: str) -> list[str]:
        reply = self.checkpoints.ListCheckpoints(checkpoint_pb2.ListCheckpointsRequest(
            workflow_id=workflow_id, instance_key=key, page_size=1000), metadata=self.md, timeout=5)
        return [c.step_name for c in reply.checkpoints]

    def latest_state(self, workflow_id: str, key: str) -> dict[str, Any]:
        """The state of the instance's newest checkpoint ({} when it has none)."""
        reply = self.checkpoints.ListCheckpoints(checkpoint_pb2.ListCheckpointsRequest(
            workflow_id=workflow_id, instance_key=key, page_size=1000, include_state=True), metadata=self.md, timeout=5)
        if not reply.checkpoints:
            return {}
        return dict(json.loads(reply.checkpoints[-1].state_json or b"{}"))

    def count_instances(self, workflow_id: str, key: str) -> int:
        with psycopg.connect(db_url(self.database)) as conn:
            row = conn.execute("SELECT count(*) FROM durable_instances WHERE workflow_id = %s AND instance_key = %s",
                               (workflow_id, key)).fetchone()
            return int(row[0]) if row else 0

    def close(self) -> None:
        self.channel.close()
        self.process.stop()


class N8n:
    """One n8n installation state (user folder, database, encryption key) and its processes."""

    def __init__(self, work: Path, database: str, package_dir: Path, *, extra_env: dict[str, str] | None = None):
        self.work = work
        self.port = free_port()
        self.user_folder = work / "n8n-user"
        self.user_folder.mkdir(parents=True, exist_ok=True)
        self.database = database
        base = n8n_base_env()
        self.env = {
            **base,
            "N8N_USER_FOLDER": str(self.user_folder),
            "N8N_ENCRYPTION_KEY": "e2e-" + uuid.uuid4().hex,
            "DB_POSTGRESDB_DATABASE": database,
            "N8N_PORT": str(self.port),
            "N8N_RUNNERS_BROKER_PORT": str(free_port()),
            "N8N_WEBHOOK_URL": f"http://127.0.0.1:{self.port}/",
            "N8N_LOG_LEVEL": "warn",
            "EXECUTIONS_DATA_PRUNE": "false",
            "N8N_COMMUNITY_PACKAGES_ENABLED": "true",
            "N8N_BLOCK_ENV_ACCESS_IN_NODE": "false",
            # An owner from the environment, so the REST API can be used to look at what loaded.
            "N8N_INSTANCE_OWNER_MANAGED_BY_ENV": "true",
            "N8N_INSTANCE_OWNER_EMAIL": OWNER_EMAIL,
            "N8N_INSTANCE_OWNER_PASSWORD_HASH": _bcrypt(base, OWNER_PASSWORD),
            **(extra_env or {}),
        }
        self.processes: list[Process] = []
        # Install our package the way README documents for self-hosted n8n: npm install of the
        # packed tarball in <N8N_USER_FOLDER>/.n8n/nodes (the ~/.n8n/nodes of this n8n).
        tarballs = sorted(package_dir.glob("n8n-nodes-durable-*.tgz"))
        assert tarballs, f"no packed tarball in {package_dir}: run make node-pack"
        install_node_package(self.user_folder / ".n8n" / "nodes", tarballs[-1], base)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cli(self, *args: str, timeout: float = 180) -> str:
        env = {**self.env, "N8N_RUNNERS_BROKER_PORT": str(free_port())}
        out = subprocess.run(["n8n", *args], env=env, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"n8n {' '.join(args)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n"
                               f"{out.stderr[-3000:]}")
        return out.stdout

    def process(self, role: str = "main", env: dict[str, str] | None = None) -> Process:
        argv = ["n8n", "start"] if role == "main" else ["n8n", role]
        proc_env = {**self.env, **(env or {})}
        if role != "main":
            proc_env["N8N_RUNNERS_BROKER_PORT"] = str(free_port())
        p = Process(f"n8n-{role}-{len(self.processes)}", argv, proc_env, self.work / f"n8n-{role}-{len(self.processes)}.log")
        self.processes.append(p)
        return p

    def start_main(self) -> Process:
        p = self.process("main")
        p.start()
        self.wait_ready(p)
        return p

    def wait_ready(self, p: Process, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert p.alive, f"n8n exited:\n{tail(p.log)}"
            status, _ = http("GET", f"{self.url}/healthz/readiness", timeout=2)
            if status == 200:
                return
            time.sleep(0.5)
        raise RuntimeError(f"n8n not ready in {timeout} s:\n{tail(p.log)}")

    def wait_webhook(self, path: str, timeout: float = 60, method: str = "POST") -> None:
        """Polls until the production webhook is registered, without starting an execution.

        An OPTIONS request with an Origin: n8n answers 204 from its webhook registry and lists the
        registered methods in Access-Control-Allow-Methods (a POST would run the workflow, and a
        probe body would fail at the Resume Point).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            req = urllib.request.Request(f"{self.url}/webhook/{path}", method="OPTIONS", headers={"Origin": self.url})
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(req, timeout=5) as resp:
                    allowed = {m.strip() for m in resp.headers.get("Access-Control-Allow-Methods", "").split(",")}
                    if resp.status == 204 and method in allowed:
                        return
            time.sleep(0.5)
        raise RuntimeError(f"webhook {path} not registered in {timeout} s")

    def rest_session(self) -> urllib.request.OpenerDirector:
        """An opener logged in as the owner (cookie auth), for n8n's internal REST API."""
        import http.cookiejar

        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        req = urllib.request.Request(f"{self.url}/rest/login", method="POST",
                                     data=json.dumps({"emailOrLdapLoginId": OWNER_EMAIL,
                                                      "password": OWNER_PASSWORD}).encode(),
                                     headers={"Content-Type": "application/json"})
        with opener.open(req, timeout=30) as resp:
            assert resp.status == 200
        return opener

    def create_api_key(self, label: str) -> str:
        """An n8n public-API key for the owner, made as *Settings → n8n API → Create an API key* does."""
        return create_api_key(self.url, self.rest_session(), label)

    def update_workflow(self, api_key: str, workflow: dict[str, Any]) -> dict[str, Any]:
        """Saves a changed workflow through n8n's public API; a published workflow is re-published with it.

        (n8n 2.41's `publish:workflow` CLI only moves the workflow's activeVersionId: webhooks keep
        running the version the publication service recorded, so a change must go through the API.)
        """
        body = {k: workflow[k] for k in ("name", "nodes", "connections", "settings")}
        status, reply = http("PUT", f"{self.url}/api/v1/workflows/{workflow['id']}", body,
                             headers={"X-N8N-API-KEY": api_key}, timeout=60)
        if status != 200:
            raise RuntimeError(f"PUT workflow {workflow['id']}: HTTP {status}: {reply[:2000]!r}")
        return dict(json.loads(reply))

    def execution(self, api_key: str, execution_id: str) -> dict[str, Any]:
        """One execution with its data (every node's output items), through n8n's public API."""
        status, reply = http("GET", f"{self.url}/api/v1/executions/{execution_id}?includeData=true",
                             headers={"X-N8N-API-KEY": api_key}, timeout=60)
        if status != 200:
            raise RuntimeError(f"GET execution {execution_id}: HTTP {status}: {reply[:2000]!r}")
        return dict(json.loads(reply))

    def wait_published(self, workflow_id: str, version_id: str, timeout: float = 60) -> None:
        """Waits until n8n's publication service serves `version_id` to webhooks and triggers.

        n8n 2.41 applies a publication asynchronously (an outbox in its database); the public API
        already reports the new activeVersionId while webhooks still run the previous version.
        """
        def live() -> bool:
            with psycopg.connect(db_url(self.database)) as conn:
                row = conn.execute('SELECT "publishedVersionId" FROM workflow_published_version '
                                   'WHERE "workflowId" = %s', (workflow_id,)).fetchone()
            return row is not None and row[0] == version_id

        wait_until(f"n8n to publish version {version_id} of {workflow_id}", live, timeout, interval=0.2)

    def stop_all(self) -> None:
        for p in self.processes:
            p.stop()


def import_workflow(n8n: N8n, source: Path, replacements: dict[str, str], publish: bool = True) -> dict[str, Any]:
    """Imports an example workflow (with the run's URLs substituted) and publishes it."""
    text = source.read_text()
    for old, new in replacements.items():
        text = text.replace(old, new)
    workflow = json.loads(text)
    publish_workflow(n8n, workflow, publish=publish, filename=source.name)
    return dict(workflow)


def publish_workflow(n8n: N8n, workflow: dict[str, Any], publish: bool = True, filename: str = "") -> None:
    """Imports a workflow with n8n's CLI and publishes it (a running n8n's reconciler activates it)."""
    path = n8n.work / (filename or f"{workflow['id']}.json")
    path.write_text(json.dumps(workflow))
    n8n.cli("import:workflow", f"--input={path}")
    if publish:
        n8n.cli("publish:workflow", f"--id={workflow['id']}")


def import_credential(n8n: N8n, sidecar: Sidecar, deadline_seconds: int = 10,
                      credential_id: str = CREDENTIAL_ID) -> None:
    creds = [{
        "id": credential_id, "type": "durableSidecarApi",
        "name": "Durable Sidecar (e2e)" if credential_id == CREDENTIAL_ID else credential_id,
        "data": {"host": "127.0.0.1", "port": sidecar.port, "tls": False, "token": TOKEN,
                 "deadlineSeconds": deadline_seconds},
    }]
    path = n8n.work / "credentials.json"
    path.write_text(json.dumps(creds))
    n8n.cli("import:credentials", f"--input={path}")


def wait_until(what: str, predicate: Any, timeout: float, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@contextlib.contextmanager
def work_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="durable-e2e-"))
    try:
        yield path
    finally:
        if os.environ.get("DURABLE_E2E_KEEP") != "1":
            shutil.rmtree(path, ignore_errors=True)
