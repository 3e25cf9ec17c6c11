"""``python -m bench.chaos.summary REPORT.json...``: one Markdown table over several audit runs.

Reads the ``report.json`` each ``python -m bench.chaos`` run writes and prints, for RELIABILITY.md:
a row per run (seed, faults, prompts, product checks, duplicates and their traced causes, the
harness's verdict, wall time, verdict),
the faults injected by kind with how many went as planned, and the totals. Exit status 0 when every
run passed, 1 otherwise; 2 when a report cannot be read (the message names the file).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.chaos.audit import harness_check


def load(path: Path) -> dict[str, Any]:
    """One report.

    Raises:
        ValueError: the file is missing, not JSON, or not an audit report (names the file).
    """
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the report: {exc}") from None
    if not isinstance(report, dict) or "faults" not in report or "checks" not in report:
        raise ValueError(f"{path}: not a bench.chaos report (no 'faults' and 'checks')")
    return report


def markdown(reports: Sequence[dict[str, Any]]) -> str:
    """The tables: runs, then faults by kind, then totals."""
    lines = [
        "| seed | faults | overlap | prompts | product checks | duplicates | harness | wall s | verdict |",
        "|---:|---:|---|---:|---|---:|---|---:|---|",
    ]
    kinds: Counter[str] = Counter()
    planned: Counter[str] = Counter()
    for r in reports:
        product = [c for c in r["checks"] if not harness_check(c["name"])]
        passed = sum(bool(c["ok"]) for c in product)
        harness = r.get("harness_ok", True)
        stats = r.get("stats", {})
        lines.append(
            f"| {r['seed']} | {len(r['faults'])} | {'yes' if r.get('overlap') else 'no'} | {r['prompts']} | "
            f"{passed}/{len(product)} | {stats.get('duplicates', '?')} | {'PASS' if harness else 'FAIL'} | "
            f"{float(r['wall_s']):.0f} | {'PASS' if r['ok'] else 'FAIL'} |"
        )
        for f in r["faults"]:
            kinds[f["kind"]] += 1
            planned[f["kind"]] += bool(f["ok"])
    lines += ["", "| fault kind | injected | as planned |", "|---|---:|---:|"]
    lines += [f"| {k} | {n} | {planned[k]} |" for k, n in sorted(kinds.items())]
    total = sum(kinds.values())
    runs_ok = sum(bool(r["ok"]) for r in reports)
    lines += ["", f"{len(reports)} runs, {total} faults, {runs_ok}/{len(reports)} runs passed every check."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.chaos.summary", description=__doc__)
    parser.add_argument("reports", nargs="+", type=Path, help="report.json files of bench.chaos runs")
    args = parser.parse_args(argv)
    try:
        reports = [load(p) for p in args.reports]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(reports))
    return 0 if all(r["ok"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
