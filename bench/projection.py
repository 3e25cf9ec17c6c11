"""How close the run's projection (``launch/status/projection.py``, docs/budgets.md "Projection")
comes, replayed on a past run's dataset: its completion records in the order they finished,
projected after 1, 2, 5, 10 and 25% of them by the same :func:`~launch.status.projection.project`
that ``kafkagen status`` calls, against what the run really produced in the end.

Each checkpoint hands ``project`` one member report per consumer of the run (the records'
``consumer``), as that consumer would have reported at the ``k``-th finish: its completions so far
(count, completion tokens, their sum of squares, quality classes), its start (its first request's)
and its rates as a consumer measures them (:func:`streams.control.window_rates`: the last
:data:`~streams.control.RATE_WINDOW_S` seconds, from its first result on when shorter, the finish
times standing for the acknowledgements); and each one's backlog, as status reads it from the lag:
the results still to come of the partitions (the records' ``source.partition``) it wrote the latest
result of. It reports, per projected total: the value, its 95% interval, the real value, the error
and whether the interval held it. The real GPU-hours are each consumer's first request to the
run's last finish (its server held, idle or not). Reads the dataset's ``completions-*.jsonl.zst``
shards (an export's folder, ``kafkagen export --to``). No Kafka needed. Run::

    .venv/bin/python -m bench.projection DATASET [--markdown projection.md]
        [--calibration launch/status/calibration.json --label "GSM8K 1,319 prompts x 2" --past-run TEXT]

``--calibration`` writes what ``kafkagen status`` shows once a run is past 1%
(:mod:`launch.status.calibration`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import zstandard

from bench.children import repo_commit
from launch.status.calibration import Calibration, Check, Checkpoint
from launch.status.projection import Estimate, project
from streams.control import ClassCounts, MemberReport, window_rates
from streams.quality import result_classes

CHECKPOINTS = (0.01, 0.02, 0.05, 0.10, 0.25)
"""fractions of the run's completions after which it is projected."""


@dataclass(frozen=True)
class Done:
    """One finished completion of the past run: when (Unix seconds), its tokens and classes, the
    consumer that wrote it and the prompts topic's partition it came from (-1: not known)."""

    started_at: float
    finished_at: float
    tokens: int
    classes: tuple[str, ...]
    member: str = "replay"
    partition: int = -1


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
                    member = str(r.get("consumer") or r.get("server") or "replay")
                    started, finished = timings["started_at"], timings["finished_at"]
                    partition = int((r.get("source") or {}).get("partition", -1))
                    done.append(Done(started, finished, tokens, classes, member, partition))
    return sorted(done, key=lambda d: d.finished_at)


FINISH = "wall seconds to the finish"
TOKENS = "output tokens"
GPU_HOURS = "GPU-hours"


def _report(member: str, seen: Sequence[Done], started_at: float, at: float) -> MemberReport:
    """The report ``member`` would have sent at ``at`` with ``seen`` (its results so far, in
    finish order) since ``started_at``."""
    first = seen[0].finished_at if seen else None
    tokens_per_s, completions_per_s, since = window_rates(
        ((d.finished_at, d.tokens) for d in seen), first, at
    )
    classes = Counter(c for d in seen for c in d.classes)
    return MemberReport(
        run_id="replay",
        instance=member,
        incarnation="replay",
        host="replay",
        pid=0,
        server=member,
        at=at,
        started_at=started_at,
        completions=len(seen),
        completion_tokens=sum(d.tokens for d in seen),
        completion_tokens_sq=sum(d.tokens * d.tokens for d in seen),
        totals=ClassCounts(results=len(seen), classes=dict(classes)),
        tokens_per_s=tokens_per_s,
        completions_per_s=completions_per_s,
        rate_since=since,
    )


def _drain(
    done: Sequence[Done], seen: Sequence[Done], reports: Sequence[MemberReport]
) -> dict[str, tuple[int, float]] | None:
    """Each member's backlog when ``seen`` are done, as status reads it from the partitions' lag:
    the results still to come of the partitions it wrote the latest result of; with its rate. None
    when the records do not name their partitions."""
    if any(d.partition < 0 for d in done):
        return None
    owner = {d.partition: d.member for d in seen}  # in finish order: the latest writer holds it
    left = Counter(d.partition for d in done)
    left.subtract(d.partition for d in seen)
    lag: Counter[str] = Counter()
    for partition, n in left.items():
        if partition in owner:
            lag[owner[partition]] += n
    return {r.instance: (lag[r.instance], r.tokens_per_s) for r in reports}


