"""`durable-sidecar`: serve, migrate, operator views of instances, checkpoints and idempotency keys, and their repairs."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import math
import re
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime

from . import logs
from .cli_parser import parser
from .domain import (
    FieldCondition,
    IdempotencyKey,
    Instance,
    InstanceFilter,
    InstanceRef,
    InstanceStatus,
    KeyFilter,
    KeyRef,
    KeyStatus,
    MoveSelector,
    Page,
    PrunePolicy,
    RunState,
    SearchOp,
)
from .domain_operations import BulkAction, Operation
from .errors import DomainError, InvalidArgument
from .memory.cache import MemoryCache
from .services.idempotency import IdempotencyService
from .services.operations import OperationService
from .services.search_fields import fields_json, parse_condition
from .services.versions import VersionService
from .settings import Settings, SettingsError, describe
from .stores.backend import migrate
from .stores.sessions import SessionRow
from .wiring import Services, build_services, make_cache, open_backend


@asynccontextmanager
async def _services(settings: Settings) -> AsyncIterator[Services]:
    # Operator commands never own the embedded database: they work beside a running sidecar.
    backend = await open_backend(replace(settings, db_pool_min=1, db_pool_max=2), owner=False, migrate=False)
    db = backend.db
    cache = MemoryCache(max_bytes=0, ttl_seconds=1, max_item_bytes=0)
    # `keys release` forgets the key's cache entry, so it talks to the sidecars' Redis (an in-process one is theirs).
    keys_cache = make_cache(settings, shared_only=True)
    try:
        keys_cache.bind(await db.installation_id())
        # No in-process copy of completed keys: a command changes keys beside running sidecars.
        yield build_services(replace(settings, local_key_cache_entries=0), backend, cache, keys_cache=keys_cache)
    finally:
        await keys_cache.close()
        await db.close()


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, InstanceStatus):
        return value.value
    return str(value)


def status_word(inst: Instance, now: datetime) -> str:
    """The status an operator reads: a running instance that waits (for an event), is scheduled (a backoff or
    wake-up) or stalled shows that run state, in the node package's words (runStateName); others their status."""
    state = inst.run_state(now)
    return inst.status.value if state in (RunState.NONE, RunState.ACTIVE) else state.value


