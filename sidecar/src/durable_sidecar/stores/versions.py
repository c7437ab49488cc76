"""VersionStore: workflow snapshots, the per-workflow head row and the version change log, written once.

Both backends run the same SQL text through their Runner (placeholders,
database time, list parameters come from its Dialect), as stores/waits.py
does. Every method runs inside the caller's transaction.
"""

from __future__ import annotations

from typing import Any

from ..domain import (
    ChangeKind,
    ChangeLogEntry,
    InstanceMove,
    NewVersion,
    Page,
    Version,
    WorkflowHead,
    WorkflowSummary,
)
from .base import Conn
from .core import Dialect, Row, Runner, blob
from .paging import cut_page, decode_cursor

VERSION_META = """namespace, workflow_id, version, content_hash, n8n_version_id, label, note, node_names, created_by,
    created_at"""


WORKFLOW_WHERE = "namespace = %(ns)s AND workflow_id = %(wf)s"


CHANGE_COLUMNS = "id, kind, workflow_id, instance_key, from_version, to_version, actor, reason, created_at"


def optional(row: Row, column: str) -> Any:
    """A column the query may not have selected (None then)."""
    return row[column] if column in row.keys() else None


def version_of(d: Dialect, row: Row) -> Version:
    return Version(
        namespace=row["namespace"],
        workflow_id=row["workflow_id"],
        version=row["version"],
        content_hash=row["content_hash"],
        n8n_version_id=row["n8n_version_id"],
        label=row["label"],
        note=row["note"],
        node_names=d.to_names(row["node_names"]),
        created_by=row["created_by"],
        created_at=d.time(row["created_at"]),
        definition_json=blob(optional(row, "definition_json")),
    )


def change_of(d: Dialect, row: Row) -> ChangeLogEntry:
    return ChangeLogEntry(
        id=row["id"],
        kind=ChangeKind(row["kind"]),
        workflow_id=row["workflow_id"],
        instance_key=row["instance_key"],
        from_version=row["from_version"],
        to_version=row["to_version"],
        actor=row["actor"],
        reason=row["reason"],
        created_at=d.time(row["created_at"]),
    )


def before_page(page: Page, column: str) -> tuple[str, dict[str, Any]]:
    """A newest-first page by an integer column: its condition (' AND column < …', '' on the first page) and
    parameters (the limit asks one row more, for cut_page)."""
    params: dict[str, Any] = {"limit": page.size + 1}
    if not page.token:
        return "", params
    (before,) = decode_cursor(page.token, 1)
    params["before"] = before if isinstance(before, int) else 0
    return f" AND {column} < %(before)s", params


