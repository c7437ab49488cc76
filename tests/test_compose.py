"""Static checks of the Docker Compose stack (docker-compose.yml, sidecar/Dockerfile, deploy/): CI runs no Docker engine.

The compose file is parsed with PyYAML and interpolated here with the values of
deploy/durable.env.example (its empty secrets filled in by deploy/make-env.sh),
the way `docker compose --env-file` does. When a Compose v2 client is on the
machine (`docker compose` or a v2 `docker-compose`), `config -q` validates the
file against the Compose schema too; without one that check says so in the
warnings summary instead of passing silently. The shell scripts of deploy/ run
for real, with a stand-in `n8n` command.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from durable_sidecar.settings import Settings

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

# `VERSION` of an image tag: numbers with dots (at least major.minor), an optional -variant.
_PINNED_TAG = re.compile(r"^v?\d+\.\d+(\.\d+)*(-[a-z0-9.]+)*$")
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


# --- the services and their images ------------------------------------------------------


def test_compose_file_declares_the_stacks_services(compose: dict[str, Any]) -> None:
    missing = SERVICES - set(services(compose))
    extra = set(services(compose)) - SERVICES
    assert not missing, f"docker-compose.yml lacks the services {sorted(missing)}"
    assert not extra, f"docker-compose.yml has services this test does not know: {sorted(extra)}; add them to SERVICES"
    assert compose.get("name") == "durable-n8n", "set the project name, so volume names do not depend on the folder"


def test_every_image_is_pinned_to_an_exact_version(compose: dict[str, Any]) -> None:
    for name, service in services(compose).items():
        image = service.get("image")
        assert image, f"service {name} has no image (a built service names its image too, with the version)"
        tag = image_tag(image)[1]
        assert tag and tag not in ("latest", "stable") and _PINNED_TAG.match(tag), (
            f"service {name}: image {image!r} is not pinned to an exact version tag")
    assert services(compose)["n8n"]["image"] == N8N_IMAGE
    assert services(compose)["n8n-import"]["image"] == N8N_IMAGE, "n8n-import must run the n8n it prepares"
    postgres_repo, postgres_tag = image_tag(services(compose)["postgres"]["image"])
    assert postgres_repo == "postgres" and postgres_tag.split(".")[0] in ("16", "17"), (
        "PostgreSQL must be 16 or 17 (n8n supports 17 and newer, 16 on compatibility; 18 moves the data directory)")
    assert image_tag(services(compose)["redis"]["image"])[0] == "redis"
    assert services(compose)["sidecar"]["image"] == f"durable-sidecar:{pyproject_version()}", (
        "the built sidecar image is tagged with sidecar/pyproject.toml's version")


def test_sidecar_builds_from_its_dockerfile_at_the_repository_root(compose: dict[str, Any]) -> None:
    build = services(compose)["sidecar"].get("build")
    assert isinstance(build, dict), "the sidecar service must build its image"
    assert build.get("context") == ".", "the build context is the repository root (.dockerignore lives there)"
    assert build.get("dockerfile") == "sidecar/Dockerfile"
    assert services(compose)["sidecar"].get("pull_policy") == "build", "a built image must not be pulled from a registry"


def test_sidecar_dockerfile_is_pinned_non_root_and_health_checked() -> None:
    instructions = dockerfile_instructions()
    by_name: dict[str, list[str]] = {}
    for word, rest in instructions:
        by_name.setdefault(word, []).append(rest)

    froms = by_name.get("FROM", [])
    assert len(froms) == 1, "one stage"
    repo, tag = image_tag(froms[0].split()[0])
    assert repo == "python" and re.match(r"^3\.11\.\d+-slim(-[a-z]+)?$", tag), f"FROM must pin python:3.11.X-slim, not {froms[0]!r}"

    users = by_name.get("USER", [])
    assert users, "sidecar/Dockerfile has no USER: the sidecar would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"the last USER is {users[-1]!r}: the sidecar must not run as root"
    last_user = max(i for i, (word, _) in enumerate(instructions) if word == "USER")
    assert all(word != "RUN" for word, _ in instructions[last_user:]), "nothing may RUN after USER drops root"

    healthchecks = by_name.get("HEALTHCHECK", [])
    assert len(healthchecks) == 1 and "CMD" in healthchecks[0], "sidecar/Dockerfile needs one HEALTHCHECK ... CMD"
    probe = json.loads(healthchecks[0][healthchecks[0].index("CMD") + 3:])
    assert probe[0] == "python" and "/readyz" in probe[-1], "the health check asks the sidecar's /readyz"

    exposed = {port for line in by_name.get("EXPOSE", []) for port in line.split()}
    assert {"50051", "9464"} <= exposed, f"EXPOSE 50051 and 9464, not {sorted(exposed)}"
    env = dockerfile_env()
    assert env.get("DURABLE_LISTEN_ADDRESS") == "0.0.0.0:50051"
    assert env.get("DURABLE_METRICS_ADDRESS") == "0.0.0.0:9464", "the health check needs the metrics server on 9464"
    assert json.loads(by_name["ENTRYPOINT"][-1]) + json.loads(by_name["CMD"][-1]) == ["durable-sidecar", "serve"]

    for line in by_name.get("COPY", []):
        for source in line.split()[:-1]:
            if not source.startswith("--"):
                assert (ROOT / source).exists(), f"sidecar/Dockerfile copies {source}, which does not exist"


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """One .dockerignore pattern (Go filepath.Match plus **) as a regex on slash-separated paths."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + "$")


