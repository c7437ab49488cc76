"""`durable-sidecar`: serve, migrate, and read-only operator views of instances and checkpoints."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

from . import logs
from .domain import InstanceFilter, InstanceRef, InstanceStatus, Page, PrunePolicy
from .errors import DomainError
from .services.checkpoints import CheckpointService
from .services.instances import InstanceService
from .settings import Settings, SettingsError, describe
from .stores.cache import Cache
from .stores.checkpoints import CheckpointStore
from .stores.db import Database
from .stores.instances import InstanceStore
from .stores.migrate import migrate


@dataclass
class Services:
    instances: InstanceService
    checkpoints: CheckpointService


@asynccontextmanager
async def _services(settings: Settings) -> AsyncIterator[Services]:
    db = Database(settings.database_url, min_size=1, max_size=2,
                  connect_timeout=settings.db_connect_timeout_seconds, retry_attempts=settings.db_retry_attempts)
    await db.open()
    cache = Cache("", max_connections=1, timeout_seconds=1, ttl_seconds=1, max_item_bytes=0)
    try:
        istore, cstore = InstanceStore(), CheckpointStore(compress_threshold_bytes=settings.compress_threshold_bytes)
        cps = CheckpointService(db, istore, cstore, cache, max_state_bytes=settings.max_state_bytes,
                                max_batch_items=settings.max_batch_items, default_lease_seconds=settings.lease_seconds)
        yield Services(InstanceService(db, istore, cstore, cps, default_lease_seconds=settings.lease_seconds), cps)
    finally:
        await db.close()


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, InstanceStatus):
        return value.value
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table a person can read in a terminal."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    if not rows:
        out.append("(none)")
    return "\n".join(out)


def _settings(args: argparse.Namespace, *, need_auth: bool) -> Settings:
    overrides: dict[str, object] = {} if need_auth else {"auth_disabled": True}
    if getattr(args, "database_url", None):
        overrides["database_url"] = args.database_url
    return Settings.from_env(None, **overrides)


async def _run(args: argparse.Namespace) -> int:
    cmd = args.command
    if cmd == "serve":
        from .app import serve

        settings = _settings(args, need_auth=True)
        logs.configure(settings.log_level, settings.log_format)
        await serve(settings)
        return 0
    settings = _settings(args, need_auth=False)
    logs.configure("WARNING", "text")
    if cmd == "migrate":
        applied = await migrate(settings.database_url)
        print("applied: " + ", ".join(applied) if applied else "schema is up to date")
        return 0
    async with _services(settings) as svc:
        ns = args.namespace
        if cmd == "instances" and args.action == "list":
            statuses = tuple(InstanceStatus(s) for s in args.status)
            rows, token = await svc.instances.list_instances(
                ns, InstanceFilter(workflow_id=args.workflow or "", statuses=statuses, stalled_only=args.stalled),
                Page(args.limit, ""))
            print(table(["workflow", "key", "status", "version", "seq", "last step", "lease owner", "lease until",
                         "wake at", "updated"],
                        [[r.workflow_id, r.instance_key, r.status, r.bound_version or r.version_label or "-",
                          r.last_sequence, r.last_step or "-", r.lease_owner or "-", r.lease_expires_at, r.wake_at,
                          r.updated_at] for r in rows]))
            if token:
                print(f"(more: raise --limit above {args.limit})")
        elif cmd == "instances" and args.action == "show":
            inst, latest = await svc.instances.get(InstanceRef(ns, args.workflow, args.key))
            for name, value in vars(inst).items():
                if name == "result_json":
                    value = value.decode() if value else None
                print(f"{name:>24}: {_fmt(value)}")
            if latest:
                print(f"{'latest checkpoint':>24}: #{latest.sequence} {latest.step_name} sha256={latest.sha256[:16]}…")
        elif cmd == "checkpoints" and args.action == "list":
            cps, _ = await svc.checkpoints.list_checkpoints(InstanceRef(ns, args.workflow, args.key), Page(args.limit, ""),
                                                     include_state=False)
            print(table(["seq", "step", "size", "stored", "sha256", "execution", "node", "created"],
                        [[c.sequence, c.step_name, c.size_bytes, c.stored_bytes, c.sha256[:16], c.execution_id,
                          c.node_name or "-", c.created_at] for c in cps]))
        elif cmd == "checkpoints" and args.action == "show":
            ref = InstanceRef(ns, args.workflow, args.key)
            cp = (await svc.checkpoints.get(ref, args.sequence, include_state=True) if args.sequence
                  else await svc.checkpoints.latest(ref, include_state=True))
            print(f"# {cp.workflow_id}/{cp.instance_key} #{cp.sequence} step={cp.step_name} "
                  f"size={cp.size_bytes} sha256={cp.sha256} execution={cp.execution_id} at {_fmt(cp.created_at)}")
            assert cp.state is not None
            print(json.dumps(json.loads(cp.state), indent=2, ensure_ascii=False))
        elif cmd == "prune":
            result = await svc.checkpoints.prune(ns, PrunePolicy(
                workflow_id=args.workflow or "", instance_key=args.key or "", keep_last=args.keep_last,
                older_than_seconds=int(args.older_than_hours * 3600), dry_run=args.dry_run))
            verb = "would delete" if args.dry_run else "deleted"
            print(f"{verb} {result.deleted_count} checkpoints of {result.instance_count} instances "
                  "(the newest checkpoint of each instance is always kept)")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="durable-sidecar", description="Durable state sidecar for n8n.")
    p.add_argument("--database-url", help="overrides DURABLE_DATABASE_URL")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the gRPC server (migrates first unless DURABLE_AUTO_MIGRATE=false)")
    sub.add_parser("migrate", help="apply pending database migrations")
    sub.add_parser("settings", help="list every DURABLE_* setting with its default")

    def with_ns(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument("--namespace", default="default", help="namespace (a token's namespace); default 'default'")
        return sp

    inst = sub.add_parser("instances", help="list or show instances").add_subparsers(dest="action", required=True)
    il = with_ns(inst.add_parser("list"))
    il.add_argument("--workflow")
    il.add_argument("--status", action="append", default=[], choices=[s.value for s in InstanceStatus])
    il.add_argument("--stalled", action="store_true", help="only running instances whose lease lapsed")
    il.add_argument("--limit", type=int, default=50)
    ish = with_ns(inst.add_parser("show"))
    ish.add_argument("workflow")
    ish.add_argument("key")

    cps = sub.add_parser("checkpoints", help="list or show checkpoints").add_subparsers(dest="action", required=True)
    cl = with_ns(cps.add_parser("list"))
    cl.add_argument("workflow")
    cl.add_argument("key")
    cl.add_argument("--limit", type=int, default=100)
    cs = with_ns(cps.add_parser("show"))
    cs.add_argument("workflow")
    cs.add_argument("key")
    cs.add_argument("sequence", type=int, nargs="?", default=0, help="default: the newest")

    pr = with_ns(sub.add_parser("prune", help="delete old checkpoints (the newest of each instance is kept)"))
    pr.add_argument("--workflow")
    pr.add_argument("--key")
    pr.add_argument("--keep-last", type=int, default=0)
    pr.add_argument("--older-than-hours", type=float, default=0)
    pr.add_argument("--dry-run", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "settings":
        print(table(["variable", "default", "meaning"], describe()))
        return 0
    try:
        return asyncio.run(_run(args))
    except SettingsError as exc:
        print(f"durable-sidecar: {exc}", file=sys.stderr)
        return 2
    except DomainError as exc:
        print(f"durable-sidecar: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
