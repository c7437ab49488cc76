"""The grammar of `durable-sidecar`: every command, its arguments and its help text (cli.py runs them)."""

from __future__ import annotations

import argparse

from .domain import InstanceStatus, KeyStatus
from .domain_operations import BulkAction


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

    inst = sub.add_parser("instances", help="list, show, trail, move, retry, resume, cancel, replay or purge instances"
                          ).add_subparsers(dest="action", required=True)
    il = with_ns(inst.add_parser("list", help="newest first; a running instance shows its run state if not active: "
                                              "waiting, scheduled or stalled"))
    il.add_argument("--workflow")
    il.add_argument("--status", action="append", default=[], choices=[s.value for s in InstanceStatus],
                    help="only this stored status (repeatable); running includes waiting, scheduled and stalled")
    il.add_argument("--stalled", action="store_true", help="only running instances whose lease lapsed")
    il.add_argument("--field", action="append", default=[], metavar="NAME=VALUE",
                    help="only instances whose search field matches (repeatable; also <, <=, >, >=; a number "
                         "compares as a number, \"quoted\" as text)")
    il.add_argument("--sort", metavar="FIELD", help="list by this search field (only instances that have it)")
    il.add_argument("--desc", action="store_true", help="with --sort: largest first")
    il.add_argument("--limit", type=int, default=50)
    ish = with_ns(inst.add_parser("show", help="every field of one instance and its newest checkpoint"))
    ish.add_argument("workflow")
    ish.add_argument("key")
    itr = with_ns(inst.add_parser("trail", help="one instance's audit trail, oldest first: what happened, who did "
                                                "it and why, its version moves included"))
    itr.add_argument("workflow")
    itr.add_argument("key")
    itr.add_argument("--limit", type=int, default=200, help="events shown (default 200)")
    im = with_ns(inst.add_parser("move", help="bind chosen instances to another version (logged; try --dry-run)"))
    im.add_argument("workflow")
    im.add_argument("--to", type=int, required=True, help="target version number")
    im.add_argument("--key", action="append", default=[], help="only this instance key (repeatable)")
    im.add_argument("--status", action="append", default=[], choices=[s.value for s in InstanceStatus],
                    help="only this status (repeatable); default running")
    im.add_argument("--from-version", type=int, default=0, help="only instances bound to this version")
    im.add_argument("--dry-run", action="store_true", help="list what would move; change nothing")
    im.add_argument("--reason", default="", help="why (required for a real move; in the change log)")
    im.add_argument("--actor", default="", help="who (default cli:<user>)")
    for action, text in (("retry", "run a suspended or failed instance again from its newest checkpoint"),
                         ("resume", "end a suspended instance's suspension or a running one's wait: due now"),
                         ("cancel", "cancel a running, waiting or suspended instance"),
                         ("purge", "erase a finished instance's states, start item, result, event payloads and audit "
                                   "details for a data-protection request; a tombstone stays")):
        op = with_ns(inst.add_parser(action, help=f"{text} (an audit event with actor and reason)"))
        op.add_argument("workflow")
        op.add_argument("key")
        op.add_argument("--reason", required=True, help="why (in the audit trail)")
        op.add_argument("--actor", default="", help="who (default cli:<user>)")

    ops = sub.add_parser("operations", help="bulk retry, resume, cancel, move or replay of every instance matching a filter: "
                                            "preview, start, list, show, pause, continue, cancel"
                         ).add_subparsers(dest="action", required=True)

    def with_filter(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument("--workflow")
        sp.add_argument("--status", action="append", default=[], choices=[s.value for s in InstanceStatus],
                        help="only this status (repeatable)")
        sp.add_argument("--stalled", action="store_true", help="only running instances whose lease lapsed")
        sp.add_argument("--key-prefix", help="only keys starting with this")
        sp.add_argument("--step", help="only instances whose newest checkpoint is this step")
        sp.add_argument("--error", help="only instances whose last error or error message contains this text")
        sp.add_argument("--field", action="append", default=[], metavar="NAME=VALUE",
                        help="only instances whose search field matches (repeatable; also <, <=, >, >=)")
        return with_ns(sp)

    op_preview = with_filter(ops.add_parser("preview", help="how many instances match, and the first ones (a dry run)"))
    op_preview.add_argument("--sample", type=int, default=10)
    op_start = with_filter(ops.add_parser("start", help="record an operation; the sidecar runs it in batches"))
    op_start.add_argument("bulk_action", choices=[a.value for a in BulkAction])
    op_start.add_argument("--to-version", type=int, default=0,
                          help="move: the version to bind to (required); replay: the forks' version")
    op_start.add_argument("--from-step", help="replay: each instance's newest checkpoint of this step (default: from "
                                              "its start item)")
    op_start.add_argument("--reason", required=True, help="why (on the operation and in each instance's audit trail)")
    op_start.add_argument("--actor", default="", help="who (default cli:<user>)")
    with_ns(ops.add_parser("list", help="the namespace's operations, newest first")).add_argument(
        "--limit", type=int, default=20)
    with_ns(ops.add_parser("show", help="one operation and its progress")).add_argument("id", type=int)
    for action, text in (("pause", "stop after the batch in hand"), ("continue", "go on with a paused operation"),
                         ("cancel", "stop for good (what was done stays done)")):
        op_move = with_ns(ops.add_parser(action, help=text))
        op_move.add_argument("id", type=int)
        op_move.add_argument("--actor", default="", help="who (default cli:<user>)")

    rp = with_ns(inst.add_parser("replay", help="run a finished instance again from one of its checkpoints, as a "
                                                "new instance <key>~r<n>: the steps after it run again, side "
                                                "effects included (with new idempotency keys)"))
    rp.add_argument("workflow")
    rp.add_argument("key")
    rp.add_argument("--from", dest="from_sequence", type=int, required=True,
                    help="the checkpoint's sequence to run again from (0: from the start item)")
    rp.add_argument("--to-version", type=int, default=0, help="bind the fork to this version (default: the original's)")
    rp.add_argument("--reason", required=True, help="why (in both audit trails)")
    rp.add_argument("--actor", default="", help="who (default cli:<user>)")

    cps = sub.add_parser("checkpoints", help="list or show checkpoints").add_subparsers(dest="action", required=True)
    cl = with_ns(cps.add_parser("list", help="an instance's checkpoints, oldest first, without their states"))
    cl.add_argument("workflow")
    cl.add_argument("key")
    cl.add_argument("--limit", type=int, default=100)
    cs = with_ns(cps.add_parser("show", help="one checkpoint with its state JSON (default the newest)"))
    cs.add_argument("workflow")
    cs.add_argument("key")
    cs.add_argument("sequence", type=int, nargs="?", default=0, help="default: the newest")

    pr = with_ns(sub.add_parser("prune", help="delete old checkpoints (the newest of each instance is kept)"))
    pr.add_argument("--workflow")
    pr.add_argument("--key")
    pr.add_argument("--keep-last", type=int, default=0)
    pr.add_argument("--older-than-hours", type=float, default=0)
    pr.add_argument("--dry-run", action="store_true")

    keys = sub.add_parser("keys", help="list, show or release idempotency keys").add_subparsers(dest="action",
                                                                                              required=True)
    kl = with_ns(keys.add_parser("list", help="newest first, expired keys not yet reaped included"))
    kl.add_argument("--scope")
    kl.add_argument("--status", action="append", default=[], choices=[s.value for s in KeyStatus])
    kl.add_argument("--stuck", action="store_true", help="only in-progress keys whose lease lapsed")
    kl.add_argument("--limit", type=int, default=50)
    ks = with_ns(keys.add_parser("show", help="every field of one key, its result and derived key"))
    ks.add_argument("scope")
    ks.add_argument("key")
    kr = with_ns(keys.add_parser("release", help="force-release a stuck in-progress key (marks its attempt failed)"))
    kr.add_argument("scope")
    kr.add_argument("key")
    kr.add_argument("--reason", default="", help="recorded as the key's error message")

    ver = sub.add_parser("versions", help="workflow versions: list, show, diff, register, sync, log").add_subparsers(
        dest="action", required=True)
    vl = with_ns(ver.add_parser("list", help="newest first; * marks the version new instances bind to"))
    vl.add_argument("workflow")
    vl.add_argument("--limit", type=int, default=50)
    vs = with_ns(ver.add_parser("show", help="one version's fields and steps (--definition: its JSON too)"))
    vs.add_argument("workflow")
    vs.add_argument("version", type=int, nargs="?", default=0, help="default: the current one")
    vs.add_argument("--definition", action="store_true", help="print the definition JSON too")
    vd = with_ns(ver.add_parser("diff", help="nodes added, removed and changed between two versions"))
    vd.add_argument("workflow")
    vd.add_argument("old", type=int)
    vd.add_argument("new", type=int)
    vr = with_ns(ver.add_parser("register", help="register a workflow JSON file (- for stdin)"))
    vr.add_argument("workflow")
    vr.add_argument("file")
    vr.add_argument("--label", default="", help="semantic version, e.g. 1.4.0")
    vr.add_argument("--note", default="")
    vr.add_argument("--n8n-version-id", default="")
    vr.add_argument("--actor", default="")
    vy = with_ns(ver.add_parser("sync", help="read the workflow from n8n's API and register it"))
    vy.add_argument("workflow")
    vy.add_argument("--actor", default="")
    se = with_ns(sub.add_parser("sessions", help="the sessions of n8n processes: live ones first, then the ended"))
    se.add_argument("--limit", type=int, default=100)
    vg = with_ns(ver.add_parser("log", help="change log: versions registered and instances moved, newest first"))
    vg.add_argument("workflow", nargs="?", help="only this workflow (also --workflow)")
    vg.add_argument("--workflow", dest="workflow_option", metavar="WORKFLOW", help=argparse.SUPPRESS)
    vg.add_argument("--key")
    vg.add_argument("--limit", type=int, default=50)
    return p