class VersionStore:
    """Reads and writes versions over one backend's Runner."""

    def __init__(self, runner: Runner) -> None:
        self.r = runner
        d = runner.dialect
        now, wf = d.now_sql, WORKFLOW_WHERE
        self._head = d.sql(f"SELECT latest_version, current_version FROM durable_workflows WHERE {wf}")
        # The no-op update takes the row's lock when it exists, so one registration at a time per workflow.
        self._lock_head = d.sql(
            f"""INSERT INTO durable_workflows (namespace, workflow_id, created_at, updated_at)
                VALUES (%(ns)s, %(wf)s, {now}, {now})
                ON CONFLICT (namespace, workflow_id) DO UPDATE SET namespace = excluded.namespace
                RETURNING latest_version, current_version""")
        self._set_head = d.sql(
            f"""UPDATE durable_workflows SET latest_version = %(latest)s, current_version = %(current)s,
                       updated_at = {now}
                WHERE {wf}""")
        due = f"(n8n_checked_at IS NULL OR n8n_checked_at < {d.ago_sql})"
        self._check_due = d.sql(f"SELECT current_version, {due} AS due FROM durable_workflows WHERE {wf}")
        self._claim_check = d.sql(f"UPDATE durable_workflows SET n8n_checked_at = {now} WHERE {wf} AND {due} "
                                  "RETURNING 1")
        self._mark_checked = d.sql(
            f"""INSERT INTO durable_workflows (namespace, workflow_id, n8n_checked_at, created_at, updated_at)
                VALUES (%(ns)s, %(wf)s, {now}, {now}, {now})
                ON CONFLICT (namespace, workflow_id) DO UPDATE SET n8n_checked_at = {now}""")
        self._by_hash = d.sql(
            f"""SELECT {", ".join("v." + c.strip() for c in VERSION_META.split(","))}, w.current_version
                FROM durable_versions v
                JOIN durable_workflows w ON w.namespace = v.namespace AND w.workflow_id = v.workflow_id
                WHERE v.namespace = %(ns)s AND v.workflow_id = %(wf)s AND v.content_hash = %(hash)s""")
        self._insert = d.sql(
            f"""INSERT INTO durable_versions
                    (namespace, workflow_id, version, content_hash, n8n_version_id, label, note, definition_json,
                     node_names, created_by, created_at)
                VALUES (%(ns)s, %(wf)s, %(version)s, %(hash)s, %(n8n)s, %(label)s, %(note)s, %(definition)s,
                        %(nodes)s, %(actor)s, {now})
                RETURNING {VERSION_META}""")
        self._get = {with_definition: d.sql(
            f"SELECT {VERSION_META}{', definition_json' if with_definition else ''} FROM durable_versions "
            f"WHERE {wf} AND version = %(version)s") for with_definition in (False, True)}
        self._node_names = d.sql(f"SELECT version, node_names FROM durable_versions WHERE {wf} AND "
                                 + d.in_list.format(column="version", param="versions"))
        self._change = d.sql(
            f"""INSERT INTO durable_version_changes
                    (namespace, workflow_id, kind, instance_key, from_version, to_version, actor, reason, created_at)
                VALUES (%(ns)s, %(wf)s, %(kind)s, %(key)s, %(from)s, %(to)s, %(actor)s, %(reason)s, {now})""")

    async def head_txn(self, conn: Conn, namespace: str, workflow_id: str) -> WorkflowHead | None:
        """The workflow's head row, when it has one."""
        row = await self.r.one(conn, self._head, {"ns": namespace, "wf": workflow_id})
        return WorkflowHead(row["latest_version"], row["current_version"]) if row else None

    async def lock_head_txn(self, conn: Conn, namespace: str, workflow_id: str) -> WorkflowHead:
        """Creates the head row if needed and locks it until the transaction ends."""
        row = await self.r.one(conn, self._lock_head, await self.r.with_now(conn, ns=namespace, wf=workflow_id))
        assert row is not None
        return WorkflowHead(row["latest_version"], row["current_version"])

    async def set_head_txn(self, conn: Conn, namespace: str, workflow_id: str, *, latest: int, current: int) -> None:
        """Sets the (locked) head's latest and current version numbers."""
        await self.r.all(conn, self._set_head, await self.r.with_now(conn, ns=namespace, wf=workflow_id, latest=latest,
                                                                  current=current))

    async def claim_n8n_check_txn(self, conn: Conn, namespace: str, workflow_id: str, *, interval_seconds: int) -> bool:
        """Whether this caller should ask n8n now, judged by database time.

        Always true while the workflow has no version (nothing to bind otherwise);
        else true for one caller per interval (0: never), who records the time.
        """
        params = await self.r.with_now(conn, ns=namespace, wf=workflow_id, seconds=interval_seconds)
        row = await self.r.one(conn, self._check_due, params)
        if row is None or row["current_version"] == 0:
            await self.mark_n8n_checked_txn(conn, namespace, workflow_id)
            return True
        if interval_seconds <= 0 or not row["due"]:
            return False
        # Concurrent callers re-check the condition after the first commits: one wins.
        return await self.r.one(conn, self._claim_check, params) is not None

    async def mark_n8n_checked_txn(self, conn: Conn, namespace: str, workflow_id: str) -> None:
        """Records that n8n was asked now (creating the head row if needed)."""
        await self.r.all(conn, self._mark_checked, await self.r.with_now(conn, ns=namespace, wf=workflow_id))

    async def find_by_hash_txn(self, conn: Conn, namespace: str, workflow_id: str,
                               content_hash: str) -> tuple[Version, int] | None:
        """The version with this content and the workflow's current version number."""
        row = await self.r.one(conn, self._by_hash, {"ns": namespace, "wf": workflow_id, "hash": content_hash})
        return (version_of(self.r.dialect, row), row["current_version"]) if row else None

    async def insert_txn(self, conn: Conn, new: NewVersion, version: int) -> Version:
        """Stores the snapshot as the given version number."""
        row = await self.r.one(conn, self._insert, await self.r.with_now(
            conn, ns=new.namespace, wf=new.workflow_id, version=version, hash=new.content_hash,
            n8n=new.n8n_version_id, label=new.label, note=new.note, definition=new.definition_json,
            nodes=self.r.dialect.list_param(list(new.node_names)), actor=new.actor))
        assert row is not None
        return version_of(self.r.dialect, row)

    async def get_txn(self, conn: Conn, namespace: str, workflow_id: str, version: int, *,
                      with_definition: bool) -> Version | None:
        """One version, with its definition JSON when asked for."""
        row = await self.r.one(conn, self._get[with_definition], {"ns": namespace, "wf": workflow_id,
                                                                  "version": version})
        return version_of(self.r.dialect, row) if row else None

    async def node_names_txn(self, conn: Conn, namespace: str, workflow_id: str,
                             versions: list[int]) -> dict[int, frozenset[str]]:
        """The step names of each of the versions that exist."""
        d = self.r.dialect
        rows = await self.r.all(conn, self._node_names, {"ns": namespace, "wf": workflow_id,
                                                         "versions": d.list_param(versions)})
        return {row["version"]: frozenset(d.to_names(row["node_names"])) for row in rows}

    async def list_txn(self, conn: Conn, namespace: str, workflow_id: str, page: Page) -> tuple[list[Version], str]:
        """Newest first, without definitions, keyset-paged."""
        d = self.r.dialect
        after, params = before_page(page, "version")
        found = await self.r.all(conn, d.sql(
            f"SELECT {VERSION_META} FROM durable_versions WHERE {WORKFLOW_WHERE}{after} "
            "ORDER BY version DESC LIMIT %(limit)s"), {**params, "ns": namespace, "wf": workflow_id})
        return cut_page([version_of(d, r) for r in found], page.size, lambda r: [r.version])

    async def workflows_txn(self, conn: Conn, namespace: str, page: Page) -> tuple[list[WorkflowSummary], str]:
        """Every workflow id of the namespace with a registered version or an instance, in id order, keyset-paged,
        with its versions (how many, the newest's number and label) and how many instances it has."""
        after = ""
        if page.token:
            (value,) = decode_cursor(page.token, 1)
            after = value if isinstance(value, str) else ""
        rows = await self.r.all(conn, self.r.dialect.sql("""
            SELECT w.workflow_id AS workflow_id,
                   (SELECT count(*) FROM durable_versions v
                     WHERE v.namespace = %(ns)s AND v.workflow_id = w.workflow_id) AS versions,
                   (SELECT v.version FROM durable_versions v WHERE v.namespace = %(ns)s
                      AND v.workflow_id = w.workflow_id ORDER BY v.version DESC LIMIT 1) AS latest,
                   (SELECT v.label FROM durable_versions v WHERE v.namespace = %(ns)s
                      AND v.workflow_id = w.workflow_id ORDER BY v.version DESC LIMIT 1) AS label,
                   (SELECT count(*) FROM durable_instances i
                     WHERE i.namespace = %(ns)s AND i.workflow_id = w.workflow_id) AS instances
            FROM (SELECT workflow_id FROM durable_workflows WHERE namespace = %(ns)s AND workflow_id > %(after)s
                  UNION
                  SELECT DISTINCT workflow_id FROM durable_instances WHERE namespace = %(ns)s
                     AND workflow_id > %(after)s) w
            ORDER BY w.workflow_id LIMIT %(limit)s"""), {"ns": namespace, "after": after, "limit": page.size + 1})
        found = [WorkflowSummary(r["workflow_id"], int(r["versions"]), int(r["latest"] or 0), r["label"] or "",
                                 int(r["instances"])) for r in rows]
        return cut_page(found, page.size, lambda w: [w.workflow_id])

    async def log_registration_txn(self, conn: Conn, new: NewVersion, *, from_version: int, to_version: int,
                                   reason: str) -> None:
        """Appends a version_registered entry to the change log."""
        await self.r.all(conn, self._change, await self.r.with_now(
            conn, ns=new.namespace, wf=new.workflow_id, kind=ChangeKind.VERSION_REGISTERED.value, key="",
            **{"from": from_version, "to": to_version}, actor=new.actor, reason=reason))

    async def log_moves_txn(self, conn: Conn, namespace: str, workflow_id: str, moves: list[InstanceMove], *,
                            actor: str, reason: str) -> None:
        """One change-log row per moved instance."""
        common = await self.r.with_now(conn, ns=namespace, wf=workflow_id, kind=ChangeKind.INSTANCE_MOVED.value,
                                    actor=actor, reason=reason)
        await self.r.many(conn, self._change, [
            {**common, "key": m.instance_key, "from": m.from_version, "to": m.to_version} for m in moves])

    async def changes_txn(self, conn: Conn, namespace: str, workflow_id: str, instance_key: str,
                          page: Page) -> tuple[list[ChangeLogEntry], str]:
        """The change log, newest first, optionally of one workflow or one instance."""
        where = ["namespace = %(ns)s"]
        params: dict[str, Any] = {"ns": namespace, "limit": page.size + 1}
        if workflow_id:
            where.append("workflow_id = %(wf)s")
            params["wf"] = workflow_id
        if instance_key:
            where.append("instance_key = %(key)s")
            params["key"] = instance_key
        if page.token:
            (before,) = decode_cursor(page.token, 1)
            where.append("id < %(before)s")
            params["before"] = before if isinstance(before, int) else 0
        d = self.r.dialect
        rows = await self.r.all(conn, d.sql(  # fixed fragments only
            f"SELECT {CHANGE_COLUMNS} FROM durable_version_changes WHERE {' AND '.join(where)} "
            "ORDER BY id DESC LIMIT %(limit)s"), params)
        return cut_page([change_of(d, r) for r in rows], page.size, lambda r: [r.id])
