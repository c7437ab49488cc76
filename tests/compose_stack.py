"""The Docker Compose stack's files as the tests/test_compose*.py checks read them (CI runs no Docker engine).

The compose file is parsed with PyYAML and interpolated here with the values of
deploy/durable.env.example (its empty secrets filled in by deploy/make-env.sh),
the way `docker compose --env-file` does. The fixtures `filled_env` and
`compose` reach every test through tests/conftest.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "sidecar" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
ENV_EXAMPLE = ROOT / "deploy" / "durable.env.example"
ENV_FILE = "deploy/durable.env"
MAKE_ENV = ROOT / "deploy" / "make-env.sh"
IMPORT_SCRIPT = ROOT / "deploy" / "n8n-import.sh"
POSTGRES_INIT = ROOT / "deploy" / "postgres-init"
CREDENTIAL_SOURCE = ROOT / "node-package" / "credentials" / "DurableSidecarApi.credentials.ts"

N8N_IMAGE = "docker.n8n.io/n8nio/n8n:2.41.1"
SERVICES = {"postgres", "redis", "sidecar", "n8n-import", "n8n", "prometheus", "grafana"}
# Started only with `docker compose --profile monitoring`.
MONITORING = {"prometheus", "grafana"}
LONG_RUNNING = SERVICES - {"n8n-import"}
# Host paths that a documented make target produces (not in a fresh clone): path -> target.
BUILT_PATHS = {"node-package/dist": "node-build"}
CREDENTIAL_TYPE = "durableSidecarApi"

_INTERPOLATION = re.compile(r"\$\$|\$\{(?P<braced>[^}]*)\}|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)")
_BRACED = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:-|-|:\?|\?|:\+|\+)(?P<arg>.*))?$", re.S)


# --- reading the files ----------------------------------------------------------


def read_env_file(path: Path) -> tuple[dict[str, str], set[str]]:
    """KEY=VALUE lines of an env file, and the keys of its `# --- required` section."""
    values: dict[str, str] = {}
    required: set[str] = set()
    section = ""
    for line in path.read_text().splitlines():
        if line.startswith("# --- "):
            section = line[len("# --- "):].split()[0]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not a KEY=VALUE line: {line!r}"
        assert key not in values, f"{path.name}: {key} is set twice"
        values[key] = value
        if section == "required":
            required.add(key)
    return values, required


def interpolate(value: Any, env: dict[str, str], seen: dict[str, str] | None = None) -> Any:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR:?message} and $$ in every string; `seen` collects VAR -> operator."""
    if isinstance(value, dict):
        return {k: interpolate(v, env, seen) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, seen) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        if match.group("bare"):
            name, op, arg = match.group("bare"), "", ""
        else:
            parsed = _BRACED.match(match.group("braced"))
            assert parsed, f"docker-compose.yml: cannot read the interpolation {match.group(0)!r}"
            name, op, arg = parsed.group("name"), parsed.group("op") or "", parsed.group("arg") or ""
        if seen is not None:
            seen[name] = seen.get(name) or op
        current = env.get(name)
        if op in (":?", "?") and (current is None or (op == ":?" and current == "")):
            raise KeyError(f"required variable {name} is missing a value: {arg}")
        if op == ":-" and not current:
            return str(interpolate(arg, env, seen))
        if op == "-" and current is None:
            return str(interpolate(arg, env, seen))
        if op in (":+", "+"):
            return str(interpolate(arg, env, seen)) if (current if op == ":+" else current is not None) else ""
        return current or ""

    return _INTERPOLATION.sub(one, value)


def raw_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict), "docker-compose.yml is not a mapping"
    return data


@pytest.fixture(scope="module")
def filled_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """deploy/durable.env as deploy/make-env.sh writes it from the example (fresh secrets)."""
    out = tmp_path_factory.mktemp("env") / "durable.env"
    run = subprocess.run(["/bin/sh", str(MAKE_ENV), str(out)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, f"deploy/make-env.sh failed:\n{run.stdout}{run.stderr}"
    return out


@pytest.fixture(scope="module")
def compose(filled_env: Path) -> dict[str, Any]:
    """docker-compose.yml interpolated with the filled env file, as compose would see it."""
    env, _ = read_env_file(filled_env)
    return interpolate(raw_compose(), env)


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def volume_mounts(service: dict[str, Any]) -> list[dict[str, Any]]:
    """Every volume entry in the long form: type, source, target, read_only."""
    mounts = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            mounts.append({"read_only": False, **entry})
            continue
        parts = entry.split(":")
        source, target = parts[0], parts[1]
        kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        mounts.append({"type": kind, "source": source, "target": target, "read_only": "ro" in parts[2:]})
    return mounts


def published_ports(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(host ip, host port, container port) of every published port (short syntax)."""
    out = []
    for entry in service.get("ports") or []:
        assert isinstance(entry, str), f"use the short port syntax, not {entry!r}"
        parts = entry.split(":")
        if len(parts) == 3:
            out.append((parts[0], parts[1], parts[2]))
        elif len(parts) == 2:
            out.append(("0.0.0.0", parts[0], parts[1]))
        else:
            out.append(("0.0.0.0", "", parts[0]))
    return out


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined; comment lines dropped, as Docker does."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip():
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def dockerfile_env() -> dict[str, str]:
    """The image's ENV settings (KEY=VALUE form, unquoted values)."""
    env: dict[str, str] = {}
    for word, rest in dockerfile_instructions():
        if word == "ENV":
            env.update(dict(pair.partition("=")[::2] for pair in rest.split()))
    return env


def pyproject_version() -> str:
    match = re.search(r'^version = "([^"]+)"', (ROOT / "sidecar" / "pyproject.toml").read_text(), re.M)
    assert match, "sidecar/pyproject.toml has no version"
    return match.group(1)


def image_tag(image: str) -> tuple[str, str]:
    """(repository, tag) of an image reference; the tag is '' when there is none."""
    name = image.partition("@")[0]
    repo, sep, tag = name.rpartition(":")
    if not sep or "/" in tag:
        return name, ""
    return repo, tag

