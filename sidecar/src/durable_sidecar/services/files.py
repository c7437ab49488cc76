"""FileService: files (n8n binary data) stored once per content, streamed both ways, checked before any write.

An upload is spooled (in memory up to one chunk, then to a temporary file) and
hashed as it arrives; only a whole content whose size and SHA-256 match its
header is written, in one transaction. The limits (a file, a checkpoint's
files, a namespace's bytes) are checked before anything is written. A
checkpoint or a completed key refers to contents by hash (the references go
with it); contents nothing refers to are pruned by the sweep after a grace
period, which covers an upload whose save has not been made yet.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import IO

from .. import validation
from ..domain import InstanceRef, KeyRef
from ..domain_files import CHUNK_BYTES, FileLimits, FileRef
from ..errors import FailedPrecondition, InvalidArgument, NotFound, TooLarge
from ..stores.base import Conn, Database
from ..stores.checkpoints import CheckpointStore
from ..stores.files import FileStore
from .instance_rows import check_ref

log = logging.getLogger(__name__)

MAX_STAT_HASHES = 1000
_MAX_PROPERTY = 255
_MAX_FILE_NAME = 1024
_MAX_MIME_TYPE = 255
# Contents deleted per sweep transaction.
_PRUNE_BATCH = 100


def _size(n: int) -> str:
    """A size as the settings take it (bytes), with MiB beside it when large."""
    return f"{n:,} bytes ({n / 1048576:.1f} MiB)" if n >= 1048576 else f"{n:,} bytes"


class FileService:
    def __init__(self, db: Database, store: FileStore, checkpoints: CheckpointStore, limits: FileLimits, *,
                 grace_seconds: int) -> None:
        self.db = db
        self.store = store
        self.checkpoints = checkpoints
        self.limits = limits
        self.grace_seconds = grace_seconds

    # --- what a save names --------------------------------------------------------------------------------

    def check_refs(self, field: str, files: tuple[FileRef, ...]) -> None:
        """A checkpoint's files as sent: well formed and within the per-file and per-checkpoint limits."""
        lim = self.limits
        if len(files) > lim.max_checkpoint_files:
            raise TooLarge(f"{field}: {len(files)} files; the limit is {lim.max_checkpoint_files} "
                           "(DURABLE_MAX_CHECKPOINT_FILES)")
        seen: set[str] = set()
        total = 0
        for i, f in enumerate(files):
            at = f"{field}[{i}]"
            validation.identifier(f"{at}.property", f.property, limit=_MAX_PROPERTY)
            if f.property in seen:
                raise InvalidArgument(f"{at}.property: {f.property!r} appears twice (one file per binary property)")
            seen.add(f.property)
            validation.identifier(f"{at}.file_name", f.file_name, required=False, limit=_MAX_FILE_NAME)
            validation.identifier(f"{at}.mime_type", f.mime_type, required=False, limit=_MAX_MIME_TYPE)
            validation.sha256_hex(f"{at}.sha256", f.sha256)
            if f.size_bytes < 0:
                raise InvalidArgument(f"{at}.size_bytes must not be negative")
            if f.size_bytes > lim.max_file_bytes:
                raise TooLarge(f"{at}: {_size(f.size_bytes)}; the limit per file is {_size(lim.max_file_bytes)} "
                               "(DURABLE_MAX_FILE_BYTES)")
            total += f.size_bytes
        if total > lim.max_checkpoint_file_bytes:
            raise TooLarge(f"{field}: {_size(total)} in all; the limit per checkpoint is "
                           f"{_size(lim.max_checkpoint_file_bytes)} (DURABLE_MAX_CHECKPOINT_FILE_BYTES)")

    async def verify_txn(self, conn: Conn, namespace: str, named: list[tuple[str, tuple[FileRef, ...]]]) -> None:
        """Every content the files name is held by the namespace at the size named (FailedPrecondition)."""
        hashes = sorted({f.sha256 for _, files in named for f in files})
        if not hashes:
            return
        held = await self.store.sizes_txn(conn, namespace, hashes, hold=True)
        for field, files in named:
            for i, f in enumerate(files):
                size = held.get(f.sha256)
                if size is None:
                    raise FailedPrecondition(f"{field}[{i}]: no file with sha256 {f.sha256} in this namespace: upload "
                                             "it first (FileService.UploadFile)")
                if size != f.size_bytes:
                    raise FailedPrecondition(f"{field}[{i}]: the file with sha256 {f.sha256} is {size} bytes, not "
                                             f"{f.size_bytes}")

    # --- contents ------------------------------------------------------------------------------------------

    async def stat(self, namespace: str, hashes: list[str]) -> list[str]:
        if not hashes:
            raise InvalidArgument("sha256 is empty: name at least one content")
        if len(hashes) > MAX_STAT_HASHES:
            raise InvalidArgument(f"{len(hashes)} hashes; the limit is {MAX_STAT_HASHES}")
        for i, h in enumerate(hashes):
            validation.sha256_hex(f"sha256[{i}]", h)

        async def txn(conn: Conn) -> dict[str, int]:
            return await self.store.sizes_txn(conn, namespace, sorted(set(hashes)))

        held = await self.db.transaction(txn)
        return [h for h in hashes if h in held]

    async def _room(self, namespace: str, sha256: str, size_bytes: int, conn: Conn) -> bool:
        """Whether the namespace holds the content; TooLarge when it does not and has no room for it."""
        held = await self.store.sizes_txn(conn, namespace, [sha256])
        if sha256 in held:
            if held[sha256] != size_bytes:
                raise InvalidArgument(f"the header says {size_bytes} bytes; the content with sha256 {sha256} is "
                                      f"{held[sha256]} bytes")
            return True
        used = await self.store.usage_txn(conn, namespace)
        limit = self.limits.max_namespace_file_bytes
        if used + size_bytes > limit:
            raise TooLarge(f"the namespace holds {_size(used)} of files; {_size(size_bytes)} more would pass its "
                           f"limit of {_size(limit)} (DURABLE_MAX_NAMESPACE_FILE_BYTES): nothing stored")
        return False

    async def upload(self, namespace: str, sha256: str, size_bytes: int,
                     chunks: AsyncIterator[bytes]) -> bool:
        """Stores the content the chunks carry; False (nothing read or written) when the namespace holds it."""
        validation.sha256_hex("header.sha256", sha256)
        if size_bytes < 0:
            raise InvalidArgument("header.size_bytes must not be negative")
        if size_bytes > self.limits.max_file_bytes:
            raise TooLarge(f"{_size(size_bytes)}; the limit per file is {_size(self.limits.max_file_bytes)} "
                           "(DURABLE_MAX_FILE_BYTES): nothing stored")

        async def room(conn: Conn) -> bool:
            return await self._room(namespace, sha256, size_bytes, conn)

        if await self.db.transaction(room):
            return False
        with tempfile.SpooledTemporaryFile(max_size=CHUNK_BYTES, prefix="durable-upload-") as spool:
            await self._spool(spool, sha256, size_bytes, chunks)

            def parts() -> Iterator[bytes]:
                spool.seek(0)
                while data := spool.read(CHUNK_BYTES):
                    yield data

            async def txn(conn: Conn) -> bool:
                if await self._room(namespace, sha256, size_bytes, conn):
                    return False  # another upload of the same content won the race
                return await self.store.insert_txn(conn, namespace, sha256, size_bytes, parts())

            stored = await self.db.transaction(txn)
        log.info("file stored" if stored else "file already held",
                 extra={"sha256": sha256, "size_bytes": size_bytes})
        return stored

    @staticmethod
    async def _spool(spool: IO[bytes], sha256: str, size_bytes: int, chunks: AsyncIterator[bytes]) -> None:
        digest = hashlib.sha256()
        total = 0
        async for chunk in chunks:
            if not chunk:
                raise InvalidArgument(f"chunk at byte {total} is empty: send 1 byte to 1 MiB per chunk")
            if len(chunk) > CHUNK_BYTES:
                raise InvalidArgument(f"chunk at byte {total} is {len(chunk)} bytes; the limit per chunk is "
                                      f"{CHUNK_BYTES} (1 MiB): nothing stored")
            total += len(chunk)
            if total > size_bytes:
                raise InvalidArgument(f"the content is longer than the header's {size_bytes} bytes: nothing stored")
            if len(chunk) > 64 * 1024:
                await asyncio.to_thread(digest.update, chunk)  # hashlib releases the GIL on large buffers
            else:
                digest.update(chunk)
            spool.write(chunk)
        if total != size_bytes:
            raise InvalidArgument(f"the stream ended after {total} of the header's {size_bytes} bytes: nothing "
                                  "stored")
        if digest.hexdigest() != sha256:
            raise InvalidArgument(f"the content's SHA-256 is {digest.hexdigest()}, not the header's {sha256}: "
                                  "nothing stored")

    async def download(self, namespace: str, sha256: str) -> AsyncIterator[tuple[bytes, int]]:
        """(chunk, the content's size) in order, one chunk read per transaction; NotFound when not held."""
        validation.sha256_hex("sha256", sha256)

        async def head(conn: Conn) -> tuple[int, int] | None:
            return await self.store.file_txn(conn, namespace, sha256)

        found = await self.db.transaction(head)
        if found is None:
            raise NotFound(f"no file with sha256 {sha256} in this namespace")
        size, count = found
        if count == 0:
            yield b"", size
            return
        for index in range(count):
            async def read(conn: Conn, index: int = index) -> bytes | None:
                return await self.store.chunk_txn(conn, namespace, sha256, index)

            data = await self.db.transaction(read)
            if data is None:
                raise NotFound(f"the file with sha256 {sha256} was pruned while it was read")
            yield data, size

    # --- references ----------------------------------------------------------------------------------------

    async def checkpoint_files(self, ref: InstanceRef, sequence: int) -> tuple[int, tuple[FileRef, ...]]:
        """(the checkpoint's sequence, its files); sequence 0 is the instance's newest checkpoint."""
        check_ref(ref)
        if sequence < 0:
            raise InvalidArgument("sequence must not be negative")

        async def txn(conn: Conn) -> tuple[int, tuple[FileRef, ...]]:
            if sequence == 0:
                exists, latest = await self.checkpoints.latest_txn(conn, ref, state_below=0)
                if latest is None:
                    raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} "
                                   + ("has no checkpoint" if exists else "is unknown"))
                seq, count = latest.sequence, latest.file_count
            else:
                found = await self.checkpoints.get_txn(conn, ref, sequence, with_state=False)
                if found is None:
                    raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} has no checkpoint {sequence}")
                seq, count = sequence, found.file_count
            return seq, (await self.store.checkpoint_files_txn(conn, ref, seq) if count else ())

        return await self.db.transaction(txn)

    async def key_files(self, namespace: str, keys: list[tuple[str, str]],
                        max_keys: int) -> list[tuple[FileRef, ...]]:
        if not keys:
            raise InvalidArgument("keys is empty: name at least one key")
        if len(keys) > max_keys:
            raise InvalidArgument(f"{len(keys)} keys; the limit is {max_keys} (DURABLE_MAX_BATCH_ITEMS)")
        for i, (scope, key) in enumerate(keys):
            validation.identifier(f"keys[{i}].scope", scope)
            validation.identifier(f"keys[{i}].key", key)

        async def txn(conn: Conn) -> list[tuple[FileRef, ...]]:
            return [await self.store.key_files_txn(conn, namespace, scope, key) for scope, key in keys]

        return await self.db.transaction(txn)

    async def attach_txn(self, conn: Conn, ref: InstanceRef, sequence: int, files: tuple[FileRef, ...]) -> None:
        await self.store.attach_txn(conn, ref, sequence, files)

    async def files_of_txn(self, conn: Conn, ref: InstanceRef, sequence: int) -> tuple[FileRef, ...]:
        return await self.store.checkpoint_files_txn(conn, ref, sequence)

    async def set_key_files_txn(self, conn: Conn, key: KeyRef, files: tuple[FileRef, ...]) -> None:
        await self.store.set_key_files_txn(conn, key.namespace, key.scope, key.key, files)

    # --- pruning -------------------------------------------------------------------------------------------

    async def prune(self) -> tuple[int, int]:
        """Deletes every content nothing refers to that is older than the grace period; (count, bytes)."""
        count = size = 0
        while True:
            async def txn(conn: Conn) -> tuple[int, int]:
                return await self.store.prune_txn(conn, grace_seconds=self.grace_seconds, limit=_PRUNE_BATCH)

            n, b = await self.db.transaction(txn)
            count, size = count + n, size + b
            if n < _PRUNE_BATCH:
                return count, size

    async def run_sweeper(self, stopping: asyncio.Event, *, interval_seconds: float) -> None:
        """Prunes unreferenced contents every interval until stopping; a failed pass is logged and tried again."""
        while not stopping.is_set():
            try:
                await asyncio.wait_for(stopping.wait(), timeout=interval_seconds)
                return
            except TimeoutError:
                pass
            try:
                count, size = await self.prune()
            except Exception as exc:  # noqa: BLE001 - the sweep must outlive a database outage
                log.warning("file sweep failed; retrying next interval", extra={"error": repr(exc)})
                continue
            if count:
                log.info("unreferenced files pruned", extra={"count": count, "bytes": size})
