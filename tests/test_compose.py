"""Static checks of the Docker Compose stack (docker-compose.yml, sidecar/Dockerfile, deploy/): CI runs no Docker engine.

The services, their images, the sidecar's Dockerfile and .dockerignore, health
checks, ports, volumes, start order and the sidecar's settings. The env file
and the Compose schema are checked in test_compose_env.py, deploy/n8n-import.sh
in test_compose_import_job.py, the monitoring profile in
test_compose_monitoring.py; all read the files through tests/compose_stack.py.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

from durable_sidecar.settings import Settings

from tests.compose_stack import (
    BUILT_PATHS,
    DOCKERIGNORE,
    IMPORT_SCRIPT,
    LONG_RUNNING,
    N8N_IMAGE,
    POSTGRES_INIT,
    ROOT,
    SERVICES,
    dockerfile_env,
    dockerfile_instructions,
    environment,
    image_tag,
    published_ports,
    pyproject_version,
    services,
    volume_mounts,
)

# `VERSION` of an image tag: numbers with dots (at least major.minor), an optional -variant.
_PINNED_TAG = re.compile(r"^v?\d+\.\d+(\.\d+)*(-[a-z0-9.]+)*$")


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
