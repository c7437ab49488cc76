"""Files (issue 45): n8n binary data stored once per content, streamed in chunks both ways, named by checkpoints and
completed keys, limited before any write, and pruned once nothing refers to them. Both backends."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator, Iterable
from typing import cast

import grpc
import pytest
from durable.v1 import checkpoint_pb2, common_pb2, events_pb2, files_pb2, files_pb2_grpc, instance_pb2
from durable.v1 import idempotency_pb2 as ipb

from tests.conftest import Harness
from tests.sidecar.helpers import Stubs
from tests.sidecar.storage import fetch
from tests.sidecar.test_checkpoints import WF, item, new_key, save, start
from tests.sidecar.test_events import refused

MIB = 1024 * 1024


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parts(data: bytes, chunk: int = MIB, *, digest: str | None = None,
          size: int | None = None) -> list[files_pb2.UploadFileRequest]:
    head = files_pb2.UploadFileHeader(sha256=digest or sha(data), size_bytes=len(data) if size is None else size)
    return [files_pb2.UploadFileRequest(header=head),
            *(files_pb2.UploadFileRequest(chunk=data[i:i + chunk]) for i in range(0, len(data), chunk))]


async def upload(s: Stubs, data: bytes, chunk: int = MIB, **kw: object) -> files_pb2.UploadFileResponse:
    """An upload through grpc's sync client, in a thread. When the server answers an upload before the client
    has sent all of it (a refusal from its header), grpc's asyncio client can report its own INTERNAL
    ("Internal error from Core") instead of the server's status: a write failing after the status overwrites it
    (grpc/grpc#36066; 1 in about 600 refusals here). The sync client, like grpc-js in the nodes, reports the
    server's status."""
    return await upload_requests(s, parts(data, chunk, **kw))


async def upload_requests(s: Stubs, requests: list[files_pb2.UploadFileRequest]) -> files_pb2.UploadFileResponse:
    """UploadFile with these messages, as upload sends them."""

    def call() -> files_pb2.UploadFileResponse:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            return files_pb2_grpc.FileServiceStub(ch).UploadFile(iter(requests), metadata=s.metadata)

    assert s.port, "upload needs the sidecar's port on the stubs"
    try:
        return await asyncio.to_thread(call)
    except grpc.RpcError as exc:
        failed = cast(grpc.Call, exc)
        raise grpc.aio.AioRpcError(failed.code(), grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   failed.details()) from exc


async def download(s: Stubs, digest: str) -> bytes:
    out = bytearray()
    async for reply in s.files.DownloadFile(files_pb2.DownloadFileRequest(sha256=digest), metadata=s.metadata):
        out += reply.chunk
    return bytes(out)


def ref(prop: str, data: bytes, name: str = "invoice.pdf", mime: str = "application/pdf") -> common_pb2.FileRef:
    return common_pb2.FileRef(property=prop, file_name=name, mime_type=mime, sha256=sha(data), size_bytes=len(data))


async def listed(s: Stubs, key: str, sequence: int = 0) -> files_pb2.ListCheckpointFilesResponse:
    return await s.files.ListCheckpointFiles(files_pb2.ListCheckpointFilesRequest(
        workflow_id=WF, instance_key=key, sequence=sequence), metadata=s.metadata)


async def stored(url: str, digest: str) -> tuple[int, int]:
    """(rows in durable_files, rows in durable_file_chunks) of a content, in any namespace."""
    files = await fetch(url, "SELECT count(*) FROM durable_files WHERE sha256 = %s", digest)
    chunks = await fetch(url, "SELECT count(*) FROM durable_file_chunks WHERE sha256 = %s", digest)
    return int(files[0][0]), int(chunks[0][0])


def names(files: Iterable[common_pb2.FileRef]) -> list[tuple[str, str, str, str, int]]:
    return [(f.property, f.file_name, f.mime_type, f.sha256, f.size_bytes) for f in files]


async def test_a_file_goes_up_in_chunks_and_comes_back_byte_for_byte_stored_once(harness: Harness,
                                                                               database_url: str) -> None:
    s = harness.alpha
    data = os.urandom(3 * MIB + 12_345)
    first = await upload(s, data, chunk=300_000)  # the client's chunks need not be the stored ones
    assert first.stored and first.sha256 == sha(data) and first.size_bytes == len(data)
    assert await stored(database_url, sha(data)) == (1, 4)  # 1 MiB chunks, the last one short
    assert await download(s, sha(data)) == data
    again = await upload(s, data)
    assert not again.stored and await stored(database_url, sha(data)) == (1, 4)
    present = await s.files.StatFiles(files_pb2.StatFilesRequest(sha256=[sha(b"other"), sha(data)]),
                                      metadata=s.metadata)
    assert list(present.present) == [sha(data)]
    # An empty file is a file too.
    assert (await upload(s, b"")).stored and await download(s, sha(b"")) == b""


async def test_a_save_names_its_files_and_a_resume_finds_them_and_the_same_content_is_stored_once(
        harness: Harness, database_url: str) -> None:
    s = harness.alpha
    pdf, png = b"%PDF-1.7 " + os.urandom(50_000), os.urandom(20_000)
    await upload(s, pdf)
    await upload(s, png)
    keys = [new_key(), new_key()]
    for key in keys:
        await start(s, key)
        reply = await save(s, item(key, "downloaded", {"orderId": key},
                                   files=[ref("data", pdf), ref("label", png, "label.png", "image/png")]))
        assert reply.results[0].checkpoint.file_count == 2
    assert await stored(database_url, sha(pdf)) == (1, 1)
    got = await listed(s, keys[0])
    assert got.sequence == 1 and names(got.files) == [
        ("data", "invoice.pdf", "application/pdf", sha(pdf), len(pdf)),
        ("label", "label.png", "image/png", sha(png), len(png))]
    # The resume's checkpoint says it has files; they are listed by sequence and downloaded by hash.
    resumed = await start(s, keys[1], "exec-2", include_state=True)
    assert resumed.latest_checkpoint.file_count == 2
    assert names((await listed(s, keys[1], 1)).files) == names(got.files)
    assert await download(s, sha(pdf)) == pdf
    # A later checkpoint without files has none; the one before keeps its own.
    await save(s, item(keys[0], "uploaded", {"done": True}))
    assert (await listed(s, keys[0])).sequence == 2 and not (await listed(s, keys[0])).files
    assert len((await listed(s, keys[0], 1)).files) == 2


async def test_a_retried_save_deduplicates_only_with_the_same_files(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    a, b = os.urandom(1000), os.urandom(1000)
    await upload(s, a)
    await upload(s, b)
    key = new_key()
    await start(s, key)
    first = await save(s, item(key, "fetched", {"n": 1}, files=[ref("data", a)]))
    retry = await save(s, item(key, "fetched", {"n": 1}, files=[ref("data", a)]))
    assert retry.results[0].deduplicated and retry.results[0].checkpoint.sequence == 1
    assert retry.results[0].checkpoint.file_count == 1 == first.results[0].checkpoint.file_count
    other = await save(s, item(key, "fetched", {"n": 1}, files=[ref("data", b)]))
    assert not other.results[0].deduplicated and other.results[0].checkpoint.sequence == 2
    # Without files, a re-save deduplicates by step and state alone, as every other save does.
    none = await save(s, item(key, "fetched", {"n": 1}))
    assert none.results[0].deduplicated and none.results[0].checkpoint.sequence == 2
    # In one batch: the second item repeats the first with the same files, the third differs.
    key2 = new_key()
    await start(s, key2)
    batch = await save(s, item(key2, "x", {"n": 1}, files=[ref("data", a)]), item(key2, "x", {"n": 1}, files=[ref("data", a)]),
                       item(key2, "x", {"n": 1}, files=[ref("data", b)]))
    assert [r.deduplicated for r in batch.results] == [False, True, False]
    assert [r.checkpoint.sequence for r in batch.results] == [1, 1, 2]
    assert names((await listed(s, key2, 2)).files)[0][3] == sha(b)


async def test_a_key_completed_by_a_save_gives_its_files_back_on_done_before(harness: Harness) -> None:
    s = harness.alpha
    pdf = os.urandom(70_000)
    await upload(s, pdf)
    key = new_key()
    await start(s, key)
    claimed = await s.idempotency.Claim(ipb.ClaimRequest(items=[ipb.ClaimItem(scope="invoices", key=key)]),
                                        metadata=s.metadata)
    attempt = claimed.results[0].key.attempt
    await save(s, item(key, "invoiced", {"invoice": "INV-1"}, files=[ref("data", pdf)],
                       complete_key=checkpoint_pb2.KeyCompletion(scope="invoices", key=key, attempt=attempt)))
    again = await s.idempotency.Claim(ipb.ClaimRequest(items=[ipb.ClaimItem(scope="invoices", key=key)]),
                                      metadata=s.metadata)
    assert again.results[0].outcome == ipb.CLAIM_OUTCOME_DUPLICATE
    files = await s.files.ListKeyFiles(files_pb2.ListKeyFilesRequest(keys=[
        files_pb2.KeyName(scope="invoices", key=key), files_pb2.KeyName(scope="invoices", key="never-claimed")]),
        metadata=s.metadata)
    assert [k.key for k in files.keys] == [key, "never-claimed"]
    assert names(files.keys[0].files) == [("data", "invoice.pdf", "application/pdf", sha(pdf), len(pdf))]
    assert not files.keys[1].files


@pytest.mark.parametrize("harness", [{"max_file_bytes": 2 * MIB, "max_checkpoint_file_bytes": 3 * MIB,
                                      "max_checkpoint_files": 3, "max_namespace_file_bytes": 5 * MIB}],
                         indirect=True)
async def test_each_limit_is_checked_before_anything_is_written(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    big = os.urandom(2 * MIB + 1)
    code, message = await refused(upload(s, big))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "DURABLE_MAX_FILE_BYTES" in message
    assert await stored(database_url, sha(big)) == (0, 0)
    blobs = [os.urandom(2 * MIB - i) for i in range(3)]
    for blob in blobs[:2]:
        assert (await upload(s, blob)).stored
    code, message = await refused(upload(s, blobs[2]))  # 4 MiB held + 2 MiB > 5 MiB
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "DURABLE_MAX_NAMESPACE_FILE_BYTES" in message
    assert await stored(database_url, sha(blobs[2])) == (0, 0)
    # Another namespace has its own room.
    assert (await upload(harness.beta, blobs[2])).stored
    key = new_key()
    await start(s, key)
    code, message = await refused(save(s, item(key, "two", {}, files=[ref("a", blobs[0]), ref("b", blobs[1])])))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "DURABLE_MAX_CHECKPOINT_FILE_BYTES" in message
    small = os.urandom(10)
    await upload(s, small)
    code, message = await refused(save(s, item(key, "four", {}, files=[ref(p, small) for p in "abcd"])))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "DURABLE_MAX_CHECKPOINT_FILES" in message
    rows = await fetch(database_url, "SELECT count(*) FROM durable_checkpoints WHERE instance_key = %s", key)
    assert int(rows[0][0]) == 0


async def test_bad_uploads_are_refused_and_store_nothing(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    data = os.urandom(MIB + 10)
    wrong = sha(b"not this")
    code, message = await refused(upload(s, data, digest=wrong))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "not the header's" in message
    assert await stored(database_url, wrong) == (0, 0) and await stored(database_url, sha(data)) == (0, 0)
    code, message = await refused(upload(s, data, chunk=MIB + 10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "limit per chunk" in message
    code, message = await refused(upload(s, data, size=len(data) + 1))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "stream ended after" in message
    code, message = await refused(upload(s, data, size=len(data) - 1))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "longer than the header" in message
    code, _ = await refused(upload(s, data, digest="ABC"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    only_chunks = [files_pb2.UploadFileRequest(chunk=b"x")]
    code, message = await refused(upload_requests(s, only_chunks))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "header" in message
    two_heads = parts(b"abc")
    two_heads.insert(1, two_heads[0])
    code, message = await refused(upload_requests(s, two_heads))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "header" in message
    assert await stored(database_url, sha(data)) == (0, 0) and await stored(database_url, sha(b"abc")) == (0, 0)
    code, _ = await refused(download(s, sha(data)))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await refused(s.files.StatFiles(files_pb2.StatFilesRequest(sha256=["xyz"]), metadata=s.metadata))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_an_upload_that_breaks_off_stores_nothing(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    data = os.urandom(4 * MIB)
    sent = asyncio.Event()

    async def requests() -> AsyncIterator[files_pb2.UploadFileRequest]:
        all_parts = parts(data)
        for p in all_parts[:3]:  # the header and 2 of 4 chunks
            yield p
        sent.set()
        await asyncio.sleep(3600)

    call = s.files.UploadFile(requests(), metadata=s.metadata)
    await asyncio.wait_for(sent.wait(), 10)
    await asyncio.sleep(0.3)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.sleep(0.3)
    assert await stored(database_url, sha(data)) == (0, 0)
    # The same content whole afterwards is stored.
    assert (await upload(s, data)).stored and await download(s, sha(data)) == data


async def test_bad_references_in_a_save_are_refused_and_write_nothing(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    data = os.urandom(100)
    await upload(s, data)
    key = new_key()
    await start(s, key)
    unknown = os.urandom(100)
    cases: list[tuple[list[common_pb2.FileRef], grpc.StatusCode, str]] = [
        ([ref("data", unknown)], grpc.StatusCode.FAILED_PRECONDITION, "upload it first"),
        ([common_pb2.FileRef(property="data", sha256=sha(data), size_bytes=99)], grpc.StatusCode.FAILED_PRECONDITION,
         "is 100 bytes, not 99"),
        ([common_pb2.FileRef(property="data", sha256="F" * 64, size_bytes=100)], grpc.StatusCode.INVALID_ARGUMENT,
         "items[0].files[0].sha256"),
        ([ref("data", data), ref("data", data)], grpc.StatusCode.INVALID_ARGUMENT, "appears twice"),
        ([common_pb2.FileRef(property="", sha256=sha(data), size_bytes=100)], grpc.StatusCode.INVALID_ARGUMENT,
         "property is required"),
        ([common_pb2.FileRef(property="data", file_name="a\nb", sha256=sha(data), size_bytes=100)],
         grpc.StatusCode.INVALID_ARGUMENT, "file_name contains control characters"),
        ([common_pb2.FileRef(property="data", sha256=sha(data), size_bytes=-1)], grpc.StatusCode.INVALID_ARGUMENT,
         "items[0].files[0].size_bytes must be 0 to"),
    ]
    for files, want, text in cases:
        code, message = await refused(save(s, item(key, "step", {"a": 1}, files=files)))
        assert (code, text in message) == (want, True), (files, code, message)
    # A batch with one bad reference writes none of its items.
    other = new_key()
    await start(s, other)
    code, message = await refused(save(s, item(other, "ok", {}, files=[ref("data", data)]),
                                       item(key, "bad", {}, files=[ref("data", unknown)])))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "items[1].files[0]" in message
    for k in (key, other):
        rows = await fetch(database_url, "SELECT count(*) FROM durable_checkpoints WHERE instance_key = %s", k)
        assert int(rows[0][0]) == 0
    # Another namespace's content is not this one's.
    beta_key = new_key()
    await start(harness.beta, beta_key)
    code, _ = await refused(save(harness.beta, item(beta_key, "x", {}, files=[ref("data", data)])))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    code, _ = await refused(download(harness.beta, sha(data)))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await refused(listed(s, "no-such-order"))
    assert code == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("harness", [{"file_grace_seconds": 0, "file_sweep_interval_seconds": 0.2}], indirect=True)
async def test_a_file_is_pruned_once_no_checkpoint_or_key_refers_to_it(harness: Harness, database_url: str) -> None:
    s = harness.alpha
    kept, dropped, orphan, purged = (os.urandom(2000) for _ in range(4))
    for data in (kept, dropped, orphan, purged):
        await upload(s, data)
    key = new_key()
    await start(s, key)
    await save(s, item(key, "one", {"n": 1}, files=[ref("data", dropped)]))
    await save(s, item(key, "two", {"n": 2}, files=[ref("data", kept)]))
    other = new_key()
    await start(s, other)
    await save(s, item(other, "one", {"n": 1}, files=[ref("data", purged)]))
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=other, execution_id="exec-1"), metadata=s.metadata)

    async def settled() -> None:
        await asyncio.sleep(1.0)  # several sweeps

    await settled()
    # The orphan (uploaded, never saved) is gone; the referenced ones stay.
    assert await stored(database_url, sha(orphan)) == (0, 0)
    assert (await stored(database_url, sha(kept)))[0] == 1 and (await stored(database_url, sha(dropped)))[0] == 1
    # Pruning checkpoint 1 drops its reference, so its content goes; the newest keeps its own.
    await s.checkpoints.PruneCheckpoints(checkpoint_pb2.PruneCheckpointsRequest(
        workflow_id=WF, instance_key=key, keep_last=1), metadata=s.metadata)
    await settled()
    assert await stored(database_url, sha(dropped)) == (0, 0)
    assert (await stored(database_url, sha(kept)))[0] == 1 and await download(s, sha(kept)) == kept
    # A purge erases the instance's checkpoints, and with them the references.
    await s.recovery.PurgeInstance(events_pb2.PurgeInstanceRequest(
        workflow_id=WF, instance_key=other, actor="dpo", reason="erasure request"), metadata=s.metadata)
    await settled()
    assert await stored(database_url, sha(purged)) == (0, 0)


async def test_a_replay_fork_carries_the_files_of_the_checkpoints_it_copied(harness: Harness) -> None:
    s = harness.alpha
    data = os.urandom(5000)
    await upload(s, data)
    key = new_key()
    await start(s, key)
    await save(s, item(key, "fetched", {"n": 1}, files=[ref("data", data)]))
    await save(s, item(key, "sent", {"n": 2}))
    await s.instances.CompleteInstance(instance_pb2.CompleteInstanceRequest(
        workflow_id=WF, instance_key=key, execution_id="exec-1"), metadata=s.metadata)
    fork = await s.recovery.ReplayInstance(events_pb2.ReplayInstanceRequest(
        workflow_id=WF, instance_key=key, from_sequence=1, actor="ops", reason="send again"), metadata=s.metadata)
    got = await listed(s, fork.instance.instance_key)
    assert got.sequence == 1 and names(got.files)[0][3] == sha(data)
    assert json.loads((await s.checkpoints.GetLatestCheckpoint(checkpoint_pb2.GetLatestCheckpointRequest(
        workflow_id=WF, instance_key=fork.instance.instance_key, include_state=True),
        metadata=s.metadata)).checkpoint.state_json) == {"n": 1}


async def test_files_over_plain_http_put_and_get_with_the_same_auth_and_checks(database_url: str) -> None:
    """The HTTP face: PUT /files/<sha256> streams the body up (Content-Length checked first), GET streams it back as
    an attachment; the token, limits and hash check are FileService's own."""
    import aiohttp
    from durable_sidecar import app

    from tests.conftest import make_settings

    settings = make_settings(database_url, auth_tokens="files-token-1=ns-files-http", http_listen_address="127.0.0.1:0",
                             max_file_bytes=3 * MIB)
    sidecar = await app.start(settings)
    assert sidecar.http_server is not None
    base = f"http://127.0.0.1:{sidecar.http_server.port}/files"
    auth = {"Authorization": "Bearer files-token-1"}
    data = os.urandom(2 * MIB + 7)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.put(f"{base}/{sha(data)}", data=data, headers=auth) as reply:
                assert reply.status == 201, await reply.text()
                assert (await reply.json())["stored"] is True
            async with http.put(f"{base}/{sha(data)}", data=data, headers=auth) as reply:
                assert reply.status == 200 and (await reply.json())["stored"] is False
            async with http.get(f"{base}/{sha(data)}?name=Rechnung%20M%C3%A4rz.pdf&type=application/pdf",
                                headers=auth) as reply:
                assert reply.status == 200 and await reply.read() == data
                assert reply.headers["Content-Type"] == "application/pdf"
                assert reply.headers["Content-Disposition"] == \
                    "attachment; filename*=UTF-8''Rechnung%20M%C3%A4rz.pdf"
                assert "sandbox" in reply.headers["Content-Security-Policy"]
            async with http.get(f"{base}/{sha(data)}?type=text/html;%20x", headers=auth) as reply:
                assert reply.headers["Content-Type"] == "application/octet-stream"
            async with http.get(f"{base}/{sha(data)}") as reply:
                assert reply.status == 401 and (await reply.json())["code"] == "unauthenticated"
            async with http.get(f"{base}/{sha(b'none')}", headers=auth) as reply:
                assert reply.status == 404 and (await reply.json())["code"] == "not_found"
            other = os.urandom(1000)
            async with http.put(f"{base}/{sha(b'else')}", data=other, headers=auth) as reply:
                body = await reply.json()
                assert reply.status == 400 and body["code"] == "invalid_argument" and "not the header's" in body["message"]
            big = os.urandom(3 * MIB + 1)
            async with http.put(f"{base}/{sha(big)}", data=big, headers=auth) as reply:
                body = await reply.json()
                assert reply.status == 413 and body["code"] == "resource_exhausted"
                assert "DURABLE_MAX_FILE_BYTES" in body["message"]
        assert await stored(database_url, sha(b"else")) == (0, 0) and await stored(database_url, sha(big)) == (0, 0)
    finally:
        await sidecar.stop(grace=0.5)


async def test_the_cli_shows_a_checkpoints_files(harness: Harness, database_url: str) -> None:
    from tests.sidecar.test_server import _cli

    s = harness.alpha
    data = os.urandom(3000)
    await upload(s, data)
    key = new_key()
    await start(s, key)
    await save(s, item(key, "downloaded", {"n": 1}, files=[ref("data", data, "scan 1.pdf")]))
    ns = harness.sidecar.settings.tokens[s.token]
    listed = await asyncio.to_thread(_cli, database_url, "checkpoints", "list", WF, key, "--namespace", ns)
    assert listed.returncode == 0 and "FILES" in listed.stdout.upper(), listed.stdout
    shown = await asyncio.to_thread(_cli, database_url, "checkpoints", "show", WF, key, "--namespace", ns)
    assert shown.returncode == 0, shown.stderr
    assert "scan 1.pdf" in shown.stdout and sha(data) in shown.stdout and "application/pdf" in shown.stdout
