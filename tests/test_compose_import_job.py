"""deploy/n8n-import.sh (the stack's one-shot import job) run for real, with a stand-in `n8n` command."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compose_stack import (
    CREDENTIAL_SOURCE,
    CREDENTIAL_TYPE,
    IMPORT_SCRIPT,
    ROOT,
)

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
