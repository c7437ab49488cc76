"""Static checks of deploy/patroni (the Patroni example): CI runs no Docker engine.

The compose file is read and interpolated with deploy/durable.env as
tests/compose_stack.py does; patroni.yml goes through `patroni --validate-config`
when Patroni is installed (`make ha-setup`); the sidecars' multi-host URL goes
through the sidecar's own settings and libpq's conninfo parser.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from durable_sidecar.settings import Settings

from tests.compose_stack import environment, image_tag, interpolate, read_env_file
from tests.sidecar.helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "deploy" / "patroni"
COMPOSE_FILE = EXAMPLE / "docker-compose.yml"
PATRONI_CONFIG = EXAMPLE / "patroni.yml"
NODES = ("pg1", "pg2", "pg3")


@pytest.fixture(scope="module")
def compose(filled_env: Path) -> dict[str, Any]:
    env, _ = read_env_file(filled_env)
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    return dict(interpolate(data, env))


def test_example_has_etcd_three_patroni_nodes_and_two_sidecars(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"etcd1", "etcd2", "etcd3", *NODES, "sidecar-a", "sidecar-b"}
    for name, service in compose["services"].items():
        _, tag = image_tag(service["image"])
        assert re.match(r"^v?\d+\.\d+(\.\d+)*$", tag), f"{name}: image {service['image']} is not pinned"
    for name in NODES:
        env = environment(compose["services"][name])
        assert env["PATRONI_NAME"] == name
        assert env["PATRONI_POSTGRESQL_CONNECT_ADDRESS"] == f"{name}:5432"
        build = compose["services"][name]["build"]
        dockerfile = EXAMPLE / build["context"] / build["dockerfile"]
        copied = re.findall(r"^COPY (\S+)", dockerfile.read_text(), re.M)
        assert copied and all((EXAMPLE / build["context"] / c).exists() for c in copied), copied


def test_sidecars_use_a_multi_host_url_that_only_reaches_the_primary(compose: dict[str, Any]) -> None:
    urls = {environment(compose["services"][s])["DURABLE_DATABASE_URL"] for s in ("sidecar-a", "sidecar-b")}
    assert len(urls) == 1
    url = urls.pop()
    info = psycopg.conninfo.conninfo_to_dict(url)
    assert info["host"] == ",".join(NODES) and info["target_session_attrs"] == "read-write"
    env = environment(compose["services"]["sidecar-a"])
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("DURABLE_")})
    assert settings.database_url == url and not settings.embedded
    published = {s: compose["services"][s]["ports"] for s in ("sidecar-a", "sidecar-b")}
    assert published["sidecar-a"] != published["sidecar-b"]


def test_patroni_config_is_synchronous_with_consistent_timeouts() -> None:
    config = yaml.safe_load(PATRONI_CONFIG.read_text())
    dcs = config["bootstrap"]["dcs"]
    assert dcs["synchronous_mode"] is True and dcs["synchronous_mode_strict"] is False
    assert dcs["maximum_lag_on_failover"] > 0
    assert dcs["loop_wait"] + 2 * dcs["retry_timeout"] <= dcs["ttl"], "Patroni's rule for its timeouts"
    assert (EXAMPLE / Path(config["bootstrap"]["post_bootstrap"]).name).exists()
    assert os.access(EXAMPLE / "post-bootstrap.sh", os.X_OK)


def test_patroni_validates_the_example_config(tmp_path: Path) -> None:
    # make test installs Debian's patroni first (make ha-setup): a missing one fails, never skips.
    assert shutil.which("patroni"), "patroni is not installed: run make ha-setup (make test does)"
    # The validator also checks this machine (binaries in bin_dir, free ports, etcd names that
    # resolve): only those settings are pointed at this machine, the rest is validated as shipped.
    config = yaml.safe_load(PATRONI_CONFIG.read_text())
    config["postgresql"]["bin_dir"] = os.environ.get("DURABLE_TEST_PG_BIN", "/usr/lib/postgresql/15/bin")
    config["postgresql"]["data_dir"] = str(tmp_path / "data")
    config["postgresql"]["listen"] = f"127.0.0.1:{free_port()}"
    config["restapi"]["listen"] = f"127.0.0.1:{free_port()}"
    # The validator only checks that an etcd address accepts TCP connections: a listening socket does.
    etcd = socket.create_server(("127.0.0.1", 0))
    config["etcd3"]["hosts"] = f"127.0.0.1:{etcd.getsockname()[1]}"
    path = tmp_path / "patroni.yml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PATRONI_NAME": "pg1", "PATRONI_RESTAPI_CONNECT_ADDRESS": "pg1:8008",
           "PATRONI_POSTGRESQL_CONNECT_ADDRESS": "pg1:5432", "PATRONI_SUPERUSER_PASSWORD": "x",
           "PATRONI_REPLICATION_PASSWORD": "x", "PATRONI_REWIND_PASSWORD": "x"}
    with etcd:
        out = subprocess.run(["patroni", "--validate-config", str(path)], env=env, capture_output=True, text=True,
                             timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