def holder_text(holder: SessionRow | None, inst: Instance, now: datetime) -> str:
    """The n8n process that holds a lease, from its session; or held it, when the lease lapsed (a stalled
    instance: its execution ended without saving) or its session ended."""
    if holder is None:
        return "-"
    state = f", session ended ({holder.end_reason})" if holder.ended_at else ""
    if inst.lease_expires_at is not None and inst.lease_expires_at <= now:
        state += ", lease lapsed"
    return f"n8n {holder.mode} pid {holder.pid} on {holder.host}{state}"


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
        applied = await migrate(settings.storage_url)
        print("applied: " + ", ".join(applied) if applied else "schema is up to date")
        return 0
    async with _services(settings) as svc:
        ns = args.namespace
        if cmd == "instances" and args.action == "list":
            statuses = tuple(InstanceStatus(s) for s in args.status)
            rows, token = await svc.instances.list_instances(
                ns, InstanceFilter(workflow_id=args.workflow or "", statuses=statuses, stalled_only=args.stalled,
                                   fields=tuple(_field_condition(i, f) for i, f in enumerate(args.field)),
                                   sort_field=args.sort or "", sort_descending=args.desc),
                Page(args.limit, ""))
            now = await svc.keys.now()
            holders = await svc.sessions.holders(ns, sorted({r.lease_owner for r in rows if r.lease_owner}))
            print(table(["workflow", "key", "status", "version", "seq", "last step", "lease owner", "held by",
                         "lease until", "wake at", "updated", "search fields"],
                        [[r.workflow_id, r.instance_key, status_word(r, now), r.bound_version or r.version_label or "-",
                          r.last_sequence, r.last_step or "-", r.lease_owner or "-",
                          holder_text(holders.get(r.lease_owner), r, now), r.lease_expires_at, r.wake_at,
                          r.updated_at, fields_json(r.search_fields).decode() if r.search_fields else "-"]
                         for r in rows]))
            if token:
                print(f"(more: raise --limit above {args.limit})")
        elif cmd == "instances" and args.action == "show":
            inst, latest = await svc.instances.get(InstanceRef(ns, args.workflow, args.key))
            now = await svc.keys.now()
            for name, value in vars(inst).items():
                if name == "result_json":
                    value = value.decode() if value else None
                elif name == "search_fields":
                    value = fields_json(value).decode() if value else None
                elif name == "status":
                    value = status_word(inst, now)
                print(f"{name:>24}: {_fmt(value)}")
            if inst.lease_owner:
                holder = (await svc.sessions.holders(ns, [inst.lease_owner])).get(inst.lease_owner)
                print(f"{'held by':>24}: {holder_text(holder, inst, now)}")
            if latest:
                print(f"{'latest checkpoint':>24}: #{latest.sequence} {latest.step_name} sha256={latest.sha256[:16]}…")
        elif cmd == "instances" and args.action == "trail":
            await _trail(svc, InstanceRef(ns, args.workflow, args.key), args.limit)
        elif cmd == "checkpoints" and args.action == "list":
            cps, _ = await svc.checkpoints.list_checkpoints(InstanceRef(ns, args.workflow, args.key), Page(args.limit, ""),
                                                     include_state=False)
            print(table(["seq", "step", "size", "stored", "files", "sha256", "execution", "node", "created"],
                        [[c.sequence, c.step_name, c.size_bytes, c.stored_bytes, c.file_count, c.sha256[:16],
                          c.execution_id, c.node_name or "-", c.created_at] for c in cps]))
        elif cmd == "checkpoints" and args.action == "show":
            ref = InstanceRef(ns, args.workflow, args.key)
            cp = (await svc.checkpoints.get(ref, args.sequence, include_state=True) if args.sequence
                  else await svc.checkpoints.latest(ref, include_state=True))
            print(f"# {cp.workflow_id}/{cp.instance_key} #{cp.sequence} step={cp.step_name} "
                  f"size={cp.size_bytes} sha256={cp.sha256} execution={cp.execution_id} at {_fmt(cp.created_at)}")
            assert cp.state is not None
            print(json.dumps(json.loads(cp.state), indent=2, ensure_ascii=False))
            if cp.file_count:
                _, files = await svc.files.checkpoint_files(ref, cp.sequence)
                print(f"# files ({len(files)}; durable-sidecar serves them at GET /files/<sha256> on the HTTP face)")
                print(table(["property", "file name", "type", "size", "sha256"],
                            [[f.property, f.file_name or "-", f.mime_type or "-", f.size_bytes, f.sha256]
                             for f in files]))
        elif cmd == "prune":
            result = await svc.checkpoints.prune(ns, PrunePolicy(
                workflow_id=args.workflow or "", instance_key=args.key or "", keep_last=args.keep_last,
                older_than_seconds=int(args.older_than_hours * 3600), dry_run=args.dry_run))
            verb = "would delete" if args.dry_run else "deleted"
            print(f"{verb} {result.deleted_count} checkpoints of {result.instance_count} instances "
                  "(the newest checkpoint of each instance is always kept)")
        elif cmd == "keys":
            await _keys(svc.keys, ns, args)
        elif cmd == "sessions":
            sessions = await svc.sessions.list_sessions(ns, page_size=args.limit)
            print(table(["session", "n8n process", "started", "last heartbeat", "ended", "leases freed"],
                        [[r.session_id, f"{r.mode} pid {r.pid} on {r.host}", r.started_at, r.last_heartbeat_at,
                          f"{r.ended_at} ({r.end_reason})" if r.ended_at else "-", r.leases_freed] for r in sessions]))
        elif cmd == "instances" and args.action == "move":
            await _move(svc.versions, ns, args)
        elif cmd == "instances" and args.action in ("retry", "resume", "cancel"):
            ref = InstanceRef(ns, args.workflow, args.key)
            actor = _actor(args.actor)
            if args.action == "retry":
                inst = await svc.recovery.retry(ref, actor=actor, reason=args.reason)
            elif args.action == "resume":
                inst = await svc.recovery.resume(ref, actor=actor, reason=args.reason)
            else:
                inst = await svc.instances.finish(ref, InstanceStatus.CANCELLED, actor=actor, error_message=args.reason)
            # The CLI is not the sidecar: the Resume Trigger's stream finds the instance at its next poll.
            due = (" (due now: the Resume Trigger takes it at its next poll, within its Poll Interval, 5 s by "
                   "default)" if inst.wake_reason == "redrive" else "")
            print(f"{inst.workflow_id}/{inst.instance_key}: {inst.status.value}{due}; by {actor}: {args.reason}")
        elif cmd == "instances" and args.action == "replay":
            actor = _actor(args.actor)
            fork, copied = await svc.replay.replay(InstanceRef(ns, args.workflow, args.key),
                                                   from_sequence=args.from_sequence, to_version=args.to_version,
                                                   actor=actor, reason=args.reason, may_move=True)
            print(f"{fork.workflow_id}/{fork.instance_key}: the replay of {args.key} from checkpoint "
                  f"{args.from_sequence} ({copied} checkpoints copied), bound to version {fork.bound_version or '-'}, "
                  f"due now (the Resume Trigger takes it); by {actor}: {args.reason}")
        elif cmd == "instances" and args.action == "purge":
            actor = _actor(args.actor)
            inst, erased = await svc.purge.purge_instance(InstanceRef(ns, args.workflow, args.key), actor=actor,
                                                          reason=args.reason)
            print(f"{inst.workflow_id}/{inst.instance_key}: purged ({len(erased.checkpoint_sequences)} checkpoints, "
                  f"start item {'erased' if erased.start_item else 'none'}, {erased.event_payloads} event payloads); "
                  f"by {actor}: {args.reason}")
        elif cmd == "versions":
            await _versions(svc.versions, ns, args)
        elif cmd == "operations":
            await _operations(svc.operations, ns, args)
    return 0


