"""The listing of instances (ListInstances, CountInstances, bulk operations' selections): its filter, its
statements in the backend's form, its by-field cursor and its counts by status; read by InstanceStore and the
operations store."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..domain import InstanceFilter, InstanceStatus, Page, StatusCounts
from ..errors import InvalidArgument
from .core import INSTANCE_COLUMNS, Dialect, Row, time_cursor
from .paging import decode_cursor
from .search_fields import field_conditions, sort_join

# The status an instance is reported with: a suspended one is stored as 'running' with suspended_at (0008).
STATUS_EXPR = "CASE WHEN status = 'running' AND suspended_at IS NOT NULL THEN 'suspended' ELSE status END"


# Stalled: running, not suspended, not waiting for an event, no wake-up, its lease lapsed before {now}.
STALLED_WHERE = ("status = 'running' AND suspended_at IS NULL AND awaited_event = '' AND wake_at IS NULL "
                 "AND lease_expires_at < {now}")


def status_condition(statuses: tuple[InstanceStatus, ...]) -> str:
    """SQL for 'the reported status is one of these' (fixed literals only: the enum's own values)."""
    parts = []
    for s in statuses:
        if s is InstanceStatus.SUSPENDED:
            parts.append("(status = 'running' AND suspended_at IS NOT NULL)")
        elif s is InstanceStatus.RUNNING:
            parts.append("(status = 'running' AND suspended_at IS NULL)")
        else:
            parts.append(f"status = '{s.value}'")
    return "(" + " OR ".join(parts) + ")"


def instance_filter(d: Dialect, namespace: str, flt: InstanceFilter, now: Any) -> tuple[list[str], dict[str, Any]]:
    """The conditions ListInstances and CountInstances share (all but statuses and stalled_only) and their
    parameters; `now` is the %(now)s parameter where the dialect's now_sql names one (None otherwise)."""
    where = ["namespace = %(ns)s"]
    params: dict[str, Any] = {"ns": namespace}
    if now is not None:
        params["now"] = now
    if flt.workflow_id:
        where.append("workflow_id = %(wf)s")
        params["wf"] = flt.workflow_id
    if flt.bound_version:
        where.append("bound_version = %(bv)s")
        params["bv"] = flt.bound_version
    if flt.key_prefix:
        where.append(d.prefix_condition.format(column="instance_key"))
        params["prefix"] = flt.key_prefix
    if flt.last_step:
        where.append("last_step = %(step)s")
        params["step"] = flt.last_step
    if flt.created_after is not None:
        where.append("created_at >= %(after)s")
        params["after"] = d.time_param(flt.created_after)
    if flt.created_before is not None:
        where.append("created_at < %(before)s")
        params["before"] = d.time_param(flt.created_before)
    if flt.fields:
        conditions, values = field_conditions(flt.fields)
        where.extend(conditions)
        params.update(values)
    if flt.error_contains:
        where.append("(" + " OR ".join(d.contains_condition.format(column=c) for c in ("last_error", "error_message"))
                     + ")")
        params["contains"] = flt.error_contains
    return where, params


def list_instances_query(d: Dialect, namespace: str, flt: InstanceFilter, page: Page, *,
                         now: Any) -> tuple[str, dict[str, Any]]:
    """ListInstances' statement in the backend's form and its parameters: newest first (or by a search field),
    one row more than the page (for cut_page), after the page token's cursor."""
    join, join_params = "", dict[str, Any]()
    if flt.sort_field:
        # The sort field's own conditions bound the join; the others stay conditions of the filter.
        join, rest, join_params = sort_join(flt.sort_field, flt.fields)
        flt = replace(flt, fields=rest)
    where, params = instance_filter(d, namespace, flt, now)
    params.update(join_params)
    params["limit"] = page.size + 1
    if flt.statuses:
        where.append(status_condition(flt.statuses))  # enum literals only
    if flt.stalled_only:
        where.append(STALLED_WHERE.format(now=d.now_sql))  # fixed text
    if flt.sort_field:
        order, compare = ("DESC", "<") if flt.sort_descending else ("ASC", ">")
        if page.token:
            kind, num, text, wf, key = field_cursor(page.token)
            where.append(f"(s_kind, s_text, s_num, workflow_id, instance_key) {compare} "
                         "(%(c_kind)s, %(c_text)s, %(c_num)s, %(c_wf)s, %(c_key)s)")
            params.update({"c_kind": kind, "c_num": num, "c_text": text, "c_wf": wf, "c_key": key})
        text_sql = (f"SELECT {INSTANCE_COLUMNS}, s_kind, s_num, s_text FROM durable_instances {join} "
                    f"WHERE {' AND '.join(where)} ORDER BY s_kind {order}, s_text {order}, s_num {order}, "
                    f"workflow_id {order}, instance_key {order} LIMIT %(limit)s")
        return d.sql(text_sql), params
    if page.token:
        created, wf, key = time_cursor(d, page.token)
        where.append(f"(created_at, workflow_id, instance_key) < (%(c_at)s{d.cursor_time_cast}, %(c_wf)s, %(c_key)s)")
        params.update({"c_at": created, "c_wf": wf, "c_key": key})
    text = (f"SELECT {INSTANCE_COLUMNS} FROM durable_instances WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, workflow_id DESC, instance_key DESC LIMIT %(limit)s")
    return d.sql(text), params


def count_instances_query(d: Dialect, namespace: str, flt: InstanceFilter, *,
                          now: Any) -> tuple[str, dict[str, Any]]:
    """CountInstances' statement in the backend's form and its parameters: rows of (status, n, stalled) for
    status_counts (statuses and stalled_only do not narrow a count)."""
    where, params = instance_filter(d, namespace, flt, now)
    text = (f"SELECT {STATUS_EXPR} AS status, count(*) AS n, "
            f"count(*) FILTER (WHERE {STALLED_WHERE.format(now=d.now_sql)}) AS stalled "
            f"FROM durable_instances WHERE {' AND '.join(where)} GROUP BY 1")
    return d.sql(text), params


def sorted_cursor(row: Row) -> list[Any]:
    """A by-field cursor: the field's (kind, number, text), then workflow and key."""
    return [row["s_kind"], float(row["s_num"]), row["s_text"], row["workflow_id"], row["instance_key"]]


def field_cursor(token: str) -> tuple[str, float, str, str, str]:
    kind, num, text, wf, key = decode_cursor(token, 5)
    if kind not in ("n", "s") or not isinstance(num, int | float) or not all(isinstance(v, str) for v in (text, wf, key)):
        raise InvalidArgument("page_token is not a token this server issued for this listing")
    return kind, float(num), text, wf, key


def status_counts(rows: list[Any]) -> StatusCounts:
    """Rows of (status, n, stalled), one per status present, as counts of every status."""
    by_status = dict.fromkeys(InstanceStatus, 0)
    stalled = 0
    for r in rows:
        by_status[InstanceStatus(r["status"])] = int(r["n"])
        stalled += int(r["stalled"] or 0)
    return StatusCounts(by_status, stalled)
