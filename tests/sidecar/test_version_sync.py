"""Registering versions from n8n's REST API (a local fake of it) through the real gRPC server, on both storage backends."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import pytest
from durable.v1 import instance_pb2, version_pb2
from durable_sidecar.services import versions as versions_service

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs, free_port
from tests.sidecar.storage import ago, fetch
from tests.sidecar.version_helpers import (
    WF,
    change_log,
    charge_amount,
    expect_error,
    new_key,
    raw,
    resume,
    sidecar_with,
    start,
    versions,
    workflow,
)

N8N_KEY = "n8n-api-key-for-tests"


# --- n8n ----------------------------------------------------------------------


class FakeN8n:
    """n8n's GET /api/v1/workflows/{id} on 127.0.0.1, answering 401 unless X-N8N-API-KEY matches."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.workflows: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.requests.append((self.path, self.headers.get("X-N8N-API-KEY", "")))
                if self.headers.get("X-N8N-API-KEY") != fake.api_key:
                    return self._send(401, {"message": "unauthorized"})
                prefix = "/api/v1/workflows/"
                wf = fake.workflows.get(self.path[len(prefix):]) if self.path.startswith(prefix) else None
                if wf is None:
                    return self._send(404, {"message": "Not Found"})
                return self._send(200, wf)

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def publish(self, workflow_id: str, definition: dict[str, Any], version_id: str) -> None:
        """What n8n answers for the workflow: its definition plus runtime fields."""
        self.workflows[workflow_id] = {**definition, "id": workflow_id, "active": True, "versionId": version_id,
                                       "staticData": {"lastPoll": "2026-01-01"}, "tags": []}


@pytest.fixture
def n8n() -> Iterator[FakeN8n]:
    fake = FakeN8n(N8N_KEY)
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()


async def sync(s: Stubs, workflow_id: str = WF) -> version_pb2.SyncVersionFromN8nResponse:
    return await s.versions.SyncVersionFromN8n(
        version_pb2.SyncVersionFromN8nRequest(workflow_id=workflow_id, actor="tester"), metadata=s.metadata)


async def test_sync_from_n8n_registers_the_workflow_with_the_api_key(database_url: str, n8n: FakeN8n) -> None:
    n8n.publish(WF, workflow(amount=10), "n8n-v-aaa")
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key=N8N_KEY) as s:
        first = await sync(s)
        assert first.created and first.version.version == 1 and first.version.n8n_version_id == "n8n-v-aaa"
        assert n8n.requests == [(f"/api/v1/workflows/{WF}", N8N_KEY)]
        stored = await s.versions.GetVersion(version_pb2.GetVersionRequest(workflow_id=WF, version=1),
                                             metadata=s.metadata)
        doc = charge_amount(stored.version.definition_json, expected=10)
        assert "staticData" not in doc and doc["settings"] == {"executionOrder": "v1"}

        # A save in n8n that only moved nodes: a new n8n versionId, the same version here.
        moved = workflow(amount=10)
        for n in moved["nodes"]:
            n["position"] = [n["position"][0], 999]
        n8n.publish(WF, moved, "n8n-v-bbb")
        assert not (await sync(s)).created
        n8n.publish(WF, workflow(amount=20), "n8n-v-ccc")
        second = await sync(s)
        assert second.created and second.version.version == 2 and second.version.n8n_version_id == "n8n-v-ccc"
        logged = (await change_log(s, workflow_id=WF))[0]
        assert logged.actor == "tester" and "synced from n8n" in logged.reason


async def test_sync_from_n8n_registers_the_published_version_not_the_draft(database_url: str,
                                                                           n8n: FakeN8n) -> None:
    """n8n 2.x answers with the edited draft at the top and the published version in `activeVersion`."""
    published = workflow(amount=10)
    n8n.publish(WF, workflow(amount=99), "n8n-v-draft")  # the draft someone is still editing
    n8n.workflows[WF]["activeVersion"] = {"versionId": "n8n-v-live", "workflowId": WF, **published}
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key=N8N_KEY) as s:
        async def stored(version: int) -> bytes:
            return (await s.versions.GetVersion(version_pb2.GetVersionRequest(workflow_id=WF, version=version),
                                                metadata=s.metadata)).version.definition_json

        got = await sync(s)
        assert got.created and got.version.n8n_version_id == "n8n-v-live"
        doc = charge_amount(await stored(got.version.version), expected=10)
        assert doc["id"] == WF and doc["settings"] == {"executionOrder": "v1"}
        # Unpublished (activeVersion null): the draft is all there is.
        n8n.workflows[WF]["activeVersion"] = None
        draft = await sync(s)
        assert draft.created and draft.version.n8n_version_id == "n8n-v-draft"
        charge_amount(await stored(draft.version.version), expected=99)