def _bulk_filter(args: argparse.Namespace) -> InstanceFilter:
    return InstanceFilter(workflow_id=args.workflow or "", statuses=tuple(InstanceStatus(s) for s in args.status),
                          stalled_only=args.stalled, key_prefix=args.key_prefix or "", last_step=args.step or "",
                          fields=tuple(_field_condition(i, f) for i, f in enumerate(args.field)),
                          error_contains=args.error or "")


def _operation_line(op: Operation) -> str:
    taken = op.acted + op.skipped
    what = op.action.value + (f" to version {op.to_version}" if op.to_version else "") + (
        f" from step {op.replay_from_step}" if op.replay_from_step else "")
    line = (f"operation {op.id}: {what} {op.status.value}, {taken} of {op.matched_at_start} taken "
            f"({op.acted} acted on, {op.skipped} skipped); by {op.actor}: {op.reason}; filter {op.selector_json}")
    return line + (f"; last skipped: {op.last_skip}" if op.last_skip else "")


async def _operations(svc: OperationService, ns: str, args: argparse.Namespace) -> None:
    if args.action == "preview":
        count, sample = await svc.preview(ns, _bulk_filter(args), sample_size=args.sample)
        print(f"{count} instances match; the first {len(sample)}:")
        print(table(["workflow", "key", "status", "last step", "last error"],
                    [[i.workflow_id, i.instance_key, i.status.value, i.last_step or "-",
                      (i.last_error or i.error_message or "-")[:60]] for i in sample]))
    elif args.action == "start":
        op = await svc.start(ns, BulkAction(args.bulk_action), _bulk_filter(args), actor=_actor(args.actor),
                             reason=args.reason, to_version=args.to_version, replay_from_step=args.from_step or "",
                             may_move=True)
        print(_operation_line(op) + " (the sidecar runs it; follow it with `operations show`)")
    elif args.action == "list":
        ops, _ = await svc.list(ns, Page(args.limit, ""))
        for op in ops:
            print(_operation_line(op))
    elif args.action == "show":
        print(_operation_line(await svc.get(ns, args.id)))
    else:
        move = {"pause": svc.pause, "continue": svc.continue_, "cancel": svc.cancel}[args.action]
        print(_operation_line(await move(ns, args.id, actor=_actor(args.actor))))


_CONDITION = re.compile(r"([^<>=]+)(>=|<=|=|<|>)(.*)\Z", re.DOTALL)
_OPS = {"=": SearchOp.EQ, "<": SearchOp.LT, "<=": SearchOp.LTE, ">": SearchOp.GT, ">=": SearchOp.GTE}


