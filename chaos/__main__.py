"""python -m chaos: N generated workflows against one stack under seeded faults, checked by the oracle (issue 41).

The stack starts once (chaos/stack.py); the cases run in waves of a few at once, each wave with its own
seeded faults. The run prints its seed first, then the table and the coverage report; on a violation it
writes the failing cases (workflows, delivery plan, fault schedule, facts) and the logs to a folder and
exits 1. `--seed S --case I` replays one case.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from chaos import faults, oracle, regressions, report
from chaos.generator import generate
from chaos.history import History
from chaos.model import Case
from chaos.providers import Providers
from chaos.run import collect, run_wave, trails
from chaos.stack import ChaosStack

REPO = Path(__file__).resolve().parents[1]
PLANTS = ("provider-ignores-keys", "limits-ignored")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=12, help="generated workflows (cases); default 12, the short form")
    p.add_argument("--seed", type=int, default=None, help="the run's seed (default: a new one, printed)")
    p.add_argument("--wave", type=int, default=3, help="cases run at once under one fault schedule (default 3)")
    p.add_argument("--faults-per-wave", type=int, default=3, help="faults injected in each wave (default 3)")
    p.add_argument("--n8n", choices=(*faults.MODES, "both"), default="both",
                   help="n8n's mode: regular, queue (a main and two workers), or both (default: the first half "
                        "of the waves regular, the rest queue)")
    p.add_argument("--database", choices=faults.DATABASES, default="postgres",
                   help="the sidecars' database: one throwaway PostgreSQL (default), or a throwaway Patroni cluster "
                        "(etcd and three nodes; the long form), whose faults are a switchover and a primary kill")
    p.add_argument("--kinds", default=",".join(faults.KINDS), help="fault kinds to draw from (comma-separated)")
    p.add_argument("--case", type=int, action="append", default=[], help="run only this case index (repeatable)")
    p.add_argument("--plant", choices=PLANTS, help="a planted defect the oracle must catch (the run must fail)")
    p.add_argument("--out", type=Path, default=REPO / "chaos" / "results", help="where a failure's cases are written")
    p.add_argument("--no-regressions", action="store_true",
                   help="skip the kept regression waves (chaos/regressions/), which every run replays first")
    args = p.parse_args(argv)
    if args.n < 0 or args.wave < 1 or args.faults_per_wave < 0:
        p.error("--n must be at least 0 (0: only the kept regression waves), --wave at least 1, "
                "--faults-per-wave at least 0")
    if args.n == 0 and (args.case or args.plant or args.no_regressions):
        p.error("--n 0 runs only the kept regression waves: without --case, --plant and --no-regressions")
    if args.database == "patroni":
        from tests.faults.patroni import tools_missing

        if missing := tools_missing():
            p.error(missing)
    unknown = set(args.kinds.split(",")) - set(faults.KINDS)
    if unknown:
        p.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(faults.KINDS)}")
    return args


def plant_in_first_wave(cases: list[Case], plan: list[faults.PlannedFault], mode: str,
                        plant: str = "provider-ignores-keys") -> list[faults.PlannedFault]:
    """With a planted provider defect, the first wave's calls take 3 s at least and n8n (in queue mode: both
    workers) is killed inside one, so a resumed call repeats its key: a provider that ignores keys then performs
    it twice. With `limits-ignored`, the first wave's calls take 3 s at least, no fault comes, and its workflows'
    Durable Limits let everything through (a limiter that does not limit) while the oracle expects the drawn
    limits: rule 6 must fail wherever a limit is shared by two keys or more."""
    from dataclasses import replace

    for case in cases:
        case.schedules = [replace(s, delay_s=max(s.delay_s, 3.0)) for s in case.schedules]
    if plant == "limits-ignored":
        for case in cases:
            for wf in case.workflows:
                for node in wf["nodes"]:
                    params = node["parameters"] if node["type"].endswith(".durableLimit") else {}
                    if params.get("operation") == "enterSection":
                        params["maxHolders"] = 1000
                    if params.get("rateToo") or params.get("operation") == "rateLimit":
                        params |= {"maxItems": 1000, "periodAmount": 1}
        return []
    if mode == "queue":
        return [faults.PlannedFault("worker-kill", 2.0, "w0 in-call", 0.0),
                faults.PlannedFault("worker-kill", 2.1, "w1 in-call", 0.0), *plan]
    return [faults.PlannedFault("n8n-kill", 2.0, "in-call", 0.0), *plan]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    flags = (f" --n8n {args.n8n}" if args.n8n != "both" else "") + \
        (f" --database {args.database}" if args.database != "postgres" else "") + \
        (f" --kinds {args.kinds}" if args.kinds != ",".join(faults.KINDS) else "")
    mode = f" CHAOS_ARGS='{flags.strip()}'" if flags else ""
    print(f"make chaos: seed {seed} (reproduce with: make chaos SEED={seed} N={args.n}{mode})", flush=True)
    started = time.monotonic()
    indexes = sorted(set(args.case)) or list(range(args.n))
    regression_files = [] if args.case or args.plant or args.no_regressions else regressions.kept()
    kinds = tuple(k for k in faults.KINDS if k in args.kinds.split(","))
    # Case i belongs to wave i // --wave whatever else runs, so `--case i` meets the faults it met in the run.
    waves: dict[int, list[int]] = {}
    for i in indexes:
        waves.setdefault(i // args.wave, []).append(i)
    # A wave's mode depends on the run's waves (not on the cases chosen), so `--case i` meets its mode too.
    modes = faults.wave_modes(max(max(waves, default=-1) + 1, -(-args.n // args.wave)), args.n8n)
    kind_deck = faults.kinds_for_waves(seed, len(modes), args.faults_per_wave, kinds, modes, args.database)
    providers = Providers(ignore_keys=args.plant == "provider-ignores-keys")
    work = Path(tempfile.mkdtemp(prefix="durable-chaos-"))
    stack = ChaosStack(work, providers, args.database)
    history = History()
    passed = False
    cases: list[Case] = []
    plans: dict[int, list[faults.PlannedFault]] = {}
    wave_of: dict[int, int] = {}
    try:
        what = "a Patroni cluster" if args.database == "patroni" else "PostgreSQL"
        print(f"starting the stack in {work} ({what} and Redis of its own, two sidecars, n8n) ...", flush=True)
        # The kept regression waves first (each in the n8n mode it failed in, numbered after the drawn waves),
        # then the drawn ones.
        runs: list[tuple[int, str, str, list[Case], list[faults.PlannedFault]]] = []
        next_index = args.n
        for j, path in enumerate(regression_files):
            kept_cases, plan, mode = regressions.load(path, providers.url)
            for c in kept_cases:
                c.index, next_index = next_index, next_index + 1
            runs.append((len(modes) + j, f", regression {path.stem}", mode, kept_cases, plan))
        for w, wave_indexes in waves.items():
            wave_cases = [generate(seed, i, providers.url) for i in wave_indexes]
            plan = faults.schedule(seed, w, kind_deck[w])
            if args.plant and w == min(waves):
                plan = plant_in_first_wave(wave_cases, plan, modes[w], args.plant)
            runs.append((w, "", modes[w], wave_cases, plan))
        stack.start(runs[0][2])
        print(f"stack ready in {time.monotonic() - started:.0f} s", flush=True)
        for w, label, mode, wave_cases, plan in runs:
            if mode != stack.mode:
                t = time.monotonic()
                stack.use_mode(mode)
                print(f"n8n now in {mode} mode ({time.monotonic() - t:.0f} s to switch)", flush=True)
            wave_indexes = [c.index for c in wave_cases]
            plans[w] = plan
            cases += wave_cases
            wave_of.update({c.index: w for c in wave_cases})
            print(f"wave {w} (n8n {mode}{label}): cases {wave_indexes}, {sum(len(c.keys) for c in wave_cases)} keys, "
                  f"{sum(len(c.deliveries) for c in wave_cases)} deliveries, faults "
                  f"{[f'{f.kind}@{f.offset_s}s' for f in plan]}", flush=True)
            t = time.monotonic()
            record, made = run_wave(stack, wave_cases, w, plan, lambda line: print(line, flush=True))
            collect(stack, wave_cases, w, record, made, history)
            stack.retire(wave_cases)
            print(f"wave {w} done in {time.monotonic() - t:.0f} s", flush=True)
        violations = oracle.check(history)
        print(f"\nmake chaos: seed {seed}, {len(cases)} workflows\n{report.table(history, cases, time.monotonic() - started)}")
        possible = tuple(k for k in kinds if any(k in faults.kinds_fitting(m, kinds, args.database)
                                                 for m in {r[2] for r in runs}))
        print(f"\ncoverage\n{report.coverage(cases, history, plans, possible)}")
        if args.plant:
            print(f"\nplanted defect: {args.plant} (the oracle must fail)")
        if not violations:
            print(f"\nmake chaos: every rule held (seed {seed})")
            passed = True
            return 0
        out = args.out / f"seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
        report.write_failure(out, seed, cases, wave_of, plans, history, violations, stack.logs())
        print(f"\nmake chaos FAILED: {len(violations)} violations, seed {seed}")
        for v in violations:
            print(f"  {v}")
        print("what the violating keys' instances, providers and faults recorded:")
        for key in sorted({v.key for v in violations}):
            for line in [*trails(stack, [key]), *report.evidence(history, key)]:
                print(line)
        bad = sorted({c.index for c in cases for v in violations if v.key in c.keys})
        print(f"cases {bad}, their workflows, delivery plans and fault schedules: {out}")
        if bad and bad[0] >= args.n:
            print(f"a kept regression wave failed again: replay them with make chaos N=0 ({regressions.FOLDER})")
            return 1
        plant = f" --plant {args.plant}" if args.plant else ""
        first = bad[0] if bad else 0
        mode = flags
        print(f"replay one: make chaos SEED={seed} N={args.n} CHAOS_ARGS='--wave {args.wave} --case {first}{mode}{plant}'")
        print(f"shrink it: {sys.executable} -m chaos.shrink --seed {seed} --case {first} --wave {args.wave} --n {args.n}{mode}{plant}")
        return 1
    finally:
        stack.close()
        providers.stop()
        # The work folder (n8n's user folder, every full log) is kept when the run failed.
        if passed:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"full logs: {work}")


if __name__ == "__main__":
    sys.exit(main())
