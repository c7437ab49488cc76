"""Kept regression cases: a wave that once broke a rule, stored whole, replayed by `make chaos` on every run.

A seed alone does not keep a case: the generator grows (issue 41 asks every new node and option to join it), and
the same seed then draws another workflow. So a regression is the wave itself, as it ran: its cases (workflows,
keys, deliveries, provider schedules, expectations) and its fault schedule, in one JSON file of
chaos/regressions/. The providers' address, which differs per run, is stored as a placeholder.

`python -m chaos.regressions keep --seed S --wave W --name NAME --note '...'` (with the run's `--n`, `--n8n`
and `--wave-size` when they were not the defaults) writes one from the current generator: do it in the commit
that fixes the defect, before the generator changes. Every `make chaos` replays every kept wave first, in the
n8n mode it failed in, and checks it with the oracle (`make chaos N=0`: only them).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from chaos import faults
from chaos.generator import generate
from chaos.history import ExpectedCall, LimitedCall, SentFile
from chaos.model import Case, Delivery, Expected, ProviderSchedule, Segment, Shape

FOLDER = Path(__file__).resolve().parent / "regressions"
PLACEHOLDER = "http://providers.chaos.invalid"


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def case_to_json(case: Case, services_url: str) -> dict[str, Any]:
    data = asdict(case)
    data["workflows"] = json.loads(json.dumps(case.workflows).replace(services_url, PLACEHOLDER))
    return data


def expected_call(data: list[Any]) -> ExpectedCall:
    """An ExpectedCall from JSON (a list; waves kept before line items or files were drawn lack those)."""
    provider, scope, logic, *more = data
    line = more[0] if more else ""
    file = more[1] if len(more) > 1 else None
    return ExpectedCall(provider, scope, logic, line, SentFile(*file) if file else None)


def case_from_json(data: dict[str, Any], services_url: str) -> Case:
    shape = data["shape"]
    segments = tuple(Segment(**_known(Segment, s)) for s in shape["segments"])
    expected = {k: Expected(**{**_known(Expected, e), "trail": tuple(e["trail"]),
                               "calls": tuple(expected_call(c) for c in e["calls"]),
                               "rewalked": tuple(e.get("rewalked", ())),
                               "limits": tuple(LimitedCall(*c) for c in e.get("limits", ()))})
                for k, e in data["expected"].items()}
    built = {"seed", "index", "workflow_id", "path", "shape", "blocks", "workflows", "keys", "methods", "deliveries",
             "schedules", "expected"}
    # The per-key fields the generator added since (channels, line items, signal times): plain JSON values.
    more = {f.name: data[f.name] for f in fields(Case) if f.name in data and f.name not in built}
    return Case(data["seed"], data["index"], data["workflow_id"], data["path"],
                Shape(**{**_known(Shape, shape), "segments": segments}), list(data["blocks"]),
                json.loads(json.dumps(data["workflows"]).replace(PLACEHOLDER, services_url)),
                list(data["keys"]), dict(data["methods"]),
                [Delivery(**_known(Delivery, d)) for d in data["deliveries"]],
                [ProviderSchedule(**_known(ProviderSchedule, s)) for s in data["schedules"]], expected, **more)


def load(path: Path, services_url: str) -> tuple[list[Case], list[faults.PlannedFault], str]:
    """The kept wave's cases, fault schedule and n8n mode (waves kept before queue mode ran in regular mode)."""
    data = json.loads(path.read_text())
    cases = [case_from_json(c, services_url) for c in data["cases"]]
    plan = [faults.PlannedFault(**f) for f in data["faults"]]
    return cases, plan, str(data.get("n8n", "regular"))


def kept() -> list[Path]:
    return sorted(FOLDER.glob("*.json"))


def keep(name: str, note: str, seed: int, wave: int, *, n: int = 12, wave_size: int = 3, n8n: str = "both",
         faults_per_wave: int = 3) -> Path:
    """Writes wave `wave` of run `seed` (`n` cases in waves of `wave_size`, n8n modes `n8n`) as the current
    generator and fault schedule draw it (a run on plain PostgreSQL with every fault kind, as make chaos's)."""
    indexes = range(wave * wave_size, min(n, (wave + 1) * wave_size))
    url = "http://127.0.0.1:1"
    cases = [generate(seed, i, url) for i in indexes]
    modes = faults.wave_modes(max(wave + 1, -(-n // wave_size)), n8n)
    deck = faults.kinds_for_waves(seed, len(modes), faults_per_wave, faults.KINDS, modes)
    plan = faults.schedule(seed, wave, deck[wave])
    FOLDER.mkdir(exist_ok=True)
    path = FOLDER / f"{name}.json"
    path.write_text(json.dumps({"name": name, "note": note, "seed": seed, "wave": wave, "n8n": modes[wave],
                                "faults": [asdict(f) for f in plan],
                                "cases": [case_to_json(c, url) for c in cases]}, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m chaos.regressions", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    k = sub.add_parser("keep", help="store a wave of a failing run as a regression case")
    k.add_argument("--seed", type=int, required=True)
    k.add_argument("--n", type=int, default=12, help="the run's N (default 12)")
    k.add_argument("--n8n", default="both", help="the run's --n8n (default both)")
    k.add_argument("--wave-size", type=int, default=3, help="the run's --wave (default 3)")
    k.add_argument("--wave", type=int, required=True, help="the failing wave (case index // wave size)")
    k.add_argument("--name", required=True)
    k.add_argument("--note", required=True, help="what broke and which change fixed it")
    sub.add_parser("list", help="the kept regression cases")
    args = p.parse_args(argv)
    if args.command == "keep":
        print(keep(args.name, args.note, args.seed, args.wave, n=args.n, wave_size=args.wave_size, n8n=args.n8n))
    else:
        for path in kept():
            data = json.loads(path.read_text())
            print(f"{path.name}: seed {data['seed']} wave {data['wave']} (n8n {data.get('n8n', 'regular')}), "
                  f"{len(data['cases'])} cases: {data['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
