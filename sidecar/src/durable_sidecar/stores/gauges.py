"""One cheap query for the dashboard gauges: running instances by state, per namespace.

It reads only running instances, through the partial indexes on them (leases:
wake_at IS NULL; wake-ups: wake_at IS NOT NULL; event waits; suspended ones),
and is run by a periodic task (app.py), never per scrape. A suspended instance
is stored as running with suspended_at set (migration 0008).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .base import Conn, Database


@dataclass(frozen=True)
class NamespaceGauges:
    """Instances of one namespace: holding a live lease, waiting (for a wake-up, a retry backoff or an event),
    stalled, suspended (dead-lettered); due wake-ups (timeouts and backoffs included)."""

    running: int = 0
    waiting: int = 0
    stalled: int = 0
    due_wake_ups: int = 0
    oldest_stalled_seconds: float = 0.0
    suspended: int = 0


def _query(count_if: str, oldest_lapsed: str, now: str) -> str:
    """The one gauge query in a dialect: how it counts rows that meet a condition, ages a time, says now."""
    late_lease = count_if.format(f"lease_expires_at < {now}")
    due_wake = count_if.format(f"wake_at <= {now}")
    return f"""
SELECT namespace, 'lease' AS kind, count(*) AS total, {late_lease} AS late, {oldest_lapsed} AS oldest_s
FROM durable_instances
WHERE status = 'running' AND wake_at IS NULL AND awaited_event = '' AND suspended_at IS NULL GROUP BY namespace
UNION ALL
SELECT namespace, 'wake', count(*), {due_wake}, 0
FROM durable_instances WHERE status = 'running' AND wake_at IS NOT NULL GROUP BY namespace
UNION ALL
SELECT namespace, 'event', count(*), 0, 0
FROM durable_instances WHERE status = 'running' AND awaited_event <> '' AND wake_at IS NULL GROUP BY namespace
UNION ALL
SELECT namespace, 'suspended', count(*), 0, 0
FROM durable_instances WHERE status = 'running' AND suspended_at IS NOT NULL GROUP BY namespace
"""


_POSTGRES = _query("count(*) FILTER (WHERE {})", "coalesce(extract(epoch FROM now() - min(lease_expires_at)), 0)::float8",
                   "now()")
_SQLITE = _query("sum({})", "coalesce((:now - min(lease_expires_at)) / 1e6, 0)", ":now")


async def instance_gauges(db: Database, dialect: str) -> dict[str, NamespaceGauges]:
    """Gauges per namespace that has running instances (one statement, database time)."""

    async def read(conn: Conn) -> list[tuple[str, str, int, int, float]]:
        if dialect == "postgres":
            from .postgres.db import pg

            cur = await pg(conn).execute(_POSTGRES)
            return [(r["namespace"], r["kind"], int(r["total"]), int(r["late"] or 0), float(r["oldest_s"] or 0))
                    for r in await cur.fetchall()]
        from .sqlite.db import lite

        c = lite(conn)
        rows = await c.all(_SQLITE, {"now": c.now_us})
        return [(r["namespace"], r["kind"], int(r["total"]), int(r["late"] or 0), float(r["oldest_s"] or 0))
                for r in rows]

    out: dict[str, NamespaceGauges] = {}
    for namespace, kind, total, late, oldest in await db.transaction(read):
        g = out.get(namespace, NamespaceGauges())
        if kind == "lease":
            g = replace(g, running=total - late, stalled=late,
                        oldest_stalled_seconds=max(0.0, oldest) if late else 0.0)
        elif kind == "wake":
            g = replace(g, waiting=g.waiting + total, due_wake_ups=late)
        elif kind == "event":
            g = replace(g, waiting=g.waiting + total)
        else:
            g = replace(g, suspended=total)
        out[namespace] = g
    return out
