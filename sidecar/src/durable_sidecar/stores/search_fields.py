"""Search fields (durable_search_fields), written once for both backends: set, read, and the SQL of filters and of
listing by a field.

A field is a number (kind 'n', num_value) or a text (kind 's', text_value);
the other column holds its default ('' or 0), so (kind, text_value, num_value)
orders numbers before texts and each by its own value, and one index
(namespace, name, kind, text_value, num_value, workflow_id, instance_key)
seeks a text by equality, a number by range (its text_value is ''), and walks
either in order for a listing by the field.
"""

from __future__ import annotations

from typing import Any

from ..domain import FieldCondition, InstanceRef
from .base import Conn
from .core import INSTANCE_KEY, Dialect, Runner, instance_params

Value = str | float

# The instance row a condition's subquery belongs to (ListInstances and CountInstances select from
# durable_instances unaliased).
_SAME_INSTANCE = ("f.namespace = durable_instances.namespace AND f.workflow_id = durable_instances.workflow_id "
                  "AND f.instance_key = durable_instances.instance_key")


def kind_of(value: Value) -> str:
    return "s" if isinstance(value, str) else "n"


def columns_of(value: Value) -> tuple[str, float, str]:
    """(kind, num_value, text_value) as stored."""
    return ("s", 0.0, value) if isinstance(value, str) else ("n", float(value), "")


def value_of(kind: str, num: Any, text: Any) -> Value:
    return str(text) if kind == "s" else float(num)


def field_conditions(conditions: tuple[FieldCondition, ...]) -> tuple[list[str], dict[str, Any]]:
    """One EXISTS condition per search-field condition, for a query over durable_instances; ops are fixed
    comparison operators from the SearchOp enum, never caller text."""
    where: list[str] = []
    params: dict[str, Any] = {}
    for i, cond in enumerate(conditions):
        where.append(f"EXISTS (SELECT 1 FROM durable_search_fields f WHERE {_SAME_INSTANCE} "
                     f"AND f.name = %(sf_n{i})s AND {_compare('f.', cond, i)})")
        params.update(_params(cond, i))
    return where, params


def _compare(prefix: str, cond: FieldCondition, i: int) -> str:
    """The value part of a condition: a text by text_value; a number by num_value with text_value '' (so the
    index seeks it); the operator is the SearchOp enum's fixed text."""
    if kind_of(cond.value) == "s":
        return f"{prefix}kind = 's' AND {prefix}text_value {cond.op.value} %(sf_v{i})s"
    return f"{prefix}kind = 'n' AND {prefix}text_value = '' AND {prefix}num_value {cond.op.value} %(sf_v{i})s"


def _params(cond: FieldCondition, i: int) -> dict[str, Any]:
    _, num, text = columns_of(cond.value)
    return {f"sf_n{i}": cond.name, f"sf_v{i}": text if kind_of(cond.value) == "s" else num}


def sort_join(sort_field: str, conditions: tuple[FieldCondition, ...]) -> tuple[str, tuple[FieldCondition, ...],
                                                                                dict[str, Any]]:
    """The join that lists instances by one field, its columns s_kind, s_text and s_num; the conditions on that
    field bound the join itself (the index scan starts there), the others are returned for EXISTS."""
    own = [(i, c) for i, c in enumerate(conditions) if c.name == sort_field]
    bounds = "".join(f" AND {_compare('', c, 100 + i)}" for i, c in own)
    params: dict[str, Any] = {"sort_name": sort_field}
    for i, c in own:
        params[f"sf_v{100 + i}"] = _params(c, 100 + i)[f"sf_v{100 + i}"]
    rest = tuple(c for c in conditions if c.name != sort_field)
    return ("JOIN (SELECT namespace AS s_ns, workflow_id AS s_wf, instance_key AS s_key, kind AS s_kind, "
            "text_value AS s_text, num_value AS s_num FROM durable_search_fields "
            f"WHERE namespace = %(ns)s AND name = %(sort_name)s{bounds}) s "
            "ON s_ns = namespace AND s_wf = workflow_id AND s_key = instance_key"), rest, params


class SearchFieldStore:
    def __init__(self, runner: Runner) -> None:
        self.r = runner
        d: Dialect = runner.dialect
        self._get = d.sql(f"SELECT name, kind, num_value, text_value FROM durable_search_fields "
                          f"WHERE {INSTANCE_KEY} ORDER BY name")
        self._upsert = d.sql("""INSERT INTO durable_search_fields
                (namespace, workflow_id, instance_key, name, kind, num_value, text_value)
            VALUES (%(ns)s, %(wf)s, %(key)s, %(name)s, %(kind)s, %(num)s, %(text)s)
            ON CONFLICT (namespace, workflow_id, instance_key, name)
            DO UPDATE SET kind = excluded.kind, num_value = excluded.num_value, text_value = excluded.text_value""")
        self._delete = d.sql(f"DELETE FROM durable_search_fields WHERE {INSTANCE_KEY} AND name = %(name)s")
        # By primary key: one workflow's instances of a page.
        self._of_keys = d.sql("SELECT workflow_id, instance_key, name, kind, num_value, text_value "
                              "FROM durable_search_fields WHERE namespace = %(ns)s AND workflow_id = %(wf)s AND "
                              + d.in_list.format(column="instance_key", param="keys")
                              + " ORDER BY name")

    async def get_txn(self, conn: Conn, ref: InstanceRef) -> dict[str, Value]:
        rows = await self.r.all(conn, self._get, instance_params(ref))
        return {r["name"]: value_of(r["kind"], r["num_value"], r["text_value"]) for r in rows}

    async def set_txn(self, conn: Conn, ref: InstanceRef, changes: dict[str, Value | None]) -> None:
        """Upserts each field with a value and deletes each set to None (the caller locked the instance)."""
        for name, value in changes.items():
            if value is None:
                await self.r.execute(conn, self._delete, {**instance_params(ref), "name": name})
                continue
            kind, num, text = columns_of(value)
            await self.r.execute(conn, self._upsert, {**instance_params(ref), "name": name, "kind": kind,
                                                      "num": num, "text": text})

    async def of_instances_txn(self, conn: Conn, namespace: str,
                               refs: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Value]]:
        """The fields of a page of instances, by (workflow_id, instance_key)."""
        by_workflow: dict[str, list[str]] = {}
        for wf, key in refs:
            by_workflow.setdefault(wf, []).append(key)
        out: dict[tuple[str, str], dict[str, Value]] = {}
        for wf, keys in sorted(by_workflow.items()):
            rows = await self.r.all(conn, self._of_keys, {"ns": namespace, "wf": wf,
                                                          "keys": self.r.dialect.list_param(sorted(set(keys)))})
            for r in rows:
                out.setdefault((wf, r["instance_key"]), {})[r["name"]] = value_of(r["kind"], r["num_value"],
                                                                                  r["text_value"])
        return out
