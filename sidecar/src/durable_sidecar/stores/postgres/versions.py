"""VersionStore: workflow snapshots, the per-workflow head row and the version change log."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from ...domain import ChangeKind, ChangeLogEntry, InstanceMove, NewVersion, Page, Version, WorkflowHead
from .. import base, core
from ..base import Conn
from ..core import VERSION_META as _META
from ..core import WORKFLOW_WHERE as _WF
from ..paging import cut_page, decode_cursor
from .db import DIALECT, pg


class VersionStore(base.VersionStore):
    """Reads and writes versions; every method runs inside the caller's transaction."""

    async def head_txn(self, conn: Conn, namespace: str, workflow_id: str) -> WorkflowHead | None:
        cur = await pg(conn).execute(
            f"SELECT latest_version, current_version FROM durable_workflows WHERE {_WF}",
            {"ns": namespace, "wf": workflow_id},
        )
        row = await cur.fetchone()
        return WorkflowHead(row["latest_version"], row["current_version"]) if row else None

    async def lock_head_txn(self, conn: Conn, namespace: str, workflow_id: str) -> WorkflowHead:
        """Creates the head row if needed and locks it until the transaction ends."""
        cur = await pg(conn).execute(
            """INSERT INTO durable_workflows (namespace, workflow_id) VALUES (%(ns)s, %(wf)s)
               ON CONFLICT (namespace, workflow_id) DO UPDATE SET namespace = EXCLUDED.namespace
               RETURNING latest_version, current_version""",
            {"ns": namespace, "wf": workflow_id},
        )
        row = await cur.fetchone()
        assert row is not None
        return WorkflowHead(row["latest_version"], row["current_version"])

    async def set_head_txn(self, conn: Conn, namespace: str, workflow_id: str, *, latest: int, current: int) -> None:
        await pg(conn).execute(
            f"""UPDATE durable_workflows SET latest_version = %(latest)s, current_version = %(current)s,
                       updated_at = now()
                WHERE {_WF}""",
            {"ns": namespace, "wf": workflow_id, "latest": latest, "current": current},
        )

    async def claim_n8n_check_txn(self, conn: Conn, namespace: str, workflow_id: str, *, interval_seconds: int) -> bool:
        """Whether this caller should ask n8n now, judged by database time.

        Always true while the workflow has no version (nothing to bind otherwise);
        else true for one caller per interval (0: never), who records the time.
        """
        params = {"ns": namespace, "wf": workflow_id, "interval": interval_seconds}
        cur = await pg(conn).execute(
            f"""SELECT current_version,
                       coalesce(n8n_checked_at < now() - make_interval(secs => %(interval)s), true) AS due
                FROM durable_workflows WHERE {_WF}""",
            params,
        )
        row = await cur.fetchone()
        if row is None or row["current_version"] == 0:
            await self.mark_n8n_checked_txn(conn, namespace, workflow_id)
            return True
        if interval_seconds <= 0 or not row["due"]:
            return False
        # Concurrent callers re-check the condition after the first commits: one wins.
        cur = await pg(conn).execute(
            f"""UPDATE durable_workflows SET n8n_checked_at = now()
                WHERE {_WF} AND (n8n_checked_at IS NULL
                                 OR n8n_checked_at < now() - make_interval(secs => %(interval)s))
                RETURNING 1""",
            params,
        )
        return await cur.fetchone() is not None

    async def mark_n8n_checked_txn(self, conn: Conn, namespace: str, workflow_id: str) -> None:
        await pg(conn).execute(
            """INSERT INTO durable_workflows (namespace, workflow_id, n8n_checked_at) VALUES (%(ns)s, %(wf)s, now())
               ON CONFLICT (namespace, workflow_id) DO UPDATE SET n8n_checked_at = now()""",
            {"ns": namespace, "wf": workflow_id},
        )

    async def find_by_hash_txn(self, conn: Conn, namespace: str, workflow_id: str,
                               content_hash: str) -> tuple[Version, int] | None:
        """The version with this content and the workflow's current version number."""
        cur = await pg(conn).execute(
            f"""SELECT {", ".join("v." + c.strip() for c in _META.split(","))}, w.current_version
                FROM durable_versions v JOIN durable_workflows w USING (namespace, workflow_id)
                WHERE v.namespace = %(ns)s AND v.workflow_id = %(wf)s AND v.content_hash = %(hash)s""",
            {"ns": namespace, "wf": workflow_id, "hash": content_hash},
        )
        row = await cur.fetchone()
        return (core.version_of(DIALECT, row), row["current_version"]) if row else None

    async def insert_txn(self, conn: Conn, new: NewVersion, version: int) -> Version:
        cur = await pg(conn).execute(
            f"""INSERT INTO durable_versions
                    (namespace, workflow_id, version, content_hash, n8n_version_id, label, note, definition_json,
                     node_names, created_by)
                VALUES (%(ns)s, %(wf)s, %(version)s, %(hash)s, %(n8n)s, %(label)s, %(note)s, %(definition)s,
                        %(nodes)s, %(actor)s)
                RETURNING {_META}""",
            {"ns": new.namespace, "wf": new.workflow_id, "version": version, "hash": new.content_hash,
             "n8n": new.n8n_version_id, "label": new.label, "note": new.note, "definition": new.definition_json,
             "nodes": list(new.node_names), "actor": new.actor},
        )
        row = await cur.fetchone()
        assert row is not None
        return core.version_of(DIALECT, row)

    async def get_txn(self, conn: Conn, namespace: str, workflow_id: str, version: int, *,
                      with_definition: bool) -> Version | None:
        cols = _META + (", definition_json" if with_definition else "")
        cur = await pg(conn).execute(
            f"SELECT {cols} FROM durable_versions WHERE {_WF} AND version = %(version)s",
            {"ns": namespace, "wf": workflow_id, "version": version},
        )
        row = await cur.fetchone()
        return core.version_of(DIALECT, row) if row else None

    async def node_names_txn(self, conn: Conn, namespace: str, workflow_id: str,
                             versions: list[int]) -> dict[int, frozenset[str]]:
        cur = await pg(conn).execute(
            f"SELECT version, node_names FROM durable_versions WHERE {_WF} AND version = ANY(%(versions)s)",
            {"ns": namespace, "wf": workflow_id, "versions": versions},
        )
        return {row["version"]: frozenset(row["node_names"]) for row in await cur.fetchall()}

    async def list_txn(self, conn: Conn, namespace: str, workflow_id: str, page: Page) -> tuple[list[Version], str]:
        after, params = core.before_page(page, "version")
        cur = await pg(conn).execute(
            f"SELECT {_META} FROM durable_versions WHERE {_WF}{after} ORDER BY version DESC LIMIT %(limit)s",
            {**params, **core.workflow_params(namespace, workflow_id)},
        )
        rows = [core.version_of(DIALECT, r) for r in await cur.fetchall()]
        return cut_page(rows, page.size, lambda r: [r.version])

    async def log_registration_txn(self, conn: Conn, new: NewVersion, *, from_version: int, to_version: int,
                                   reason: str) -> None:
        await pg(conn).execute(
            """INSERT INTO durable_version_changes (namespace, workflow_id, kind, from_version, to_version, actor, reason)
               VALUES (%(ns)s, %(wf)s, %(kind)s, %(from)s, %(to)s, %(actor)s, %(reason)s)""",
            {"ns": new.namespace, "wf": new.workflow_id, "kind": ChangeKind.VERSION_REGISTERED.value,
             "from": from_version, "to": to_version, "actor": new.actor, "reason": reason},
        )

    async def log_moves_txn(self, conn: Conn, namespace: str, workflow_id: str, moves: list[InstanceMove], *,
                            actor: str, reason: str) -> None:
        """One change-log row per moved instance, in one statement."""
        await pg(conn).execute(
            """INSERT INTO durable_version_changes
                   (namespace, workflow_id, kind, instance_key, from_version, to_version, actor, reason)
               SELECT %(ns)s, %(wf)s, %(kind)s, m.key, m.from_v, m.to_v, %(actor)s, %(reason)s
               FROM unnest(%(keys)s::text[], %(froms)s::bigint[], %(tos)s::bigint[]) AS m(key, from_v, to_v)""",
            {"ns": namespace, "wf": workflow_id, "kind": ChangeKind.INSTANCE_MOVED.value,
             "keys": [m.instance_key for m in moves], "froms": [m.from_version for m in moves],
             "tos": [m.to_version for m in moves], "actor": actor, "reason": reason},
        )

    async def changes_txn(self, conn: Conn, namespace: str, workflow_id: str, instance_key: str,
                          page: Page) -> tuple[list[ChangeLogEntry], str]:
        where = [sql.SQL("namespace = %(ns)s")]
        params: dict[str, Any] = {"ns": namespace, "limit": page.size + 1}
        if workflow_id:
            where.append(sql.SQL("workflow_id = %(wf)s"))
            params["wf"] = workflow_id
        if instance_key:
            where.append(sql.SQL("instance_key = %(key)s"))
            params["key"] = instance_key
        if page.token:
            (before,) = decode_cursor(page.token, 1)
            where.append(sql.SQL("id < %(before)s"))
            params["before"] = before if isinstance(before, int) else 0
        query = sql.SQL(
            "SELECT id, kind, workflow_id, instance_key, from_version, to_version, actor, reason, created_at "
            "FROM durable_version_changes WHERE {where} ORDER BY id DESC LIMIT %(limit)s"
        ).format(where=sql.SQL(" AND ").join(where))
        cur = await pg(conn).execute(query, params)
        rows = [core.change_of(DIALECT, r) for r in await cur.fetchall()]
        return cut_page(rows, page.size, lambda r: [r.id])
