"""How close the run's projection (``launch/status/projection.py``, docs/budgets.md "Projection")
comes, replayed on a past run's dataset: its completion records in the order they finished,
projected after 1, 2, 5, 10 and 25% of them by the same :func:`~launch.status.projection.project`
that ``kafkagen status`` calls, against what the run really produced in the end.

Each checkpoint hands ``project`` one member report holding the first ``k`` completions (count,
completion tokens, their sum of squares, quality classes) and the rate they were produced at
(completion tokens over the wall seconds from the first record's start to the ``k``-th's finish),
and reports, per projected total: the value, its 95% interval, the real value, the error and
whether the interval held it. Reads the dataset's ``completions-*.jsonl.zst`` shards (an export's
folder, ``kafkagen export --to``); error records count as results without tokens. Run::

    .venv/bin/python -m bench.projection DATASET [--markdown projection.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import zstandard

from launch.status.projection import Estimate, project
from streams.control import ClassCounts, MemberReport
from streams.quality import result_classes

CHECKPOINTS = (0.01, 0.02, 0.05, 0.10, 0.25)
"""fractions of the run's completions after which it is projected."""


@dataclass(frozen=True)
class Done:
    """One finished completion of the past run: when (Unix seconds), its tokens and classes."""

    started_at: float
    finished_at: float
    tokens: int
    classes: tuple[str, ...]


@dataclass(frozen=True)
class Row:
    """One projected total at one checkpoint: ``what`` after ``seen`` of ``total`` completions."""

    seen: int
    total: int
    what: str
    projected: Estimate
    real: float

    @property
    def error(self) -> float:
        """(projected - real) / real; 0 for a real total of 0 projected as 0."""
        return (
            (self.projected.value - self.real) / self.real if self.real else float(self.projected.value != 0)
        )

    @property
    def held(self) -> bool:
        """Whether the 95% interval holds the real total."""
        return self.projected.low <= self.real <= self.projected.high


def read_dataset(folder: Path) -> list[Done]:
    """The completions of an exported dataset in ``folder``, in the order they finished.

    Raises:
        FileNotFoundError: ``folder`` holds no ``completions-*.jsonl.zst`` shard.
    """
    shards = sorted(folder.glob("completions-*.jsonl.zst"))
    if not shards:
        raise FileNotFoundError(f"{folder}: no completions-*.jsonl.zst shard (an export's folder?)")
    done: list[Done] = []
    for shard in shards:
        with zstandard.open(shard, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    timings = r["timings"]
                    classes = tuple(result_classes(r.get("quality") or []))
                    tokens = int(r["usage"]["completion_tokens"])
                    done.append(Done(timings["started_at"], timings["finished_at"], tokens, classes))
    return sorted(done, key=lambda d: d.finished_at)


def replay(done: Sequence[Done], checkpoints: Sequence[float] = CHECKPOINTS) -> list[Row]:
    """The projection of ``done`` (in finish order) at each checkpoint, against its real totals."""
    total = len(done)
    real_tokens = sum(d.tokens for d in done)
    real_classes = Counter(c for d in done for c in d.classes)
    real_finish = done[-1].finished_at
    start = min(d.started_at for d in done)
    rows: list[Row] = []
    for fraction in checkpoints:
        k = max(2, round(fraction * total))
        seen = done[:k]
        at = seen[-1].finished_at
        tokens = sum(d.tokens for d in seen)
        classes = Counter(c for d in seen for c in d.classes)
        report = MemberReport(
            run_id="replay",
            instance="replay",
            incarnation="replay",
            host="replay",
            pid=0,
            server="replay",
            at=at,
            started_at=start,
            completions=k,
            completion_tokens=tokens,
            completion_tokens_sq=sum(d.tokens * d.tokens for d in seen),
            totals=ClassCounts(results=k, classes=dict(classes)),
        )
        rate = tokens / max(at - start, 1e-9)
        p = project(
            [report], at=at, total=total, results=k, tokens_per_s=rate, live_servers=1, started_at=start
        )
        assert p is not None
        rows.append(Row(k, total, "output tokens", p.output_tokens, real_tokens))
        if p.finish_at is not None:
            shifted = Estimate(p.finish_at.value - start, p.finish_at.low - start, p.finish_at.high - start)
            rows.append(Row(k, total, "wall seconds to the finish", shifted, real_finish - start))
        for name, estimate in sorted(p.classes.items()):
            rows.append(Row(k, total, f"class {name}", estimate, real_classes[name]))
    return rows


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| after | projected | value [95% interval] | real | error | interval holds it |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        e = r.projected
        lines.append(
            f"| {r.seen:,} of {r.total:,} ({r.seen / r.total:.0%}) | {r.what} | {e.value:,.0f} "
            f"[{e.low:,.0f}-{e.high:,.0f}] | {r.real:,.0f} | {r.error:+.1%} | {'yes' if r.held else 'no'} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.projection", description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="a past run's exported dataset folder")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    try:
        done = read_dataset(args.dataset)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if len(done) < 200:
        print(
            f"error: {args.dataset}: {len(done)} completions; 1% of a run needs at least 200", file=sys.stderr
        )
        return 2
    text = f"{len(done):,} completions of {args.dataset}\n\n{table(replay(done))}"
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
