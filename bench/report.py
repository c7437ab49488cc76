"""Results → summary.md (targets, ratios, every number) and chart.png (latency and throughput vs size and concurrency).

Also runnable on a saved run: `python -m bench.report bench/results/<run>/results.json [--docs docs/bench]`.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

# The report is built by report_rows (results read back), report_targets, report_markdown and report_chart;
# their names stay importable from here.
from bench.report_chart import chart
from bench.report_markdown import OP_TITLES, markdown
from bench.report_rows import Index, Round, Row, floor_for, load_floor, over_rounds, over_save_floors, rounds, save_floor
from bench.report_targets import Target, targets

__all__ = ["OP_TITLES", "Index", "Round", "Row", "Target", "chart", "floor_for", "load_floor", "main", "markdown",
           "over_rounds", "over_save_floors", "rounds", "save_floor", "targets", "write"]


def write(data: dict[str, Any], out: Path, docs: Path | None) -> None:
    (out / "summary.md").write_text(markdown(data))
    if data["meta"].get("plan", {}).get("only"):
        # A subset (--only) leaves most panels empty (and log axes with no data fail): no chart, and
        # docs/ keeps the last full run's summary.
        return
    chart(data, out / "chart.png")
    if docs is not None:
        docs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "summary.md", docs / "summary.md")
        shutil.copyfile(out / "chart.png", docs / "chart.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", type=Path)
    parser.add_argument("--docs", type=Path)
    args = parser.parse_args()
    data = json.loads(args.results.read_text())
    write(data, args.results.parent, args.docs)
    print(f"wrote {args.results.parent / 'summary.md'} and chart.png" + (f", copied to {args.docs}" if args.docs else ""))


if __name__ == "__main__":
    main()