def _field_condition(index: int, given: str) -> FieldCondition:
    """--field NAME=VALUE (or <, <=, >, >=): a number when VALUE is a JSON number, a JSON string when quoted,
    else the text as written."""
    m = _CONDITION.match(given)
    if not m:
        raise InvalidArgument(f"--field {given!r}: write NAME=VALUE, NAME<VALUE, NAME<=VALUE, NAME>VALUE or NAME>=VALUE")
    name, op, raw = m.group(1).strip(), m.group(2), m.group(3)
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    if not isinstance(value, str | int | float) or isinstance(value, bool) or (
            isinstance(value, float) and not math.isfinite(value)):  # NaN, Infinity, 1e999: the text as written
        value = raw
    return parse_condition(index, name, _OPS[op], json.dumps(value).encode())


def _actor(given: str) -> str:
    if given:
        return given
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):
        return "cli"


async def _versions(svc: VersionService, ns: str, args: argparse.Namespace) -> None:
    if args.action == "list":
        current = await svc.current_version(ns, args.workflow)
        rows, token = await svc.list_versions(ns, args.workflow, Page(args.limit, ""))
        print(table(["version", "current", "label", "content hash", "n8n version id", "steps", "created", "by", "note"],
                    [[v.version, "*" if v.version == current else "", v.label or "-", v.content_hash[:12],
                      v.n8n_version_id or "-", len(v.node_names), v.created_at, v.created_by or "-",
                      v.note[:40] or "-"] for v in rows]))
        if token:
            print(f"(more: raise --limit above {args.limit})")
    elif args.action == "show":
        v = await svc.get(ns, args.workflow, args.version)
        current = await svc.current_version(ns, args.workflow)
        print(f"# {v.workflow_id} version {v.version}" + (" (current)" if v.version == current else ""))
        for name, value in (("label", v.label), ("content hash", v.content_hash), ("n8n version id", v.n8n_version_id),
                            ("note", v.note), ("created", v.created_at), ("created by", v.created_by),
                            ("steps", ", ".join(v.node_names))):
            print(f"{name:>16}: {_fmt(value if value != '' else None)}")
        if args.definition and v.definition_json is not None:
            print(json.dumps(json.loads(v.definition_json), indent=2, ensure_ascii=False))
    elif args.action == "diff":
        d = await svc.diff(ns, args.workflow, args.old, args.new)
        print(f"# {args.workflow}: version {args.old} -> version {args.new}")
        for name in d.added:
            print(f"+ {name}  (added)")
        for name in d.removed:
            print(f"- {name}  (removed)")
        for change in d.changed:
            print(f"~ {change.name}  (changed: {', '.join(change.fields)})")
        if d.empty:
            print("no node added, removed or changed")
    elif args.action == "register":
        if args.file == "-":
            raw = sys.stdin.buffer.read()
        else:
            with open(args.file, "rb") as fh:
                raw = fh.read()
        done = await svc.register(ns, args.workflow, raw, n8n_version_id=args.n8n_version_id, label=args.label,
                                  note=args.note, actor=_actor(args.actor))
        verb = "registered" if done.created else "same content as existing"
        print(f"{verb}: {args.workflow} version {done.version.version} (content hash {done.version.content_hash[:12]})")
    elif args.action == "sync":
        done = await svc.sync_from_n8n(ns, args.workflow, actor=_actor(args.actor))
        verb = "registered" if done.created else "unchanged in n8n: already"
        print(f"{verb} {args.workflow} version {done.version.version} (content hash {done.version.content_hash[:12]})")
    elif args.action == "log":
        entries, token = await svc.change_log(ns, args.workflow or args.workflow_option or "", args.key or "",
                                              Page(args.limit, ""))
        print(table(["id", "when", "kind", "workflow", "key", "from", "to", "actor", "reason"],
                    [[e.id, e.created_at, e.kind.value, e.workflow_id, e.instance_key or "-", e.from_version or "-",
                      e.to_version, e.actor or "-", e.reason or "-"] for e in entries]))
        if token:
            print(f"(more: raise --limit above {args.limit})")