async def test_sync_from_n8n_without_api_access_is_a_failed_precondition(harness: Harness) -> None:
    s = harness.alpha
    await expect_error(grpc.StatusCode.FAILED_PRECONDITION, sync(s), contains="DURABLE_N8N_BASE_URL")
    assert await versions(s) == []


async def test_sync_from_n8n_when_n8n_is_unreachable_is_unavailable(database_url: str) -> None:
    async with sidecar_with(database_url, n8n_base_url=f"http://127.0.0.1:{free_port()}", n8n_api_key=N8N_KEY) as s:
        await expect_error(grpc.StatusCode.UNAVAILABLE, sync(s), contains="cannot be reached")
        assert await versions(s) == []


async def test_sync_from_n8n_with_a_wrong_api_key_is_a_failed_precondition(database_url: str, n8n: FakeN8n) -> None:
    n8n.publish(WF, workflow(), "n8n-v-aaa")
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key="not-the-key") as s:
        await expect_error(grpc.StatusCode.FAILED_PRECONDITION, sync(s), contains="refused the API key (HTTP 401)")
        assert await versions(s) == []
    assert n8n.requests == [(f"/api/v1/workflows/{WF}", "not-the-key")]


async def test_sync_of_a_workflow_n8n_does_not_have_is_not_found(database_url: str, n8n: FakeN8n) -> None:
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key=N8N_KEY) as s:
        await expect_error(grpc.StatusCode.NOT_FOUND, sync(s, "wf-unknown"), contains="does not exist in n8n")
        assert await versions(s, "wf-unknown") == []


async def test_start_or_resume_reads_n8n_while_the_workflow_has_no_version_then_once_an_interval(
        database_url: str, n8n: FakeN8n, monkeypatch: pytest.MonkeyPatch) -> None:
    # Told 'not due', a sidecar asks the database again only after this long (5 s by default).
    monkeypatch.setattr(versions_service, "_NOT_DUE_SECONDS", 0.5)
    n8n.publish(WF, workflow(amount=10), "n8n-v-aaa")
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key=N8N_KEY) as s:
        first = await start(s, new_key())
        assert first.instance.bound_version == 1 and len(n8n.requests) == 1
        # Within the interval no HTTP call is made, even though n8n has changed.
        n8n.publish(WF, workflow(amount=20), "n8n-v-bbb")
        second = await start(s, new_key())
        assert second.instance.bound_version == 1 and len(n8n.requests) == 1
        # Once the interval has passed (database time), the next start reads n8n again.
        await fetch(database_url, f"UPDATE durable_workflows SET n8n_checked_at = {ago(database_url, 3600)} "
                                  "WHERE namespace = %s AND workflow_id = %s", f"ns-{s.token}", WF)
        # This sidecar was just told 'not due': for a moment it does not ask the database again.
        assert (await start(s, new_key())).instance.bound_version == 1 and len(n8n.requests) == 1
        await asyncio.sleep(0.6)
        third = await start(s, new_key())
        assert third.instance.bound_version == 2 and third.current_version == 2 and len(n8n.requests) == 2
        # A definition sent by the caller wins and needs no HTTP call.
        sent = await start(s, new_key(), definition_json=raw(workflow(amount=30)))
        assert sent.instance.bound_version == 3 and len(n8n.requests) == 2


