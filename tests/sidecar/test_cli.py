"""The operator CLI: run states in `instances list` and `instances show`, help text on every subcommand."""

from __future__ import annotations

import argparse
import asyncio

from durable.v1 import common_pb2, instance_pb2, session_pb2
from durable_sidecar import cli

from tests.conftest import Harness
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start
from tests.sidecar.test_events import await_event, get, started_with_checkpoint
from tests.sidecar.test_server import _cli
from tests.sidecar.test_sessions import beat, start_in


def _run_state_name(state: int) -> str:
    """The word the node package shows for a run state (node-helpers.ts runStateName)."""
    return common_pb2.RunState.Name(state).removeprefix("RUN_STATE_").lower() if state else ""


def _listed_status(stdout: str, key: str) -> str:
    rows = [line.split() for line in stdout.splitlines() if key in line.split()]
    assert len(rows) == 1, stdout
    return rows[0][2]  # workflow, key, status, ...


def _shown_status(stdout: str) -> str:
    values = [line.split(":", 1)[1].strip() for line in stdout.splitlines() if line.strip().startswith("status:")]
    assert len(values) == 1, stdout
    return values[0]


async def test_cli_instances_list_and_show_name_waiting_and_scheduled_run_states(harness: Harness,
                                                                                 database_url: str) -> None:
    s = harness.alpha
    ns = harness.sidecar.settings.tokens[s.token]
    # Parked by Await Event: no lease, an awaited event.
    waiting = new_key()
    await started_with_checkpoint(s, waiting)
    await await_event(s, waiting)
    # Failed with a retry backoff ahead: a wake-up in the future.
    scheduled = new_key()
    await start(s, scheduled, retry_policy=common_pb2.RetryPolicy(max_automatic_resumes=3, initial_backoff_ms=3_600_000))
    await save(s, item(scheduled, "charge", {"amount": 10}))
    await s.instances.FailInstance(instance_pb2.FailInstanceRequest(
        workflow_id=WF, instance_key=scheduled, execution_id="exec-1", error_message="boom", retry=True),
        metadata=s.metadata)
    # Holding its lease: plainly running.
    active = new_key()
    await started_with_checkpoint(s, active)

    expected = {waiting: "waiting", scheduled: "scheduled", active: "running"}
    for key, word in expected.items():
        inst = await get(s, key)
        assert inst.status == common_pb2.INSTANCE_STATUS_RUNNING
        # The CLI's word is the run state the API and the node package report.
        assert _run_state_name(inst.run_state) == ("active" if word == "running" else word)

    listed = await asyncio.to_thread(_cli, database_url, "instances", "list", "--namespace", ns)
    assert listed.returncode == 0, listed.stderr
    assert {key: _listed_status(listed.stdout, key) for key in expected} == expected
    # --status running still selects by the stored status: the waiting and scheduled instances are running.
    running = await asyncio.to_thread(_cli, database_url, "instances", "list", "--status", "running", "--namespace", ns)
    assert running.returncode == 0, running.stderr
    assert {key: _listed_status(running.stdout, key) for key in expected} == expected
    finished = await asyncio.to_thread(_cli, database_url, "instances", "list", "--status", "completed", "--namespace",
                                       ns)
    assert finished.returncode == 0 and all(key not in finished.stdout for key in expected), finished.stdout

    for key, word in expected.items():
        shown = await asyncio.to_thread(_cli, database_url, "instances", "show", WF, key, "--namespace", ns)
        assert shown.returncode == 0, shown.stderr
        assert _shown_status(shown.stdout) == word
    shown = await asyncio.to_thread(_cli, database_url, "instances", "show", WF, waiting, "--namespace", ns)
    assert "awaited_event: delivered" in shown.stdout


def _subcommands(p: argparse.ArgumentParser, path: str) -> list[tuple[str, str | None, argparse.ArgumentParser]]:
    """Every subcommand under p, depth first: (its command line, its help, its parser)."""
    found = []
    for action in p._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help for a in action._choices_actions}
        for name, sub in action.choices.items():
            found.append((f"{path} {name}", helps.get(name), sub))
            found += _subcommands(sub, f"{path} {name}")
    return found


def test_cli_every_subcommand_has_help_text() -> None:
    found = _subcommands(cli.parser(), "durable-sidecar")
    names = {command for command, _, _ in found}
    assert {"durable-sidecar instances list", "durable-sidecar checkpoints show", "durable-sidecar keys show",
            "durable-sidecar versions show"} <= names
    assert [command for command, text, _ in found if not (text or "").strip()] == []
    # And `--help` of a command group shows each one's text.
    for command, _, sub in found:
        if command == "durable-sidecar instances":
            listing = sub.format_help()
            assert "every field of one instance" in listing and "newest first" in listing


async def test_cli_names_the_process_that_held_a_lapsed_lease_as_having_held_it(harness: Harness,
                                                                                 database_url: str) -> None:
    """A stalled instance (its execution ended without saving) is no longer held: `instances list` and `show`
    name the n8n process that held it and say the lease lapsed, not that the process holds it."""
    s = harness.alpha
    ns = harness.sidecar.settings.tokens[s.token]
    sid = (await s.sessions.OpenSession(session_pb2.OpenSessionRequest(host="n8n-host-7", pid=4711, mode="regular",
                                                                       client="test"), metadata=s.metadata)
           ).session.session_id
    held, lapsed = new_key(), new_key()
    await start_in(s, sid, held, "exec-held")
    await start_in(s, sid, lapsed, "exec-lapsed", lease_seconds=1)
    await asyncio.sleep(1.5)
    await beat(s, sid)  # the process is alive: only the one lease lapsed

    listed = await asyncio.to_thread(_cli, database_url, "instances", "list", "--namespace", ns)
    assert listed.returncode == 0, listed.stderr
    lines = {key: next(line for line in listed.stdout.splitlines() if key in line.split()) for key in (held, lapsed)}
    assert "n8n regular pid 4711 on n8n-host-7" in lines[held] and "lapsed" not in lines[held], listed.stdout
    assert _listed_status(listed.stdout, lapsed) == "stalled"
    assert "n8n regular pid 4711 on n8n-host-7, lease lapsed" in lines[lapsed], listed.stdout

    shown = await asyncio.to_thread(_cli, database_url, "instances", "show", WF, lapsed, "--namespace", ns)
    assert shown.returncode == 0, shown.stderr
    assert "held by: n8n regular pid 4711 on n8n-host-7, lease lapsed" in shown.stdout, shown.stdout
