"""The chaos audit's output: the fault table, the checks, the summary line and the JSON report."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.chaos.audit import Check, harness_check
from bench.chaos.faults import FaultOutcome
from bench.chaos.pipeline import Exit


def fault_row(o: FaultOutcome) -> str:
    """One line of the fault table."""
    f = o.fault
    return (
        f"{f.index:>2}  {o.at_s:7.1f}  {o.undone_s:7.1f}  {f.kind:<14} {f.target:<11} "
        f"{'ok ' if o.ok else 'BAD'}  {o.outcome}"
    )


FAULT_HEADER = f"{'#':>2}  {'at s':>7}  {'undone':>7}  {'kind':<14} {'target':<11} ok   outcome"


def check_lines(checks: Sequence[Check]) -> list[str]:
    """One line per check, then its first violations, indented."""
    lines = []
    for c in checks:
        lines.append(f"  {'PASS' if c.ok else 'FAIL'}  {c.name:<26} {c.detail}")
        lines += [f"        - {v}" for v in c.violations]
    return lines


def summary_line(seed: int, outcomes: Sequence[FaultOutcome], checks: Sequence[Check], wall_s: float) -> str:
    """``chaos seed S: N faults (k as planned), product c/m checks PASS|FAIL, harness PASS|FAIL,
    wall W s: PASS|FAIL``."""
    product = [c for c in checks if not harness_check(c.name)]
    harness = [c for c in checks if harness_check(c.name)]
    passed = sum(c.ok for c in product)
    product_ok, harness_ok = passed == len(product), all(c.ok for c in harness)
    verdict = "PASS" if product_ok and harness_ok else "FAIL"
    return (
        f"chaos seed {seed}: {len(outcomes)} faults ({sum(o.ok for o in outcomes)} as planned), "
        f"product {passed}/{len(product)} checks {'PASS' if product_ok else 'FAIL'}, "
        f"harness {'PASS' if harness_ok else 'FAIL'}, wall {wall_s:.0f} s: {verdict}"
    )


def write_json(
    path: Path,
    *,
    header: dict[str, Any],
    outcomes: Sequence[FaultOutcome],
    exits: Sequence[Exit],
    checks: Sequence[Check],
    stats: dict[str, Any],
    summary: str,
) -> None:
    """Write the JSON report: the run's parameters, every fault with its outcome, the exits, the
    checks with their violations and the summary."""
    report = {
        **header,
        "ok": all(c.ok for c in checks),
        "product_ok": all(c.ok for c in checks if not harness_check(c.name)),
        "harness_ok": all(c.ok for c in checks if harness_check(c.name)),
        "summary": summary,
        "faults": [
            {
                **dataclasses.asdict(o.fault),
                **{k: v for k, v in dataclasses.asdict(o).items() if k != "fault"},
            }
            for o in outcomes
        ],
        "exits": [dataclasses.asdict(e) for e in exits],
        "checks": [dataclasses.asdict(c) for c in checks],
        "stats": stats,
    }
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