async def test_an_unfamiliar_workflow_fingerprint_reads_n8n_at_once(database_url: str, n8n: FakeN8n,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A version published a moment ago binds its first order, not one a sync interval (60 s) later."""
    monkeypatch.setattr(versions_service, "_FINGERPRINT_READ_SECONDS", 0.05)  # one fingerprint read again soon
    n8n.publish(WF, workflow(amount=10), "n8n-v-aaa")
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key=N8N_KEY) as s:
        first = await start(s, new_key(), workflow_fingerprint="fp-1")
        assert first.instance.bound_version == 1 and len(n8n.requests) == 1
        # The same fingerprint again: nothing new to read, whatever n8n holds now.
        parked = new_key()
        assert (await start(s, parked, workflow_fingerprint="fp-1")).instance.bound_version == 1
        assert len(n8n.requests) == 1
        # Published, and an execution of the new version starts an order within the sync interval.
        n8n.publish(WF, workflow(amount=20), "n8n-v-bbb")
        second = await start(s, new_key(), workflow_fingerprint="fp-2")
        assert second.instance.bound_version == 2 and second.current_version == 2 and len(n8n.requests) == 2
        assert (await start(s, new_key(), workflow_fingerprint="fp-2")).instance.bound_version == 2
        assert len(n8n.requests) == 2
        # An order of version 1 resumed by an execution of version 2 is a mismatch, with its snapshot.
        resumed = await resume(s, parked, holder="exec-1", execution="exec-2", workflow_fingerprint="fp-2")
        assert resumed.version_mismatch and resumed.bound_version.version == 1 and len(n8n.requests) == 2
        # Reverted in n8n: version 1's fingerprint, seen with another current version, reads n8n again.
        n8n.publish(WF, workflow(amount=10), "n8n-v-ccc")
        await asyncio.sleep(0.1)
        back = await start(s, new_key(), workflow_fingerprint="fp-1")
        assert back.instance.bound_version == 1 and back.current_version == 1 and len(n8n.requests) == 3
        # Without a fingerprint (an older node package, a manual run) the sync interval applies as before.
        n8n.publish(WF, workflow(amount=30), "n8n-v-ddd")
        assert (await start(s, new_key())).instance.bound_version == 1 and len(n8n.requests) == 3


async def test_a_fingerprint_seen_while_n8n_still_answers_the_previous_version_is_read_for_again(
        database_url: str, n8n: FakeN8n, monkeypatch: pytest.MonkeyPatch) -> None:
    """n8n runs a publish a moment before (or after) its API answers it: an execution of new logic that reads
    the previous version (seen with another fingerprint) must not tie its fingerprint to that version."""
    monkeypatch.setattr(versions_service, "_FINGERPRINT_READ_SECONDS", 0.05)
    n8n.publish(WF, workflow(amount=10), "n8n-v-aaa")
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key=N8N_KEY) as s:
        assert (await start(s, new_key(), workflow_fingerprint="fp-a")).instance.bound_version == 1
        # An execution of the next version's logic while n8n's API still answers version 1.
        early = await start(s, new_key(), workflow_fingerprint="fp-b")
        assert early.instance.bound_version == 1 and len(n8n.requests) == 2
        n8n.publish(WF, workflow(amount=20), "n8n-v-bbb")
        await asyncio.sleep(0.1)
        # Its fingerprint was not taken for version 1's: read again, and bound to the version it runs.
        later = await start(s, new_key(), workflow_fingerprint="fp-b")
        assert later.instance.bound_version == 2 and len(n8n.requests) == 3
        assert (await start(s, new_key(), workflow_fingerprint="fp-b")).instance.bound_version == 2
        assert len(n8n.requests) == 3
        # An execution begun on version 1 that reaches its Resume Point now reads n8n (version 2, seen with
        # fp-b) and binds the current version without taking fp-a for version 2.
        await asyncio.sleep(0.1)
        assert (await start(s, new_key(), workflow_fingerprint="fp-a")).instance.bound_version == 2
        assert (await start(s, new_key(), workflow_fingerprint="fp-b")).instance.bound_version == 2
        assert len(n8n.requests) == 4


async def test_a_fingerprint_makes_one_read_for_many_starts_and_none_while_n8n_is_down(
        database_url: str, n8n: FakeN8n) -> None:
    n8n.publish(WF, workflow(amount=10), "n8n-v-aaa")
    async with sidecar_with(database_url, n8n_base_url=n8n.url, n8n_api_key=N8N_KEY) as s:
        burst = await asyncio.gather(*(start(s, new_key(), workflow_fingerprint="fp-burst") for _ in range(8)))
        assert {r.instance.bound_version for r in burst} == {1} and len(n8n.requests) == 1
    async with sidecar_with(database_url, n8n_base_url=f"http://127.0.0.1:{free_port()}",
                            n8n_api_key=N8N_KEY) as s:
        # n8n unreachable: the start still binds (the registered version, here none: the label).
        down = await start(s, new_key(), workflow_fingerprint="fp-new", version_label="1.0.0")
        assert down.outcome == instance_pb2.START_OUTCOME_STARTED
        assert (await start(s, new_key(), workflow_fingerprint="fp-new")).outcome == instance_pb2.START_OUTCOME_STARTED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await start(s, new_key(), workflow_fingerprint="x" * 129)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "workflow_fingerprint" in str(err.value.details())


async def test_start_or_resume_still_starts_when_n8n_is_down(database_url: str) -> None:
    async with sidecar_with(database_url, n8n_base_url=f"http://127.0.0.1:{free_port()}", n8n_api_key=N8N_KEY) as s:
        started = await start(s, new_key(), version_label="1.0.0")
        assert started.outcome == instance_pb2.START_OUTCOME_STARTED
        assert started.instance.bound_version == 0 and started.instance.version_label == "1.0.0"
