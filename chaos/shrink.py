"""python -m chaos.shrink --seed S --case I: a failing case made smaller while it still fails the same rule.

It runs case I of seed S with its wave's faults on a stack of its own; if the oracle fails, it tries, one at a
time, the case without one of its faults, with one key, with each key delivered once, with fewer side
effects, and with a side effect's nodes cut to a plain Claim → call → Save (no IF, Switch or line items, no
Code node, no n8n Wait, no Durable Limit, no document download), keeps every reduction that still breaks a rule the original broke, and starts over
from there; a reduction that let the case pass is not tried again.
The smallest failing case is written like a failure of `make chaos`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from chaos import faults, oracle, report
from chaos.__main__ import PLANTS, REPO, plant_in_first_wave
from chaos.generator import generate, reduce, simpler
from chaos.history import History
from chaos.model import Case
from chaos.providers import Providers
from chaos.run import collect, run_wave, trails
from chaos.stack import ChaosStack


@dataclass(frozen=True)
class Size:
    keys: int
    segments: int
    copies: bool
    plan: tuple[faults.PlannedFault, ...]
    # Side effects (by number) that can lose nodes (chaos.generator.simpler), and those made plain so far.
    simplifiable: tuple[int, ...] = ()
    plain: frozenset[int] = frozenset()

    def smaller(self) -> Iterator[tuple[str, Size]]:
        for i, f in enumerate(self.plan):
            yield f"without the {f.kind} at +{f.offset_s} s", replace(self, plan=self.plan[:i] + self.plan[i + 1:])
        if self.keys > 1:
            yield "one key", replace(self, keys=1)
        if self.copies:
            yield "each key delivered once", replace(self, copies=False)
        for n in range(self.segments - 1, 0, -1):
            yield f"{n} side effects", replace(self, segments=n)
        for n in self.simplifiable:
            if n <= self.segments and n not in self.plain:
                yield (f"side effect {n} with fewer nodes (plain Claim → call → Save)",
                       replace(self, plain=self.plain | {n}))


def attempt(stack: ChaosStack, case: Case, wave: int, plan: list[faults.PlannedFault]) -> tuple[list[oracle.Violation], History]:
    h = History()
    record, made = run_wave(stack, [case], wave, plan, lambda line: print(line, flush=True))
    collect(stack, [case], wave, record, made, h)
    stack.retire([case])
    return oracle.check(h), h


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m chaos.shrink", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--case", type=int, required=True)
    p.add_argument("--wave", type=int, default=3, help="the run's --wave (which faults the case met)")
    p.add_argument("--faults-per-wave", type=int, default=3)
    p.add_argument("--n", type=int, default=12, help="the run's --n (which n8n mode the case's wave met)")
    p.add_argument("--n8n", choices=(*faults.MODES, "both"), default="both", help="the run's --n8n")
    p.add_argument("--database", choices=faults.DATABASES, default="postgres", help="the run's --database")
    p.add_argument("--kinds", default=",".join(faults.KINDS))
    p.add_argument("--plant", choices=PLANTS)
    p.add_argument("--max-attempts", type=int, default=12)
    p.add_argument("--out", type=Path, default=REPO / "chaos" / "results")
    args = p.parse_args(argv)
    kinds = tuple(k for k in faults.KINDS if k in args.kinds.split(","))
    wave = args.case // args.wave
    modes = faults.wave_modes(max(wave + 1, -(-args.n // args.wave)), args.n8n)
    providers = Providers(ignore_keys=args.plant == "provider-ignores-keys")
    stack = ChaosStack(Path(tempfile.mkdtemp(prefix="durable-chaos-shrink-")), providers, args.database)
    try:
        stack.start(modes[wave])
        original = generate(args.seed, args.case, providers.url)
        deck = faults.kinds_for_waves(args.seed, len(modes), args.faults_per_wave, kinds, modes, args.database)
        plan = faults.schedule(args.seed, wave, deck[wave])
        if args.plant:
            plan = plant_in_first_wave([original], plan, modes[wave], args.plant)
        violations, history = attempt(stack, original, wave, plan)
        if not violations:
            print(f"seed {args.seed} case {args.case} keeps every rule: nothing to shrink")
            return 0
        rules = {v.rule for v in violations}
        print(f"seed {args.seed} case {args.case} breaks rules {sorted(rules)}; shrinking", flush=True)
        size = Size(len(original.keys), len(original.shape.segments),
                    any(d.when != "first" for d in original.deliveries), tuple(plan),
                    tuple(s.number for s in original.shape.segments if simpler(s) is not None))
        best, best_violations, best_history, tries = original, violations, history, 0
        # A reduction that let the case pass is needed: it is not tried again on the smaller cases that follow.
        needed: set[str] = set()
        progress = True
        while progress and tries < args.max_attempts:
            progress = False
            for what, smaller in size.smaller():
                if what in needed:
                    continue
                if tries >= args.max_attempts:
                    break
                tries += 1
                case = reduce(original, providers.url, keys=smaller.keys, segments=smaller.segments,
                              copies=smaller.copies, tag=f"r{tries}", plain=smaller.plain)
                print(f"attempt {tries}: {what}", flush=True)
                found, h = attempt(stack, case, wave, list(smaller.plan))
                if rules & {v.rule for v in found}:
                    print(f"  still fails: {found[0]}", flush=True)
                    size, best, best_violations, best_history, progress = smaller, case, found, h, True
                    break
                print("  passes: kept the larger one", flush=True)
                needed.add(what)
        out = args.out / f"seed{args.seed}-case{args.case}-shrunk-{time.strftime('%Y%m%d-%H%M%S')}"
        report.write_failure(out, args.seed, [best], {best.index: wave}, {wave: list(size.plan)}, best_history,
                             best_violations, stack.logs())
        print(f"smallest failing case: {len(best.keys)} keys, {len(best.shape.segments)} side effects, "
              f"{len(size.plan)} faults {[f.kind for f in size.plan]}, blocks {best.blocks}; written to {out}")
        for v in best_violations:
            print(f"  {v}")
        for key in sorted({v.key for v in best_violations}):
            for line in [*trails(stack, [key]), *report.evidence(best_history, key)]:
                print(line)
        return 1
    finally:
        stack.close()
        providers.stop()


if __name__ == "__main__":
    sys.exit(main())
