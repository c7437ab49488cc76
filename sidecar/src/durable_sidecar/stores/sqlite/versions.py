"""VersionStore on SQLite: workflow snapshots, the per-workflow head row and the version change log."""

from __future__ import annotations

import json

from ...domain import ChangeKind, ChangeLogEntry, InstanceMove, NewVersion, Page, Version, WorkflowHead
from .. import base, core
from ..base import Conn
from ..core import VERSION_META as _META
from ..paging import cut_page, decode_cursor
from .db import DIALECT, lite

_WF = DIALECT.sql(core.WORKFLOW_WHERE)



class VersionStore(base.VersionStore):
    """Reads and writes versions; every method runs inside the caller's transaction."""

    async def head_txn(self, conn: Conn, namespace: str, workflow_id: str) -> WorkflowHead | None:
        row = await lite(conn).one(f"SELECT latest_version, current_version FROM durable_workflows WHERE {_WF}",
                                   {"ns": namespace, "wf": workflow_id})
        return WorkflowHead(row["latest_version"], row["current_version"]) if row else None

    async def lock_head_txn(self, conn: Conn, namespace: str, workflow_id: str) -> WorkflowHead:
        c = lite(conn)
        row = await c.one(
            """INSERT INTO durable_workflows (namespace, workflow_id, created_at, updated_at)
               VALUES (:ns, :wf, :now, :now)
               ON CONFLICT (namespace, workflow_id) DO UPDATE SET namespace = excluded.namespace
               RETURNING latest_version, current_version""",
            {"ns": namespace, "wf": workflow_id, "now": c.now_us},
        )
        assert row is not None
        return WorkflowHead(row["latest_version"], row["current_version"])

    async def set_head_txn(self, conn: Conn, namespace: str, workflow_id: str, *, latest: int, current: int) -> None:
        c = lite(conn)
        await c.run(
            f"""UPDATE durable_workflows SET latest_version = :latest, current_version = :current, updated_at = :now
                WHERE {_WF}""",
            {"ns": namespace, "wf": workflow_id, "latest": latest, "current": current, "now": c.now_us},
        )

    async def claim_n8n_check_txn(self, conn: Conn, namespace: str, workflow_id: str, *,
                                  interval_seconds: int) -> bool:
        c = lite(conn)
        params = {"ns": namespace, "wf": workflow_id, "cutoff": c.after(-interval_seconds), "now": c.now_us}
        row = await c.one(
            f"""SELECT current_version, coalesce(n8n_checked_at < :cutoff, 1) AS due
                FROM durable_workflows WHERE {_WF}""",
            params,
        )
        if row is None or row["current_version"] == 0:
            await self.mark_n8n_checked_txn(conn, namespace, workflow_id)
            return True
        if interval_seconds <= 0 or not row["due"]:
            return False
        found = await c.one(
            f"""UPDATE durable_workflows SET n8n_checked_at = :now
                WHERE {_WF} AND (n8n_checked_at IS NULL OR n8n_checked_at < :cutoff)
                RETURNING 1""",
            params,
        )
        return found is not None

    async def mark_n8n_checked_txn(self, conn: Conn, namespace: str, workflow_id: str) -> None:
        c = lite(conn)
        await c.run(
            """INSERT INTO durable_workflows (namespace, workflow_id, n8n_checked_at, created_at, updated_at)
               VALUES (:ns, :wf, :now, :now, :now)
               ON CONFLICT (namespace, workflow_id) DO UPDATE SET n8n_checked_at = :now""",
            {"ns": namespace, "wf": workflow_id, "now": c.now_us},
        )

    async def find_by_hash_txn(self, conn: Conn, namespace: str, workflow_id: str,
                               content_hash: str) -> tuple[Version, int] | None:
        row = await lite(conn).one(
            f"""SELECT {", ".join("v." + c.strip() for c in _META.split(","))}, w.current_version
                FROM durable_versions v
                JOIN durable_workflows w ON w.namespace = v.namespace AND w.workflow_id = v.workflow_id
                WHERE v.namespace = :ns AND v.workflow_id = :wf AND v.content_hash = :hash""",
            {"ns": namespace, "wf": workflow_id, "hash": content_hash},
        )
        return (core.version_of(DIALECT, row), row["current_version"]) if row else None

    async def insert_txn(self, conn: Conn, new: NewVersion, version: int) -> Version:
        c = lite(conn)
        row = await c.one(
            f"""INSERT INTO durable_versions
                    (namespace, workflow_id, version, content_hash, n8n_version_id, label, note, definition_json,
                     node_names, created_by, created_at)
                VALUES (:ns, :wf, :version, :hash, :n8n, :label, :note, :definition, :nodes, :actor, :now)
                RETURNING {_META}""",
            {"ns": new.namespace, "wf": new.workflow_id, "version": version, "hash": new.content_hash,
             "n8n": new.n8n_version_id, "label": new.label, "note": new.note, "definition": new.definition_json,
             "nodes": json.dumps(list(new.node_names)), "actor": new.actor, "now": c.now_us},
        )
        assert row is not None
        return core.version_of(DIALECT, row)

    async def get_txn(self, conn: Conn, namespace: str, workflow_id: str, version: int, *,
                      with_definition: bool) -> Version | None:
        cols = _META + (", definition_json" if with_definition else "")
        row = await lite(conn).one(f"SELECT {cols} FROM durable_versions WHERE {_WF} AND version = :version",
                                   {"ns": namespace, "wf": workflow_id, "version": version})
        return core.version_of(DIALECT, row) if row else None

    async def node_names_txn(self, conn: Conn, namespace: str, workflow_id: str,
                             versions: list[int]) -> dict[int, frozenset[str]]:
        rows = await lite(conn).all(
            f"""SELECT version, node_names FROM durable_versions
                WHERE {_WF} AND version IN (SELECT value FROM json_each(:versions))""",
            {"ns": namespace, "wf": workflow_id, "versions": json.dumps(versions)},
        )
        return {row["version"]: frozenset(json.loads(row["node_names"])) for row in rows}

    async def list_txn(self, conn: Conn, namespace: str, workflow_id: str,
                       page: Page) -> tuple[list[Version], str]:
        after, params = core.before_page(page, "version")
        found = await lite(conn).all(
            f"SELECT {_META} FROM durable_versions WHERE {_WF}{DIALECT.sql(after)} ORDER BY version DESC LIMIT :limit",
            {**params, **core.workflow_params(namespace, workflow_id)})
        rows = [core.version_of(DIALECT, r) for r in found]
        return cut_page(rows, page.size, lambda r: [r.version])

    async def log_registration_txn(self, conn: Conn, new: NewVersion, *, from_version: int, to_version: int,
                                   reason: str) -> None:
        c = lite(conn)
        await c.run(
            """INSERT INTO durable_version_changes
                   (namespace, workflow_id, kind, from_version, to_version, actor, reason, created_at)
               VALUES (:ns, :wf, :kind, :from, :to, :actor, :reason, :now)""",
            {"ns": new.namespace, "wf": new.workflow_id, "kind": ChangeKind.VERSION_REGISTERED.value,
             "from": from_version, "to": to_version, "actor": new.actor, "reason": reason, "now": c.now_us},
        )

    async def log_moves_txn(self, conn: Conn, namespace: str, workflow_id: str, moves: list[InstanceMove], *,
                            actor: str, reason: str) -> None:
        c = lite(conn)
        await c.run_many(
            """INSERT INTO durable_version_changes
                   (namespace, workflow_id, kind, instance_key, from_version, to_version, actor, reason, created_at)
               VALUES (:ns, :wf, :kind, :key, :from, :to, :actor, :reason, :now)""",
            [{"ns": namespace, "wf": workflow_id, "kind": ChangeKind.INSTANCE_MOVED.value, "key": m.instance_key,
              "from": m.from_version, "to": m.to_version, "actor": actor, "reason": reason, "now": c.now_us}
             for m in moves],
        )

    async def changes_txn(self, conn: Conn, namespace: str, workflow_id: str, instance_key: str,
                          page: Page) -> tuple[list[ChangeLogEntry], str]:
        where = ["namespace = :ns"]
        params: dict[str, object] = {"ns": namespace, "limit": page.size + 1}
        if workflow_id:
            where.append("workflow_id = :wf")
            params["wf"] = workflow_id
        if instance_key:
            where.append("instance_key = :key")
            params["key"] = instance_key
        if page.token:
            (before,) = decode_cursor(page.token, 1)
            where.append("id < :before")
            params["before"] = before if isinstance(before, int) else 0
        found = await lite(conn).all(
            f"""SELECT id, kind, workflow_id, instance_key, from_version, to_version, actor, reason, created_at
                FROM durable_version_changes WHERE {" AND ".join(where)} ORDER BY id DESC LIMIT :limit""",
            params,
        )
        rows = [core.change_of(DIALECT, r) for r in found]
        return cut_page(rows, page.size, lambda r: [r.id])
