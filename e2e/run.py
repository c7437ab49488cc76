"""`make run`: the sidecar and a real n8n with our nodes, the examples and the credential, on one machine.

With no DURABLE_DATABASE_URL the sidecar keeps its state in SQLite under the
data folder and n8n keeps its own in SQLite too, so nothing but Python and
Node.js is needed. Set DURABLE_DATABASE_URL / DURABLE_REDIS_URL to use
PostgreSQL / Redis for the sidecar instead. Ctrl-C stops everything.

Prints `READY` on a line of its own once the order webhook answers (the
automated first-run test waits for it).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness import REPO, Process, free_port, http, n8n_base_env, tail

OWNER_EMAIL = "admin@example.com"


def say(msg: str) -> None:
    print(f"[make run] {msg}", flush=True)


def install_package(user_folder: Path) -> None:
    """Installs the packed node package as a community package (replaced on every run: picks up rebuilds)."""
    tarballs = sorted((REPO / "node-package").glob("n8n-nodes-durable-*.tgz"))
    if not tarballs:
        sys.exit("no node package tarball: run `make node-pack` (make run does)")
    target = user_folder / ".n8n" / "nodes" / "node_modules" / "n8n-nodes-durable"
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tarballs[-1]) as tar:
            tar.extractall(tmp, filter="data")
        shutil.move(str(Path(tmp) / "package"), target)


def wait_sidecar(port: int, proc: Process, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        while time.monotonic() < deadline:
            if not proc.alive:
                sys.exit(f"the sidecar exited:\n{tail(proc.log)}")
            try:
                reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.3)
    sys.exit(f"the sidecar did not become healthy:\n{tail(proc.log)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default=os.environ.get("DURABLE_RUN_DIR", str(REPO / ".durable-data")))
    parser.add_argument("--n8n-port", type=int, default=int(os.environ.get("N8N_PORT", "5678")))
    parser.add_argument("--sidecar-port", type=int, default=int(os.environ.get("DURABLE_RUN_SIDECAR_PORT", "50051")))
    parser.add_argument("--services-port", type=int, default=8099, help="port of the demo order services")
    args = parser.parse_args()
    data = Path(args.data_dir).resolve()
    data.mkdir(parents=True, exist_ok=True)
    secrets_file = data / "run-secrets.json"
    if secrets_file.exists():
        conf = json.loads(secrets_file.read_text())
    else:
        conf = {"token": "run-" + secrets.token_urlsafe(24), "encryption_key": secrets.token_urlsafe(32),
                "password": "Durable-" + secrets.token_urlsafe(9)}
        secrets_file.write_text(json.dumps(conf))
        secrets_file.chmod(0o600)

    # The sidecar: embedded SQLite and in-process cache unless URLs are set.
    sidecar_env = {**os.environ, "DURABLE_AUTH_TOKENS": f"{conf['token']}=default",
                   "DURABLE_LISTEN_ADDRESS": f"127.0.0.1:{args.sidecar_port}",
                   "DURABLE_METRICS_ADDRESS": os.environ.get("DURABLE_METRICS_ADDRESS", "127.0.0.1:9464"),
                   "DURABLE_DATA_DIR": str(data), "DURABLE_LOG_FORMAT": "text",
                   "DURABLE_LEASE_SECONDS": os.environ.get("DURABLE_LEASE_SECONDS", "60")}
    storage = "PostgreSQL" if os.environ.get("DURABLE_DATABASE_URL") else f"SQLite in {data / 'durable.sqlite3'}"
    sidecar = Process("sidecar", [str(REPO / ".venv/bin/durable-sidecar"), "serve"], sidecar_env,
                      data / "sidecar.log")

    # n8n: its own state in SQLite under the data folder, our package, the examples.
    base = n8n_base_env()
    user = data / "n8n"
    user.mkdir(exist_ok=True)
    n8n_env = {**base, "DB_TYPE": "sqlite", "N8N_USER_FOLDER": str(user), "N8N_ENCRYPTION_KEY": conf["encryption_key"],
               "N8N_PORT": str(args.n8n_port), "N8N_RUNNERS_BROKER_PORT": str(free_port()),
               "N8N_WEBHOOK_URL": f"http://127.0.0.1:{args.n8n_port}/", "N8N_LOG_LEVEL": "warn",
               "DB_SQLITE_POOL_SIZE": "2",
               "N8N_INSTANCE_OWNER_MANAGED_BY_ENV": "true", "N8N_INSTANCE_OWNER_EMAIL": OWNER_EMAIL}
    from harness import _bcrypt

    n8n_env["N8N_INSTANCE_OWNER_PASSWORD_HASH"] = _bcrypt(base, conf["password"])
    install_package(user)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    n8n = Process("n8n", ["n8n", "start"], n8n_env, data / "n8n.log")
    # The demo order services the example calls (payment, inventory, shipping, coupon) on :8099.
    from fake_services import FakeServices

    demo: FakeServices | None = None
    try:
        demo = FakeServices(args.services_port).start()
    except OSError:
        say(f"port {args.services_port} is taken: the example workflow calls whatever listens there")
    try:
        say(f"starting the sidecar on 127.0.0.1:{args.sidecar_port} ({storage})")
        sidecar.start()
        wait_sidecar(args.sidecar_port, sidecar)
        marker = user / ".durable-imported"
        if not marker.exists():
            say("importing the credential and the example workflows into n8n (first run only)")
            creds = [{"id": "durableSidecarE2E", "name": "Durable Sidecar", "type": "durableSidecarApi",
                      "data": {"host": "127.0.0.1", "port": args.sidecar_port, "tls": False, "token": conf["token"],
                               "deadlineSeconds": 10}}]
            cred_file = data / "credential.json"
            cred_file.write_text(json.dumps(creds))
            cli_env = {**n8n_env, "N8N_RUNNERS_BROKER_PORT": str(free_port())}
            import subprocess

            def cli(*argv: str) -> None:
                out = subprocess.run(["n8n", *argv], env=cli_env, capture_output=True, text=True, timeout=300)
                if out.returncode != 0:
                    sys.exit(f"n8n {' '.join(argv)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")

            cli("import:credentials", f"--input={cred_file}")
            cred_file.unlink()
            for example in sorted((REPO / "examples").glob("*.json")):
                text = example.read_text().replace("http://127.0.0.1:8099", f"http://127.0.0.1:{args.services_port}")
                wf = json.loads(text)
                local = data / example.name
                local.write_text(text)
                cli("import:workflow", f"--input={local}")
                cli("publish:workflow", f"--id={wf['id']}")
            marker.write_text(time.strftime("%F %T"))
        say(f"starting n8n {base.get('N8N_E2E_VERSION', '')} on http://127.0.0.1:{args.n8n_port} (10-30 s)")
        n8n.start()
        deadline = time.monotonic() + 300
        while not stopping:
            if not n8n.alive:
                sys.exit(f"n8n exited:\n{tail(n8n.log)}")
            status, _ = http("POST", f"http://127.0.0.1:{args.n8n_port}/webhook/orders", {"probe": True}, timeout=5)
            if status == 200:
                break
            if time.monotonic() > deadline:
                sys.exit(f"n8n did not come up in 300 s:\n{tail(n8n.log)}")
            time.sleep(1)
        if not stopping:
            print(f"""
  n8n            http://127.0.0.1:{args.n8n_port}   (log in: {OWNER_EMAIL} / {conf['password']})
  sidecar        127.0.0.1:{args.sidecar_port} ({storage}); token in {secrets_file}
  metrics        http://{sidecar_env['DURABLE_METRICS_ADDRESS']}/metrics

  Open the workflow "Order tracking (durable)"; it is published. Post an order:
    curl -X POST http://127.0.0.1:{args.n8n_port}/webhook/orders -H 'Content-Type: application/json' \\
         -d '{{"orderId": "A-1001", "amount": 42, "email": "ann@example.com"}}'
  and look at it:   .venv/bin/durable-sidecar instances show durableOrderTracking A-1001
  Demo order services (payment, inventory, shipping, coupon) answer on http://127.0.0.1:{args.services_port}
  (GET /stats shows every call); point the example's Call nodes at your own services.

  Ctrl-C stops everything. Logs: {data}/sidecar.log, {data}/n8n.log
READY""", flush=True)
        while not stopping and n8n.alive and sidecar.alive:
            time.sleep(0.5)
        if not stopping:
            failed = n8n if not n8n.alive else sidecar
            say(f"{failed.name} exited unexpectedly:\n{tail(failed.log)}")
            return 1
        return 0
    finally:
        say("stopping n8n and the sidecar")
        n8n.stop()
        sidecar.stop()
        if demo is not None:
            demo.stop()
        say("stopped")


if __name__ == "__main__":
    sys.exit(main())
