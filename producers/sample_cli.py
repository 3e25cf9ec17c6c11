"""``python -m producers.sample``'s command line: write the demo prompt file (:mod:`producers.sample`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from producers.sample import DEMO_FILE, draw
from streams.cli import run_command

__all__ = ["main", "sample"]


@click.command("sample", help="Draw the bundled demo prompt file from the public prompt sets.")
@click.option(
    "--out", type=click.Path(path_type=Path), default=DEMO_FILE, show_default=True, help="output file"
)
@click.option("--gsm8k", type=click.IntRange(min=0), default=40, show_default=True, help="GSM8K questions")
@click.option(
    "--mt-bench", type=click.IntRange(min=0), default=30, show_default=True, help="MT-Bench questions"
)
@click.option(
    "--bfcl", type=click.IntRange(min=0), default=30, show_default=True, help="BFCL tool-calling prompts"
)
def sample(out: Path, gsm8k: int, mt_bench: int, bfcl: int) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", encoding="utf-8") as f:
        for row in draw(gsm8k, mt_bench, bfcl):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    print(f"wrote {n} prompts to {out}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the demo prompt file. Returns the exit status (:mod:`streams.cli`)."""
    return run_command(sample, argv, prog="python -m producers.sample")
