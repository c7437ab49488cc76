"""What a chaos run prints: the table of issue 41 and the coverage report; on failure, the case's folder."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from chaos import oracle
from chaos.blocks import BLOCKS
from chaos.faults import KINDS, PlannedFault
from chaos.history import History, belongs_to
from chaos.model import Case

# Building blocks and fault kinds issue 41 asks for that the generator and the injector do not make yet.
NOT_YET = (
)


def table(h: History, cases: list[Case], seconds: float) -> str:
    faults = Counter(f.kind for f in h.faults)
    acked = sum(1 for d in h.deliveries if d.acknowledged)
    recoveries = oracle.recoveries(h)
    longest = max(recoveries, key=lambda r: r[1], default=None)
    carriers = sum(1 for c in cases if c.shape.signal_via == "workflow")
    subs = sum(len(c.workflows) - 1 for c in cases) - carriers
    stuck = {v.key for v in oracle.rule_3_nothing_stuck(h)}
    rows = [
        ("workflows", f"{len(cases)} (+{subs} sub-workflows, +{carriers} carrier workflows), "
                      f"{len(h.expectations)} business keys"),
        ("deliveries", f"{len(h.deliveries)} ({acked} acknowledged)"),
        ("faults", f"{sum(faults.values())}: " + ", ".join(f"{k} {faults[k]}" for k in KINDS if faults[k])),
        ("lost", str(len(oracle.lost(h)))),
        ("duplicate effects", str(len(oracle.duplicate_effects(h)))),
        ("stuck", str(len(stuck))),
        ("longest recovery", f"{longest[1]:.1f} s ({longest[0].kind} on {longest[0].target})" if longest else "-"),
        ("provider calls", f"{len(h.calls)} ({sum(1 for c in h.calls if c.effective)} effective, "
                           f"{sum(1 for c in h.calls if c.status == 500)} scheduled failures)"),
        ("files", files_row(h)),
        ("time", f"{seconds:.0f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def files_row(h: History) -> str:
    """The calls that carried the order's document (rule 7 checks each), and those sent after an n8n process died,
    or an execution failed on one of the side effect's calls, since the Save that kept the file (so the file most
    likely came back from the sidecar, through the Resume Point)."""
    carried = effective = after_death = 0
    for e in h.expectations:
        for x in e.calls:
            if x.file is None:
                continue
            kept_by = e.trail[e.trail.index(x.scope) - 1]
            saved = [c.created_at for c in h.trail(e.workflow_id, e.key) if c.step == kept_by]
            calls = h.calls_of(x.provider, x.order(e.key))
            deaths = [f.at for f in h.faults if f.wave == e.wave and f.kind in oracle.HOLDER_DEATHS]
            # Under the Resume Point's retry policy an execution that failed on a call is resumed from the Save.
            deaths += [c.at for c in calls if c.status >= 400 and e.retry_policy]
            for c in calls:
                if c.files != (x.file,):
                    continue    # rule 7's
                carried += 1
                effective += c.effective
                after_death += bool(saved) and any(min(saved) < t < c.at for t in deaths)
    if not carried:
        return "-"
    return (f"{carried} calls carried the order's document ({effective} effective), {after_death} of them after an "
            "n8n process died or an execution failed since the Save that kept it")


def coverage(cases: list[Case], h: History, plans: dict[int, list[PlannedFault]],
             kinds: tuple[str, ...] = KINDS) -> str:
    """(`kinds`: the fault kinds this run could deal, given its n8n modes and database.)"""
    blocks = Counter(b for c in cases for b in c.blocks)
    faults = Counter(f.kind for f in h.faults)
    schedules = Counter((f"fails {s.fail_first}× then " if s.fail_first else "") + s.kind
                        for c in cases for s in c.schedules)
    deliveries = Counter(d.when for d in h.deliveries)
    aimed = Counter(f.kind for p in plans.values() for f in p if f.in_call)
    lines = ["  building blocks (cases using each):"]
    lines += [f"    {blocks[b.name]:>4}  {b.name}" for b in BLOCKS]
    unused = [b.name for b in BLOCKS if not blocks[b.name]]
    lines.append(f"    not used this run: {', '.join(unused) if unused else 'none'}")
    lines.append("  fault kinds: " + ", ".join(f"{k} {faults[k]}" for k in kinds)
                 + " (aimed inside a call: " + (", ".join(f"{k} {aimed[k]}" for k in KINDS if aimed[k]) or "none") + ")")
    lines.append(f"    not used this run: {', '.join(k for k in kinds if not faults[k]) or 'none'}")
    lines.append("  provider schedules (provider × key): " + ", ".join(f"{k} {n}" for k, n in sorted(schedules.items())))
    lines.append("  deliveries: " + ", ".join(f"{k} {n}" for k, n in sorted(deliveries.items())))
    if NOT_YET:
        lines.append("  not in the generator yet: " + "; ".join(NOT_YET))
    return "\n".join(lines)


def _stamp(t: float) -> str:
    return f"{time.strftime('%H:%M:%S', time.localtime(t))}.{int(t % 1 * 1000):03d}"


def evidence(h: History, key: str) -> list[str]:
    """A key's provider calls, then its wave's faults as made, each in time order, to the millisecond."""
    out = [f"      {_stamp(c.at)} call {c.provider} {c.key}: {c.status}{' effective' if c.effective else ''}"
           for c in sorted((c for c in h.calls if belongs_to(c.key, key)), key=lambda c: c.at)]
    waves = {e.wave for e in h.expectations if e.key == key}
    out += [f"      {_stamp(f.at)} fault {f.kind} on {f.target}, back at {_stamp(f.back_at)}"
            for f in sorted((f for f in h.faults if f.wave in waves), key=lambda f: f.at)]
    return out


def write_failure(out: Path, seed: int, cases: list[Case], waves: dict[int, int], plans: dict[int, list[PlannedFault]],
                  h: History, violations: list[oracle.Violation], logs: dict[str, str]) -> None:
    """The failing cases' workflows, delivery plans and their waves' fault schedules (planned and as made),
    the violations, and every log's tail."""
    out.mkdir(parents=True, exist_ok=True)
    bad_keys = {v.key for v in violations}
    for case in cases:
        if not bad_keys & set(case.keys):
            continue
        folder = out / f"case-{case.index}"
        folder.mkdir(exist_ok=True)
        for wf in case.workflows:
            (folder / f"{wf['id']}.json").write_text(json.dumps(wf, indent=2))
        wave = waves[case.index]
        (folder / "plan.json").write_text(json.dumps({
            **case.plan(), "wave": wave,
            "faults_planned": [vars(f) for f in plans[wave]],
            "faults_made": [vars(f) for f in h.faults if f.wave == wave],
            "deliveries_made": [vars(d) for d in h.deliveries if d.case == case.index],
            "calls": [vars(c) for c in h.calls if any(belongs_to(c.key, k) for k in case.keys)],
            "instances": [vars(i) for i in h.instances if i.key in case.keys],
            "checkpoints": [vars(c) for c in h.checkpoints if c.key in case.keys],
            "idempotency_keys": [vars(k) for k in h.keys if any(k.key == key or k.key.startswith(f'["{key}",')
                                                                for key in case.keys)],
        }, indent=2, default=str))
    (out / "violations.txt").write_text(f"seed {seed}\n" + "\n".join(str(v) for v in violations) + "\n")
    logs_dir = out / "logs"
    logs_dir.mkdir(exist_ok=True)
    for name, text in logs.items():
        (logs_dir / f"{name}.log").write_text(text)
