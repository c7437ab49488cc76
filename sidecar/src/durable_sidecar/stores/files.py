"""FileStore: contents by hash in chunks (durable_files, durable_file_chunks) and the references checkpoints and
completed keys hold to them, written once for both backends (migration 0018)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..domain import InstanceRef
from ..domain_files import FileRef
from .base import Conn
from .core import Row, Runner, blob

_REF_COLUMNS = "position, property, file_name, mime_type, sha256, size_bytes"


def _ref(row: Row) -> FileRef:
    return FileRef(property=row["property"], file_name=row["file_name"], mime_type=row["mime_type"],
                   sha256=row["sha256"], size_bytes=int(row["size_bytes"]))


def _ref_rows(files: Iterable[FileRef], **owner: Any) -> list[dict[str, Any]]:
    return [{**owner, "pos": i, "prop": f.property, "name": f.file_name, "mime": f.mime_type, "sha": f.sha256,
             "size": f.size_bytes} for i, f in enumerate(files)]


class FileStore:
    def __init__(self, runner: Runner) -> None:
        self.r = runner
        d = runner.dialect
        now = d.now_sql
        sizes = ("SELECT sha256, size_bytes FROM durable_files WHERE namespace = %(ns)s AND "
                 + d.in_list.format(column="sha256", param="shas"))
        self._sizes = d.sql(sizes)
        # A save's check: the contents stay until it commits (the sweep's delete of one waits for it, then finds
        # it referred to and leaves it).
        self._sizes_held = d.sql(sizes + " ORDER BY sha256" + d.lock(True, share=True))
        self._usage = d.sql("SELECT coalesce(sum(size_bytes), 0) AS n FROM durable_files WHERE namespace = %(ns)s")
        self._insert = d.sql(
            f"""INSERT INTO durable_files (namespace, sha256, size_bytes, chunk_count, created_at)
                VALUES (%(ns)s, %(sha)s, %(size)s, %(chunks)s, {now})
                ON CONFLICT (namespace, sha256) DO NOTHING""")
        self._chunk_insert = d.sql(
            """INSERT INTO durable_file_chunks (namespace, sha256, chunk_index, data)
               VALUES (%(ns)s, %(sha)s, %(i)s, %(data)s)""")
        self._file = d.sql("SELECT size_bytes, chunk_count FROM durable_files WHERE namespace = %(ns)s "
                           "AND sha256 = %(sha)s")
        self._chunk = d.sql("SELECT data FROM durable_file_chunks WHERE namespace = %(ns)s AND sha256 = %(sha)s "
                            "AND chunk_index = %(i)s")
        self._checkpoint_refs_insert = d.sql(
            """INSERT INTO durable_checkpoint_files (namespace, workflow_id, instance_key, sequence, position, property,
                                                     file_name, mime_type, sha256, size_bytes)
               VALUES (%(ns)s, %(wf)s, %(key)s, %(seq)s, %(pos)s, %(prop)s, %(name)s, %(mime)s, %(sha)s, %(size)s)""")
        self._file_count = d.sql(
            """UPDATE durable_checkpoints SET file_count = %(n)s
               WHERE namespace = %(ns)s AND workflow_id = %(wf)s AND instance_key = %(key)s AND sequence = %(seq)s""")
        self._checkpoint_refs = d.sql(
            f"""SELECT {_REF_COLUMNS} FROM durable_checkpoint_files
                WHERE namespace = %(ns)s AND workflow_id = %(wf)s AND instance_key = %(key)s AND sequence = %(seq)s
                ORDER BY position""")
        self._key_refs_delete = d.sql("DELETE FROM durable_key_files WHERE namespace = %(ns)s AND scope = %(scope)s "
                                      "AND key = %(key)s")
        self._key_refs_insert = d.sql(
            """INSERT INTO durable_key_files (namespace, scope, key, position, property, file_name, mime_type, sha256,
                                              size_bytes)
               VALUES (%(ns)s, %(scope)s, %(key)s, %(pos)s, %(prop)s, %(name)s, %(mime)s, %(sha)s, %(size)s)""")
        self._key_refs = d.sql(
            f"""SELECT {_REF_COLUMNS} FROM durable_key_files
                WHERE namespace = %(ns)s AND scope = %(scope)s AND key = %(key)s ORDER BY position""")
        # Contents no checkpoint and no key refers to, older than the grace period (any namespace: the sweep's).
        self._unreferenced = d.sql(
            f"""SELECT f.namespace, f.sha256, f.size_bytes FROM durable_files f
                WHERE f.created_at < {d.ago_sql}
                  AND NOT EXISTS (SELECT 1 FROM durable_checkpoint_files c
                                  WHERE c.namespace = f.namespace AND c.sha256 = f.sha256)
                  AND NOT EXISTS (SELECT 1 FROM durable_key_files k
                                  WHERE k.namespace = f.namespace AND k.sha256 = f.sha256)
                LIMIT %(limit)s""")
        # Taken before the delete: a save holding the content (FOR SHARE) finishes first, and the delete's own
        # statement then sees the references that save committed.
        self._lock = d.sql("SELECT 1 AS held FROM durable_files WHERE namespace = %(ns)s AND sha256 = %(sha)s"
                           + d.lock(True))
        self._delete = d.sql(
            """DELETE FROM durable_files WHERE namespace = %(ns)s AND sha256 = %(sha)s
               AND NOT EXISTS (SELECT 1 FROM durable_checkpoint_files c
                               WHERE c.namespace = %(ns)s AND c.sha256 = %(sha)s)
               AND NOT EXISTS (SELECT 1 FROM durable_key_files k WHERE k.namespace = %(ns)s AND k.sha256 = %(sha)s)""")

    # --- contents ------------------------------------------------------------------------------------------

    async def sizes_txn(self, conn: Conn, namespace: str, hashes: list[str], *,
                        hold: bool = False) -> dict[str, int]:
        """The size of each of these contents the namespace holds; `hold`: kept from deletion until the
        transaction ends (a save about to refer to them)."""
        rows = await self.r.all(conn, self._sizes_held if hold else self._sizes,
                                {"ns": namespace, "shas": self.r.dialect.list_param(hashes)})
        return {r["sha256"]: int(r["size_bytes"]) for r in rows}

    async def usage_txn(self, conn: Conn, namespace: str) -> int:
        """The bytes of every content the namespace holds."""
        row = await self.r.one(conn, self._usage, {"ns": namespace})
        return int(row["n"]) if row else 0

    async def insert_txn(self, conn: Conn, namespace: str, sha256: str, size_bytes: int,
                         chunks: Iterable[bytes]) -> bool:
        """Writes a content and its chunks (taken from `chunks` one at a time); False, writing nothing, when the
        namespace holds it already."""
        chunk_count = 0
        if not await self.r.execute(conn, self._insert, await self.r.with_now(
                conn, ns=namespace, sha=sha256, size=size_bytes, chunks=0)):
            return False
        for data in chunks:
            await self.r.execute(conn, self._chunk_insert, {"ns": namespace, "sha": sha256, "i": chunk_count,
                                                            "data": data})
            chunk_count += 1
        await self.r.execute(conn, self.r.dialect.sql(
            "UPDATE durable_files SET chunk_count = %(n)s WHERE namespace = %(ns)s AND sha256 = %(sha)s"),
            {"n": chunk_count, "ns": namespace, "sha": sha256})
        return True

    async def file_txn(self, conn: Conn, namespace: str, sha256: str) -> tuple[int, int] | None:
        """(size in bytes, chunk count) of a content the namespace holds; None when it holds none."""
        row = await self.r.one(conn, self._file, {"ns": namespace, "sha": sha256})
        return (int(row["size_bytes"]), int(row["chunk_count"])) if row else None

    async def chunk_txn(self, conn: Conn, namespace: str, sha256: str, index: int) -> bytes | None:
        row = await self.r.one(conn, self._chunk, {"ns": namespace, "sha": sha256, "i": index}, binary=True)
        return blob(row["data"]) if row else None

    # --- references ----------------------------------------------------------------------------------------

    async def attach_txn(self, conn: Conn, ref: InstanceRef, sequence: int, files: tuple[FileRef, ...]) -> None:
        """The files of a checkpoint just inserted (its file_count with them)."""
        owner = {"ns": ref.namespace, "wf": ref.workflow_id, "key": ref.instance_key, "seq": sequence}
        await self.r.many(conn, self._checkpoint_refs_insert, _ref_rows(files, **owner))
        await self.r.execute(conn, self._file_count, {**owner, "n": len(files)})

    async def checkpoint_files_txn(self, conn: Conn, ref: InstanceRef, sequence: int) -> tuple[FileRef, ...]:
        rows = await self.r.all(conn, self._checkpoint_refs, {"ns": ref.namespace, "wf": ref.workflow_id,
                                                              "key": ref.instance_key, "seq": sequence})
        return tuple(_ref(r) for r in rows)

    async def set_key_files_txn(self, conn: Conn, namespace: str, scope: str, key: str,
                                files: tuple[FileRef, ...]) -> None:
        """The files a key carries from now on (those of the save that completed it)."""
        owner = {"ns": namespace, "scope": scope, "key": key}
        await self.r.execute(conn, self._key_refs_delete, owner)
        if files:
            await self.r.many(conn, self._key_refs_insert, _ref_rows(files, **owner))

    async def key_files_txn(self, conn: Conn, namespace: str, scope: str, key: str) -> tuple[FileRef, ...]:
        rows = await self.r.all(conn, self._key_refs, {"ns": namespace, "scope": scope, "key": key})
        return tuple(_ref(r) for r in rows)

    # --- pruning -------------------------------------------------------------------------------------------

    async def prune_txn(self, conn: Conn, *, grace_seconds: int, limit: int) -> tuple[int, int]:
        """Deletes up to `limit` contents nothing refers to that are older than the grace period; (count, bytes)."""
        rows = await self.r.all(conn, self._unreferenced, await self.r.with_now(conn, seconds=grace_seconds,
                                                                                 limit=limit))
        count = size = 0
        for row in rows:
            key = {"ns": row["namespace"], "sha": row["sha256"]}
            await self.r.all(conn, self._lock, key)
            if await self.r.execute(conn, self._delete, key):
                count += 1
                size += int(row["size_bytes"])
        return count, size