async def _trail(svc: Services, ref: InstanceRef, limit: int) -> None:
    """The audit trail (AuditService.ListInstanceEvents) with the instance's moves from the change log, by time, as
    the console's timeline shows them."""
    events, more = await svc.audit.list_events(ref, Page(limit, ""))
    moves, _ = await svc.versions.change_log(ref.namespace, ref.workflow_id, ref.instance_key, Page(limit, ""))
    rows = [(e.created_at, 0, e.id, e.kind, e.actor or "-", e.detail or "-") for e in events]
    rows += [(m.created_at, 1, m.id, "moved", m.actor or "-",
              f"version {m.from_version or '-'} to {m.to_version}: {m.reason or '-'}") for m in moves
             if not more or m.created_at <= events[-1].created_at]
    print(table(["when", "event", "by", "detail"], [[r[0], r[3], r[4], r[5]] for r in sorted(rows)]))
    if more:
        print(f"(more: raise --limit above {limit})")


async def _move(svc: VersionService, ns: str, args: argparse.Namespace) -> None:
    selector = MoveSelector(workflow_id=args.workflow, instance_keys=tuple(args.key),
                            statuses=tuple(InstanceStatus(s) for s in args.status), from_version=args.from_version)
    moves = await svc.move_instances(ns, selector, to_version=args.to, dry_run=args.dry_run, reason=args.reason,
                                     actor=_actor(args.actor) if not args.dry_run else args.actor)
    print(table(["key", "from", "to", "last step", "step in target"],
                [[m.instance_key, m.from_version or "-", m.to_version, m.last_step or "-",
                  "MISSING" if m.last_step_missing_in_target else "ok"] for m in moves]))
    verb = "would move" if args.dry_run else "moved"
    print(f"{verb} {len(moves)} instance(s) of {args.workflow} to version {args.to}"
          + ("" if args.dry_run else "; each move is in the change log (versions log)"))
    missing = sum(m.last_step_missing_in_target for m in moves)
    if missing:
        print(f"WARNING: {missing} instance(s) stand at a step the target version does not have")


def _key_note(key: IdempotencyKey, now: datetime) -> str:
    notes = []
    if key.status is KeyStatus.IN_PROGRESS:
        notes.append("lease alive" if key.lease_alive(now) else "stuck: lease lapsed")
    if key.expired(now):
        notes.append("expired")
    return ", ".join(notes) or "-"


async def _keys(svc: IdempotencyService, ns: str, args: argparse.Namespace) -> None:
    now = await svc.now()
    if args.action == "list":
        flt = KeyFilter(scope=args.scope or "", statuses=tuple(KeyStatus(s) for s in args.status),
                        include_expired=True, stuck_only=args.stuck)
        rows, token = await svc.list_keys(ns, flt, Page(args.limit, ""))
        print(table(["scope", "key", "status", "attempt", "holder", "lease until", "expires", "updated", "fingerprint",
                     "note"],
                    [[k.scope, k.key, k.status.value, k.attempt, k.holder or "-", k.lease_expires_at, k.expires_at,
                      k.updated_at, k.fingerprint[:12] or "-", _key_note(k, now)] for k in rows]))
        if token:
            print(f"(more: raise --limit above {args.limit})")
    elif args.action == "show":
        key = await svc.get(KeyRef(ns, args.scope, args.key), include_expired=True)
        fields: dict[str, object] = dict(vars(key))
        fields["status"] = key.status.value
        fields["result_json"] = key.result_json.decode() if key.result_json else None
        fields["derived_key"] = key.ref.derived_key
        fields["note"] = _key_note(key, now)
        for name, value in fields.items():
            print(f"{name:>16}: {_fmt(value if value != '' else None)}")
    elif args.action == "release":
        done = await svc.force_release(KeyRef(ns, args.scope, args.key), reason=args.reason)
        before, name = done.before, f"{args.scope}/{args.key}"
        if not done.released:
            print(f"nothing to do: key {name} is already released (failed at attempt {before.attempt}); "
                  f"the next claim acquires attempt {before.attempt + 1}")
            return
        print(f"released key {name}: attempt {before.attempt} (holder {before.holder or 'unnamed'}) is now marked "
              "failed.")
        if done.lease_was_alive:
            print(f"WARNING: its lease was still alive (until {_fmt(before.lease_expires_at)}): if that holder is "
                  "still running, the side effect may run a second time when the key is claimed again.")
        else:
            print(f"Its lease had lapsed at {_fmt(before.lease_expires_at)}.")
        print(f"The next claim acquires attempt {before.attempt + 1}; a late Complete or Release from attempt "
              f"{before.attempt} is refused (ABORTED).")


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