def replay(done: Sequence[Done], checkpoints: Sequence[float] = CHECKPOINTS) -> list[Row]:
    """The projection of ``done`` (in finish order) at each checkpoint, against its real totals."""
    total = len(done)
    real_tokens = sum(d.tokens for d in done)
    real_classes = Counter(c for d in done for c in d.classes)
    real_finish = done[-1].finished_at
    start = min(d.started_at for d in done)
    first_start: dict[str, float] = {}
    for d in done:
        first_start[d.member] = min(first_start.get(d.member, d.started_at), d.started_at)
    # each server is held from its first request to the run's end, idle or not
    real_gpu = sum(real_finish - t for t in first_start.values()) / 3600
    rows: list[Row] = []
    for fraction in checkpoints:
        k = max(2, round(fraction * total))
        seen = done[:k]
        at = seen[-1].finished_at
        by_member: dict[str, list[Done]] = defaultdict(list)
        for d in seen:
            by_member[d.member].append(d)
        live = [m for m, t in first_start.items() if t <= at]
        reports = [_report(m, by_member.get(m, []), first_start[m], at) for m in live]
        p = project(
            reports,
            at=at,
            total=total,
            results=k,
            tokens_per_s=sum(r.tokens_per_s for r in reports),
            live_servers=len(reports),
            started_at=start,
            drain=_drain(done, seen, reports),
        )
        assert p is not None
        rows.append(Row(k, total, TOKENS, p.output_tokens, real_tokens))
        if p.finish_at is not None:
            shifted = Estimate(p.finish_at.value - start, p.finish_at.low - start, p.finish_at.high - start)
            rows.append(Row(k, total, FINISH, shifted, real_finish - start))
        if p.gpu_hours is not None:
            rows.append(Row(k, total, GPU_HOURS, p.gpu_hours, real_gpu))
        for name, estimate in sorted(p.classes.items()):
            rows.append(Row(k, total, f"class {name}", estimate, real_classes[name]))
    return rows


def calibration(
    rows: Sequence[Row], *, label: str, past_run: str, command: str, note: str = ""
) -> Calibration:
    """The calibration file of ``rows`` (:mod:`launch.status.calibration`): per checkpoint, the
    output tokens', finish's and GPU-hours' errors and whether their intervals held the truth."""
    points: list[Checkpoint] = []
    for seen in sorted({r.seen for r in rows}):
        at = {r.what: Check(round(r.error, 4), r.held) for r in rows if r.seen == seen}
        total = next(r.total for r in rows if r.seen == seen)
        points.append(
            Checkpoint(round(seen / total, 3), seen, total, at[TOKENS], at.get(FINISH), at.get(GPU_HOURS))
        )
    commit = repo_commit()
    written = datetime.now(UTC).isoformat(timespec="seconds")
    return Calibration(label, past_run, command, commit, written, points, note=note)


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| after | projected | value [95% interval] | real | error | interval holds it |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        e, d = r.projected, 3 if r.what == GPU_HOURS else 0
        held = "yes" if r.held else "no"
        lines.append(
            f"| {r.seen:,} of {r.total:,} ({r.seen / r.total:.0%}) | {r.what} | {e.value:,.{d}f} "
            f"[{e.low:,.{d}f}-{e.high:,.{d}f}] | {r.real:,.{d}f} | {r.error:+.1%} | {held} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.projection", description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="a past run's exported dataset folder")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument("--calibration", type=Path, help="also write the calibration file here (JSON)")
    parser.add_argument("--label", default="", help="the past run in a few words (the calibration's)")
    parser.add_argument("--past-run", default="", help="the past run in full (the calibration's)")
    parser.add_argument("--note", default="", help="anything else the calibration's reader needs")
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
    rows = replay(done)
    text = f"{len(done):,} completions of {args.dataset}\n\n{table(rows)}"
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.calibration:
        label = args.label or f"{len(done):,} completions of {args.dataset.name}"
        command = shlex.join(["python", "-m", "bench.projection", *(sys.argv[1:] if argv is None else argv)])
        cal = calibration(rows, label=label, past_run=args.past_run or label, command=command, note=args.note)
        args.calibration.write_bytes(cal.encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
