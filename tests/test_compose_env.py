"""Static checks of deploy/durable.env.example and deploy/make-env.sh, and of docker-compose.yml against the Compose schema.

When a Compose v2 client is on the machine (`docker compose` or a v2
`docker-compose`), `config -q` validates the file against the Compose schema
too; without one that check says so in the warnings summary instead of passing
silently.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import warnings
from pathlib import Path

import pytest

from tests.compose_stack import (
    COMPOSE_FILE,
    ENV_EXAMPLE,
    ENV_FILE,
    MAKE_ENV,
    ROOT,
    interpolate,
    raw_compose,
    read_env_file,
)

# --- the env file -------------------------------------------------------------------------


def test_env_example_sets_exactly_the_variables_compose_interpolates() -> None:
    seen: dict[str, str] = {}
    example, required = read_env_file(ENV_EXAMPLE)
    interpolate(raw_compose(), {k: v or "x" for k, v in example.items()}, seen)
    assert set(seen) == set(example), (
        f"interpolated but not in {ENV_EXAMPLE.name}: {sorted(set(seen) - set(example))}; "
        f"in {ENV_EXAMPLE.name} but unused: {sorted(set(example) - set(seen))}")
    must_have = {name for name, op in seen.items() if op in (":?", "?")}
    assert must_have == required, f"the required section of {ENV_EXAMPLE.name} must list exactly {sorted(must_have)}"
    assert all(example[name] == "" for name in required), "secrets in the example stay empty: compose refuses to start until set"
    for name, op in seen.items():
        assert op in (":?", ":-"), f"${{{name}}} needs a default (:-) or a message (:?), got {op!r}"
    assert re.search(rf"--env-file {ENV_FILE}", COMPOSE_FILE.read_text()), "docker-compose.yml must say how to pass the env file"
    gitignored = [line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()]
    assert ENV_FILE in gitignored or "/" + ENV_FILE in gitignored, f"{ENV_FILE} holds secrets: .gitignore must list it"


def test_compose_refuses_to_start_without_the_secrets() -> None:
    example, required = read_env_file(ENV_EXAMPLE)
    for name in sorted(required):
        with pytest.raises(KeyError, match=rf"{name} is missing a value: .*--env-file {ENV_FILE}"):
            interpolate(raw_compose(), {**{k: v or "x" for k, v in example.items()}, name: ""})


def test_make_env_fills_every_secret_once_and_never_overwrites(filled_env: Path) -> None:
    example, required = read_env_file(ENV_EXAMPLE)
    values, _ = read_env_file(filled_env)
    assert set(values) == set(example)
    for name in required:
        assert re.fullmatch(r"[0-9a-f]{64}", values[name]), f"{name} was not given a random secret"
    assert len({values[name] for name in required}) == len(required), "every secret is drawn on its own"
    assert {k: v for k, v in values.items() if k not in required} == {k: v for k, v in example.items() if k not in required}
    assert stat.S_IMODE(filled_env.stat().st_mode) == 0o600, "the env file holds secrets: mode 600"
    assert MAKE_ENV.stat().st_mode & stat.S_IXUSR, "the README runs deploy/make-env.sh directly: keep it executable"
    again = subprocess.run(["/bin/sh", str(MAKE_ENV), str(filled_env)], capture_output=True, text=True, timeout=30)
    assert again.returncode != 0 and "exists" in again.stderr
    assert read_env_file(filled_env)[0] == values, "a second run must leave the secrets alone"


# --- the Compose schema, when a Compose v2 client is here ---------------------------------------


def compose_client() -> tuple[list[str], str] | None:
    """`docker compose` (the plugin) or a v2 `docker-compose`, with its version; None when neither works."""
    for argv in (["docker", "compose"], ["docker-compose"]):
        if not shutil.which(argv[0]):
            continue
        try:
            run = subprocess.run([*argv, "version", "--short"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        version = run.stdout.strip().lstrip("v")
        if run.returncode == 0 and version.startswith("2."):
            return argv, version
    return None


def test_compose_schema_accepts_the_file(filled_env: Path, example_env_copy: Path) -> None:
    client = compose_client()
    if client is None:
        docker = "the docker client has no compose plugin" if shutil.which("docker") else "no docker client"
        warnings.warn(f"docker-compose.yml: Compose schema NOT validated ({docker}, no v2 docker-compose); "
                      "only the PyYAML checks of tests/test_compose.py ran", UserWarning, stacklevel=1)
        return
    argv, version = client
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "DOCKER_CONFIG")}
    run = subprocess.run([*argv, "-f", str(COMPOSE_FILE), "--env-file", str(filled_env), "config", "-q"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"`{' '.join(argv)} config` ({version}) rejects docker-compose.yml:\n{run.stderr}"
    refused = subprocess.run([*argv, "-f", str(COMPOSE_FILE), "--env-file", str(example_env_copy), "config", "-q"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and f"--env-file {ENV_FILE}" in refused.stderr, (
        f"with the example's empty secrets compose must refuse, naming the env file:\n{refused.stderr}")
    print(f"docker-compose.yml: Compose schema validated by {' '.join(argv)} {version}")


@pytest.fixture
def example_env_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "durable.env.example"
    shutil.copy(ENV_EXAMPLE, copy)
    return copy