def dockerignore_excludes(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parent folders decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for negated, regex in rules:
        if any(regex.match(c) for c in candidates):
            excluded = not negated
    return excluded


def test_dockerignore_lets_in_only_what_the_dockerfile_copies() -> None:
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        rules.append((negated, _dockerignore_regex(os.path.normpath(line.lstrip("!")).lstrip("/"))))

    needed = ["sidecar/pyproject.toml"]
    for path in sorted((ROOT / "sidecar" / "src").rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.is_file() and "__pycache__" not in rel and ".egg-info" not in rel:
            needed.append(rel)
    assert any(p.endswith(".sql") for p in needed) and any(p.endswith("_pb2.py") for p in needed)
    left_out = [p for p in needed if dockerignore_excludes(p, rules)]
    assert not left_out, f".dockerignore keeps files the image needs out of the build context: {left_out[:5]}"

    kept_out = [".git/HEAD", ".venv/bin/python", "node-package/node_modules/x/index.js", "deploy/durable.env",
                ".durable-data/durable.sqlite3", "sidecar/src/durable_sidecar/__pycache__/app.cpython-311.pyc",
                "sidecar/src/durable_sidecar.egg-info/PKG-INFO", "bench/results/run/summary.json"]
    let_in = [p for p in kept_out if not dockerignore_excludes(p, rules)]
    assert not let_in, f".dockerignore lets these into the build context: {let_in}"


# --- health, ports, volumes, start order -------------------------------------------------


def test_every_long_running_service_has_a_health_check(compose: dict[str, Any]) -> None:
    probes = {}
    for name in sorted(LONG_RUNNING):
        check = services(compose)[name].get("healthcheck")
        if check is None and name == "sidecar":
            continue  # the image's HEALTHCHECK, checked in the Dockerfile test
        assert check and not check.get("disable"), f"service {name} has no health check"
        test = check["test"]
        assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL"), f"{name}: healthcheck test must be CMD or CMD-SHELL"
        probes[name] = " ".join(test[1:])
        for key in ("interval", "timeout", "retries", "start_period"):
            assert key in check, f"{name}: healthcheck sets no {key}"
    assert "pg_isready" in probes["postgres"]
    assert "redis-cli ping" in probes["redis"]
    assert "/healthz/readiness" in probes["n8n"], "n8n's /healthz answers before migrations end: probe /healthz/readiness"
    assert "/-/ready" in probes["prometheus"] and "/api/health" in probes["grafana"]
    assert "healthcheck" not in services(compose)["n8n-import"], "n8n-import is a one-shot job, not a server"


def test_only_n8n_and_the_sidecar_are_published_and_the_sidecar_only_locally(compose: dict[str, Any]) -> None:
    ports = {name: published_ports(service) for name, service in services(compose).items()}
    assert ports["postgres"] == [] and ports["redis"] == [] and ports["n8n-import"] == [], (
        "PostgreSQL and Redis are reached on the compose network only")
    assert ("127.0.0.1", "50051", "50051") in ports["sidecar"], "publish gRPC 50051 on 127.0.0.1 only"
    assert ("127.0.0.1", "9464", "9464") in ports["sidecar"], "publish metrics 9464 on 127.0.0.1 only"
    assert all(ip == "127.0.0.1" for ip, _, _ in ports["sidecar"]), f"sidecar ports must stay on 127.0.0.1: {ports['sidecar']}"
    assert [(host, container) for _, host, container in ports["n8n"]] == [("5678", "5678")]
    assert ports["prometheus"] == [("127.0.0.1", "9090", "9090")] and ports["grafana"] == [("127.0.0.1", "3000", "3000")]
    assert ports["n8n"][0][0] == "127.0.0.1", "by default n8n is published on 127.0.0.1 (N8N_BIND_ADDRESS opens it)"


def test_state_lives_in_declared_named_volumes(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    expected = {("postgres", "postgres_data", "/var/lib/postgresql/data"), ("redis", "redis_data", "/data"),
                ("n8n", "n8n_data", "/home/node/.n8n"), ("n8n-import", "n8n_data", "/home/node/.n8n")}
    for name, volume, target in sorted(expected):
        named = {(m["source"], m["target"]) for m in volume_mounts(services(compose)[name]) if m["type"] == "volume"}
        assert (volume, target) in named, f"service {name} must keep {target} in the named volume {volume}"
    used = {m["source"] for s in services(compose).values() for m in volume_mounts(s) if m["type"] == "volume"}
    assert used == declared, f"named volumes used {sorted(used)} and declared {sorted(declared)} differ"


def test_services_start_in_dependency_order(compose: dict[str, Any]) -> None:
    expected = {
        "postgres": {},
        "redis": {},
        "sidecar": {"postgres": "service_healthy", "redis": "service_healthy"},
        "n8n-import": {"postgres": "service_healthy"},
        "n8n": {"postgres": "service_healthy", "sidecar": "service_healthy", "n8n-import": "service_completed_successfully"},
        "prometheus": {"sidecar": "service_healthy"},
        "grafana": {"prometheus": "service_healthy"},
    }
    for name, want in expected.items():
        depends = services(compose)[name].get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}: depends_on needs conditions (the long form)"
        got = {dep: spec.get("condition") for dep, spec in depends.items()}
        assert got == want, f"{name}: depends_on {got}, expected {want}"
    for name in LONG_RUNNING:
        assert services(compose)[name].get("restart") == "unless-stopped", f"{name} must come back after a crash or reboot"
    assert services(compose)["n8n-import"].get("restart") == "no"


def test_every_bind_mount_exists_or_is_built_by_a_make_target(compose: dict[str, Any]) -> None:
    makefile = (ROOT / "Makefile").read_text()
    for name, service in services(compose).items():
        for mount in volume_mounts(service):
            if mount["type"] != "bind":
                continue
            assert mount["read_only"], f"{name}: bind mount {mount['source']} must be read-only"
            source = os.path.normpath(mount["source"])
            assert not source.startswith(("..", "/")), f"{name}: bind mount {mount['source']} is outside the repository"
            if source in BUILT_PATHS:
                target = BUILT_PATHS[source]
                assert re.search(rf"^{target}:", makefile, re.M), f"{source} is built by `make {target}`, which is gone"
                assert (mount.get("bind") or {}).get("create_host_path") is False, (
                    f"{name}: {source} must not be created empty by compose when `make {target}` has not run")
                continue
            assert (ROOT / source).exists(), f"{name}: bind mount source {mount['source']} does not exist"


def test_node_package_and_examples_reach_the_import_job(compose: dict[str, Any]) -> None:
    job = services(compose)["n8n-import"]
    binds = {os.path.normpath(m["source"]): m["target"] for m in volume_mounts(job) if m["type"] == "bind"}
    script_default = re.search(r'DURABLE_IMPORT_DIR:-([^}"]+)', IMPORT_SCRIPT.read_text())
    assert script_default, "deploy/n8n-import.sh names no default DURABLE_IMPORT_DIR"
    base = script_default.group(1)
    assert binds.get("deploy/n8n-import.sh") == f"{base}/n8n-import.sh"
    assert job.get("entrypoint") == ["/bin/sh", f"{base}/n8n-import.sh"]
    assert binds.get("examples") == f"{base}/examples"
    assert binds.get("node-package/package.json") == f"{base}/n8n-nodes-durable/package.json"
    assert binds.get("node-package/dist") == f"{base}/n8n-nodes-durable/dist"

    package = json.loads((ROOT / "node-package" / "package.json").read_text())
    assert package["name"] == "n8n-nodes-durable"
    for entry in package["n8n"]["nodes"] + package["n8n"]["credentials"]:
        assert entry.startswith("dist/"), f"package.json loads {entry} from outside dist/, which is not mounted"

    examples = sorted((ROOT / "examples").glob("*.json"))
    assert examples, "examples/*.json: no example workflows to import"
    env = environment(job)
    assert env["DURABLE_SIDECAR_HOST"] == "sidecar" and env["DURABLE_SIDECAR_PORT"] == "50051"


def test_postgres_init_creates_the_databases_both_services_use(compose: dict[str, Any]) -> None:
    mounts = {m["target"]: os.path.normpath(m["source"]) for m in volume_mounts(services(compose)["postgres"])}
    assert mounts.get("/docker-entrypoint-initdb.d") == "deploy/postgres-init"
    scripts = sorted(POSTGRES_INIT.glob("*.sh"))
    assert scripts, "deploy/postgres-init has no script"
    for script in scripts:
        assert script.stat().st_mode & stat.S_IXUSR, f"{script.name} must be executable (else the image sources it)"
    sql = "\n".join(s.read_text() for s in scripts)

    n8n_env = environment(services(compose)["n8n"])
    sidecar_env = environment(services(compose)["sidecar"])
    url = re.match(r"^postgresql://(?P<user>[^@:]+)@postgres:5432/(?P<db>\w+)$", sidecar_env["DURABLE_DATABASE_URL"])
    assert url, f"DURABLE_DATABASE_URL {sidecar_env['DURABLE_DATABASE_URL']!r}: no password in it (PGPASSWORD), host postgres"
    for user, db in ((n8n_env["DB_POSTGRESDB_USER"], n8n_env["DB_POSTGRESDB_DATABASE"]), (url["user"], url["db"])):
        assert re.search(rf"CREATE ROLE {user} LOGIN PASSWORD", sql), f"deploy/postgres-init creates no role {user}"
        assert re.search(rf"CREATE DATABASE {db} OWNER {user};", sql), f"deploy/postgres-init creates no database {db}"
    assert n8n_env["DB_POSTGRESDB_HOST"] == "postgres" and n8n_env["DB_TYPE"] == "postgresdb"
    postgres_env = environment(services(compose)["postgres"])
    assert postgres_env["N8N_DB_PASSWORD"] == n8n_env["DB_POSTGRESDB_PASSWORD"]
    assert postgres_env["DURABLE_DB_PASSWORD"] == sidecar_env["PGPASSWORD"]


def test_sidecar_environment_is_valid_for_the_sidecars_settings(compose: dict[str, Any]) -> None:
    env = {**dockerfile_env(), **environment(services(compose)["sidecar"])}
    settings = Settings.from_env(env)  # raises SettingsError listing every problem
    assert settings.database_url.startswith("postgresql://") and not settings.embedded
    assert settings.redis_url == "redis://redis:6379/0"
    token = environment(services(compose)["n8n-import"])["DURABLE_SIDECAR_TOKEN"]
    assert token in settings.tokens, "the n8n credential's token must be one the sidecar accepts"
    assert settings.shutdown_grace_seconds < _seconds(services(compose)["sidecar"]["stop_grace_period"]), (
        "stop_grace_period must outlast DURABLE_SHUTDOWN_GRACE_SECONDS, or compose kills RPCs in flight")
    n8n_env = environment(services(compose)["n8n"])
    assert n8n_env["N8N_ENCRYPTION_KEY"] == environment(services(compose)["n8n-import"])["N8N_ENCRYPTION_KEY"]
    # n8n waits N8N_GRACEFUL_SHUTDOWN_TIMEOUT (30 s by default) for running executions.
    assert _seconds(services(compose)["n8n"]["stop_grace_period"]) > 30, "n8n needs over 30 s to stop gracefully"


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", duration)
    assert match, f"cannot read the duration {duration!r}"
    return int(match[1]) * (60 if match[2] == "m" else 1)


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


# --- deploy/n8n-import.sh, with a stand-in n8n ------------------------------------------------


@pytest.fixture
def import_job(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The import job's mounts in a temp folder, a fake `n8n` that logs its calls, and a runner."""
    base = tmp_path / "opt"
    (base / "n8n-nodes-durable" / "dist" / "nodes" / "ResumePoint").mkdir(parents=True)
    shutil.copy(ROOT / "node-package" / "package.json", base / "n8n-nodes-durable" / "package.json")
    (base / "n8n-nodes-durable" / "dist" / "nodes" / "ResumePoint" / "ResumePoint.node.js").write_text("// v1\n")
    shutil.copytree(ROOT / "examples", base / "examples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "n8n"
    fake.write_text('#!/bin/sh\necho "$*" >>"$FAKE_N8N_LOG"\n'
                    'case "$1" in import:credentials) cp "${2#--input=}" "$FAKE_N8N_CREDENTIAL" ;; esac\n')
    fake.chmod(0o755)
    (tmp_path / "tmp").mkdir()
    state = {"base": base, "home": tmp_path / "home", "log": tmp_path / "n8n.log", "credential": tmp_path / "credential.json",
             "tmp": tmp_path / "tmp"}

    def run(**overrides: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(state["home"]), "TMPDIR": str(state["tmp"]),
               "DURABLE_IMPORT_DIR": str(base), "DURABLE_SIDECAR_TOKEN": "tok-0123456789abcdef",
               "FAKE_N8N_LOG": str(state["log"]), "FAKE_N8N_CREDENTIAL": str(state["credential"]), **overrides}
        state["log"].write_text("")
        return subprocess.run(["/bin/sh", str(IMPORT_SCRIPT)], env=env, capture_output=True, text=True, timeout=60)

    state["run"] = run
    yield state


def calls(job: dict[str, Any]) -> list[str]:
    return job["log"].read_text().splitlines()


def test_import_job_installs_the_package_writes_the_credential_and_imports_examples_once(import_job: dict[str, Any]) -> None:
    first = import_job["run"]()
    assert first.returncode == 0, first.stderr
    installed = import_job["home"] / ".n8n" / "nodes" / "node_modules" / "n8n-nodes-durable"
    assert (installed / "package.json").read_bytes() == (ROOT / "node-package" / "package.json").read_bytes()
    assert (installed / "dist" / "nodes" / "ResumePoint" / "ResumePoint.node.js").read_text() == "// v1\n"

    credential = json.loads(import_job["credential"].read_text())
    assert len(credential) == 1
    cred = credential[0]
    assert cred["type"] == CREDENTIAL_TYPE
    assert cred["data"] == {"host": "sidecar", "port": 50051, "tls": False, "token": "tok-0123456789abcdef",
                            "deadlineSeconds": 30}
    fields = set(re.findall(r"name: '(\w+)'", CREDENTIAL_SOURCE.read_text()))
    assert set(cred["data"]) <= fields, f"credential fields {sorted(set(cred['data']) - fields)} do not exist in the node package"
    examples = sorted((ROOT / "examples").glob("*.json"))
    for path in examples:
        workflow = json.loads(path.read_text())
        for node in workflow["nodes"]:
            ref = (node.get("credentials") or {}).get(CREDENTIAL_TYPE)
            if ref:
                assert ref["id"] == cred["id"], f"{path.name}: node {node['name']} uses credential {ref['id']}, the stack writes {cred['id']}"
    assert list(import_job["tmp"].iterdir()) == [], "the credential file (it holds the token) must be deleted"

    log = calls(import_job)
    assert log[0].startswith("import:credentials --input=")
    imported = [line.split("=", 1)[1] for line in log if line.startswith("import:workflow")]
    assert [Path(p).name for p in imported] == [p.name for p in examples]
    assert not [line for line in log if line.startswith("publish:workflow")], "examples are not published by default"

    second = import_job["run"]()
    assert second.returncode == 0, second.stderr
    assert "up to date" in second.stdout
    assert [line.split()[0] for line in calls(import_job)] == ["import:credentials"], "examples are imported once only"


def test_import_job_publishes_when_asked_and_replaces_a_rebuilt_package(import_job: dict[str, Any]) -> None:
    assert import_job["run"](DURABLE_PUBLISH_EXAMPLES="true").returncode == 0
    ids = [json.loads(p.read_text())["id"] for p in sorted((ROOT / "examples").glob("*.json"))]
    assert [line for line in calls(import_job) if line.startswith("publish:")] == [f"publish:workflow --id={i}" for i in ids]

    node = import_job["base"] / "n8n-nodes-durable" / "dist" / "nodes" / "ResumePoint" / "ResumePoint.node.js"
    node.write_text("// v2\n")
    again = import_job["run"]()
    assert again.returncode == 0 and "installed" in again.stdout
    nodes = import_job["home"] / ".n8n" / "nodes" / "node_modules"
    assert (nodes / "n8n-nodes-durable" / "dist" / "nodes" / "ResumePoint" / "ResumePoint.node.js").read_text() == "// v2\n"
    assert sorted(p.name for p in nodes.iterdir()) == ["n8n-nodes-durable"], "no half-swapped copies are left behind"


def test_import_job_skips_examples_when_told(import_job: dict[str, Any]) -> None:
    run = import_job["run"](DURABLE_IMPORT_EXAMPLES="false")
    assert run.returncode == 0, run.stderr
    assert [line.split()[0] for line in calls(import_job)] == ["import:credentials"]


@pytest.mark.parametrize(("token", "message"), [
    ("", "DURABLE_SIDECAR_TOKEN is empty"),
    ("short", "at least 8 characters"),
    ('quote"in-token', "only letters, digits"),
    ("comma,separated=ns", "only letters, digits"),
])
def test_import_job_refuses_a_token_the_sidecar_or_json_cannot_take(import_job: dict[str, Any], token: str, message: str) -> None:
    run = import_job["run"](DURABLE_SIDECAR_TOKEN=token)
    assert run.returncode != 0 and message in run.stderr
    assert calls(import_job) == [], "nothing is imported with a bad token"


def test_import_job_says_to_build_the_package_when_dist_is_missing(import_job: dict[str, Any]) -> None:
    shutil.rmtree(import_job["base"] / "n8n-nodes-durable" / "dist")
    run = import_job["run"]()
    assert run.returncode != 0 and "make node-build" in run.stderr
    assert calls(import_job) == []


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


# --- dashboards and alerts (the "monitoring" profile) -------------------------------------------

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
GRAFANA_DIR = ROOT / "deploy" / "grafana"
_METRIC_NAME = re.compile(r"\bdurable_[a-z_]+\b")


def _exported_metric_names() -> set[str]:
    """Every series name the sidecar exports (metrics.py's collectors, counters and histograms expanded)."""
    from durable_sidecar import metrics

    names: set[str] = set()
    for value in vars(metrics).values():
        describe = getattr(value, "describe", None)
        if describe is None or not callable(describe) or isinstance(value, type):
            continue
        for family in describe():
            names.add(family.name)
            names.update(family.name + suffix for suffix in ("_total", "_bucket", "_sum", "_count", "_created"))
    return names


def test_monitoring_services_are_opt_in_and_mount_the_deploy_files(compose: dict[str, Any]) -> None:
    for name in SERVICES:
        profiles = services(compose)[name].get("profiles")
        assert (profiles == ["monitoring"]) == (name in MONITORING), f"{name}: profiles {profiles}"
    binds = {name: {os.path.normpath(m["source"]): m["target"] for m in volume_mounts(services(compose)[name])
                    if m["type"] == "bind"} for name in MONITORING}
    assert binds["prometheus"] == {"deploy/prometheus/prometheus.yml": "/etc/prometheus/prometheus.yml",
                                   "deploy/prometheus/alerts.yml": "/etc/prometheus/alerts.yml"}
    assert binds["grafana"] == {"deploy/grafana/provisioning": "/etc/grafana/provisioning",
                                "deploy/grafana/dashboards": "/var/lib/grafana/dashboards"}
    assert "GF_SECURITY_ADMIN_PASSWORD" in environment(services(compose)["grafana"]), "no default admin/admin"


def test_prometheus_scrapes_the_sidecar_and_loads_the_alert_rules() -> None:
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for group in jobs["durable-sidecar"]["static_configs"] for t in group["targets"]]
    assert targets == ["sidecar:9464"] and jobs["durable-sidecar"].get("metrics_path", "/metrics") == "/metrics"
    assert Settings().metrics_address.endswith(":9464") and "DURABLE_METRICS_ADDRESS" in dict(dockerfile_env())


def test_alert_rules_are_valid_and_use_exported_metrics() -> None:
    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    exported = _exported_metric_names()
    alerts = {}
    for group in rules["groups"]:
        assert group["name"] and group["rules"]
        for rule in group["rules"]:
            assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule.get("alert")
            assert rule["labels"]["severity"] in ("warning", "critical")
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            assert re.fullmatch(r"\d+[smh]", rule["for"])
            for name in _METRIC_NAME.findall(rule["expr"]):
                assert name in exported, f"{rule['alert']}: {name} is not a metric the sidecar exports"
            alerts[rule["alert"]] = rule["expr"]
    assert {"DurableOldestStalledInstanceTooOld", "DurableManyStalledInstances", "DurableWakeUpsOverdue"} <= set(alerts)
    # Every sidecar reports the same database-wide gauges: aggregate with max, never sum.
    for name, expr in alerts.items():
        if "durable_instances" in expr or "durable_wake_ups_due" in expr or "oldest_stalled" in expr:
            assert "max by (namespace)" in expr and "sum" not in expr, name


def test_grafana_provisions_the_datasource_and_a_valid_dashboard() -> None:
    datasources = yaml.safe_load((GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((GRAFANA_DIR / "provisioning" / "dashboards" / "durable.yml").read_text())
    assert [p["options"]["path"] for p in providers["providers"]] == ["/var/lib/grafana/dashboards"]
    dashboards = sorted((GRAFANA_DIR / "dashboards").glob("*.json"))
    assert dashboards, "no dashboard JSON under deploy/grafana/dashboards"
    exported = _exported_metric_names()
    for path in dashboards:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] and dashboard["title"] and dashboard["panels"]
        assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
        exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        for panel in dashboard["panels"]:
            assert panel["datasource"]["uid"] == source["uid"], f"{path.name}: {panel['title']} names another datasource"
        used = {name for expr in exprs for name in _METRIC_NAME.findall(expr)}
        assert used <= exported, f"{path.name}: not exported by the sidecar: {sorted(used - exported)}"
        for gauge in ("durable_instances", "durable_wake_ups_due", "durable_oldest_stalled_instance_age_seconds"):
            assert gauge in used, f"{path.name} does not show {gauge}"
