"""Rate matrix: ours, the fixed-48 baseline and the strong baseline at each per-server
completion rate of :mod:`bench.rates`, on ``--servers`` (2) simulated servers.

Each row builds a fleet of its profile at its time scale, sends its thinking switch and
``max_tokens`` (the consumers get them through their environment, the baselines in the same
request bodies), and sizes its prompts for ``cell_s × --cell-scale`` wall seconds of ideal work.
The phases are :mod:`bench.fleet`'s (:func:`bench.fleet.run.run_phase`, :func:`bench.fleet.report.report`),
with the steady state starting 2 request lifetimes after t0 (:meth:`RateProfile.warmup_s`).

Per cell: steady-state occupancy (fleet), makespan / ideal, makespan / the strong baseline's,
completions per wall second per server achieved, client CPU ms per completion (the client
processes' CPU seconds from t0 to the end / completions: ours = both consumers, the baselines
their own process), and the machine-limit readout: simulator loop lag (p50 / p99 / max, the
delay the bench's event loop adds to every answer) and CPU cores of each role (simulators and
bench, clients, broker) and of the machine. The highest rate the machine can drive is the highest
row whose strong baseline holds ≥ 98 % steady occupancy. Run from the repository root::

    .venv/bin/python -m bench.matrix --markdown matrix.md
    .venv/bin/python -m bench.matrix --rates 1,50 --cell-scale 0.3   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from bench.analysis import ideal_makespan, plan_work
from bench.children import Children, repo_commit
from bench.fleet.cli import add_phase_arguments
from bench.fleet.context import PHASES, BenchContext
from bench.fleet.cpu import find_broker
from bench.fleet.kafka_io import delete_topics
from bench.fleet.prompts import make_prompts
from bench.fleet.report import PhaseReport, percent, quantile, report
from bench.fleet.run import cancel_on_signals, run_main, run_phase
from bench.fleet.sim_fleet import SimFleet
from bench.rates import RATES, RateProfile, rate_by_name
from simulator import estimate_prompt_tokens
from streams.config import Settings

STEADY_GOAL = 0.98
"""Steady occupancy the issue asks for; a row whose strong baseline misses it is beyond the machine."""


@dataclass(frozen=True, slots=True)
class Cell:
    """One client at one rate. Rates are completions per wall second per server; CPU in cores
    is CPU seconds / wall seconds of the phase."""

    rate: str
    phase: str
    prompts: int
    completed: int
    failures: int
    planned_rate: float
    achieved_rate: float
    steady: float | None
    makespan_wall_s: float
    makespan_over_ideal: float
    cpu_ms_per_completion: float
    lag_p50_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    sim_cores: float
    client_cores: float
    broker_cores: float | None
    machine_cores: float
    over_strong: float | None = None
    repeat: int = 0
    duplicates: int = 0
    """completion records past the first of their prompt."""
    lent: int = 0
    """completions an idle member's server answered for another member (ours: tail lending)."""


def cell_of(
    rate: RateProfile, r: PhaseReport, ideal_s: float, planned_rate: float, servers: int, *, repeat: int = 0
) -> Cell:
    """The figures of one phase's report (``ideal_s`` simulated seconds) in repeat ``repeat``."""
    o, cpu = r.outcome, r.outcome.cpu
    done = len(o.first_finish)
    return Cell(
        rate=rate.name,
        phase=o.name,
        prompts=len(r.outcome.first_finish) + o.failures,
        completed=done,
        failures=o.failures,
        planned_rate=planned_rate,
        achieved_rate=done / r.makespan_wall / servers if r.makespan_wall > 0 else 0.0,
        steady=r.steady,
        makespan_wall_s=r.makespan_wall,
        makespan_over_ideal=r.makespan_sim / ideal_s,
        cpu_ms_per_completion=1000 * cpu.clients_s / done if done else 0.0,
        lag_p50_ms=1000 * quantile(r.lags, 0.5),
        lag_p99_ms=1000 * quantile(r.lags, 0.99),
        lag_max_ms=1000 * max(r.lags, default=0.0),
        sim_cores=cpu.bench_s / cpu.wall_s,
        client_cores=cpu.clients_s / cpu.wall_s,
        broker_cores=None if cpu.broker_s is None else cpu.broker_s / cpu.wall_s,
        machine_cores=cpu.machine_busy_cores,
        repeat=repeat,
        duplicates=o.answers - done,
        lent=o.lent,
    )


def with_strong_ratio(cells: Sequence[Cell]) -> list[Cell]:
    """``cells`` of one row, each with its makespan / the strong baseline's (None without one)."""
    strong = next((c for c in cells if c.phase == "strong"), None)
    if strong is None:
        return list(cells)
    out = []
    for c in cells:
        ratio = c.makespan_wall_s / strong.makespan_wall_s if strong.makespan_wall_s > 0 else None
        out.append(Cell(**{**asdict(c), "over_strong": ratio}))
    return out


def highest_driven_rate(cells: Sequence[Cell]) -> str | None:
    """The highest row whose strong baseline held ≥ :data:`STEADY_GOAL` steady occupancy (rows in
    run order, slowest first); None if none did."""
    best = None
    for c in cells:
        if c.phase == "strong" and c.steady is not None and c.steady >= STEADY_GOAL:
            best = c.rate
    return best


def markdown_table(cells: Sequence[Cell]) -> list[str]:
    """The matrix as markdown lines: one row per (rate, client)."""
    lines = [
        "| rate | client | prompts | completions/s/server planned / achieved | steady occupancy "
        "| makespan / ideal | makespan / strong | client CPU per completion | loop lag p50 / p99 / max "
        "| CPU cores: simulators / clients / broker | machine busy | duplicates / lent |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        broker = "?" if c.broker_cores is None else f"{c.broker_cores:.2f}"
        ratio = "n/a" if c.over_strong is None else f"{c.over_strong:.3f}"
        lines.append(
            f"| {c.rate}{f' ({c.repeat + 1})' if c.repeat else ''} | {c.phase} | {c.completed}/{c.prompts} "
            f"| {c.planned_rate:.1f} / {c.achieved_rate:.1f} "
            f"| {percent(c.steady)} | {c.makespan_over_ideal:.3f} | {ratio} "
            f"| {c.cpu_ms_per_completion:.2f} ms "
            f"| {c.lag_p50_ms:.0f} / {c.lag_p99_ms:.0f} / {c.lag_max_ms:.0f} ms "
            f"| {c.sim_cores:.2f} / {c.client_cores:.2f} / {broker} | {c.machine_cores:.2f} "
            f"| {c.duplicates} / {c.lent} |"
        )
    return lines


def summary_table(cells: Sequence[Cell]) -> list[str]:
    """Per (rate, client) over the repeats: makespan / strong and / ideal, mean (min–max)."""
    lines = [
        "| rate | client | repeats | makespan / strong, mean (min–max) | makespan / ideal, mean (min–max) |",
        "|---|---|---|---|---|",
    ]
    keys = list(dict.fromkeys((c.rate, c.phase) for c in cells))
    for rate, phase in keys:
        group = [c for c in cells if (c.rate, c.phase) == (rate, phase)]
        strong = [c.over_strong for c in group if c.over_strong is not None]
        ideal = [c.makespan_over_ideal for c in group]
        lines.append(f"| {rate} | {phase} | {len(group)} | {_spread(strong)} | {_spread(ideal)} |")
    return lines


def _spread(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.fmean(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} / {five:.2f}"


async def run_row(
    args: argparse.Namespace, rate: RateProfile, children: Children, logdir: Path
) -> tuple[list[Cell], list[str]]:
    """Every phase of one row, ``--repeat`` times (repeat k > 0 under run id ``…-k``: other
    ``rid``s, so other output lengths); returns its cells and the topics it created."""
    base = Settings()
    base = base.model_copy(update={"generation": rate.generation(base.generation)})
    probe = make_prompts(500)
    prompt_tokens = statistics.fmean(estimate_prompt_tokens(p.messages) for p in probe)
    n = rate.prompts_for(args.servers, prompt_tokens, rate.cell_s * args.cell_scale)
    prompts = make_prompts(n)
    slots = rate.profile.max_running_requests
    ns = argparse.Namespace(**vars(args), warmup_s=rate.warmup_s(prompt_tokens))
    fleet = SimFleet(args.servers, rate.profile, rate.time_scale, processes=args.sim_processes)
    row_dir = logdir / f"rate-{rate.name}"
    cells: list[Cell] = []
    topics: list[str] = []
    try:
        await fleet.start()
        for k in range(args.repeat):
            run_id = f"bench-rates-{rate.name}" + (f"-{k}" if k else "")
            work = plan_work(prompts, rate.profile, base.generation, run_id)
            planned = rate.time_scale * slots / statistics.fmean(w.service_s for w in work)
            ideal = ideal_makespan(work, args.servers, slots)
            repeat_dir = row_dir / f"repeat-{k}" if args.repeat > 1 else row_dir
            repeat_dir.mkdir(parents=True, exist_ok=True)
            ctx = BenchContext(ns, fleet, prompts, work, run_id, base, repeat_dir, children)
            ctx.broker = find_broker(base.kafka.bootstrap_servers)
            print(
                f"[rate {rate.name}] {rate.description}: {n} prompts on {args.servers} servers, planned "
                f"{planned:.2f} completions/s/server, ideal {ideal / rate.time_scale:.0f} s wall"
                + (f" (repeat {k + 1}/{args.repeat})" if args.repeat > 1 else ""),
                file=sys.stderr,
                flush=True,
            )
            repeat: list[Cell] = []
            for phase in args.phase_list:
                r = report(ctx, await run_phase(ctx, phase))
                repeat.append(cell_of(rate, r, ideal, planned, args.servers, repeat=k))
                c = repeat[-1]
                print(
                    f"[rate {rate.name}] {phase}: steady {percent(c.steady)}, makespan "
                    f"{c.makespan_over_ideal:.3f} × ideal, {c.cpu_ms_per_completion:.2f} ms CPU/completion, "
                    f"machine {c.machine_cores:.2f} cores",
                    file=sys.stderr,
                    flush=True,
                )
            cells += with_strong_ratio(repeat)
            topics += ctx.created_topics
    finally:
        await fleet.stop()
    return cells, topics


async def amain(args: argparse.Namespace) -> int:
    """Run the rows, print the markdown report, optionally write it and the JSON figures."""
    cancel_on_signals()
    rows = rate_by_name([s.strip() for s in args.rates.split(",") if s.strip()])
    args.phase_list = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not args.phase_list or not set(args.phase_list) <= set(PHASES):
        raise SystemExit(f"--phases: expected some of {', '.join(PHASES)}, got {args.phases!r}")
    logdir = args.logdir or Path(tempfile.mkdtemp(prefix="kafkagen-matrix-"))
    started, date, load_before = time.monotonic(), datetime.datetime.now().astimezone(), _load()
    commit = repo_commit()
    children = Children()
    cells: list[Cell] = []
    topics: list[str] = []
    try:
        for rate in rows:
            row, created = await run_row(args, rate, children, logdir)
            cells += row
            topics += created
    finally:
        children.terminate_all()
        if topics and not args.keep_topics:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(delete_topics(Settings(), topics), 30)
    wall = time.monotonic() - started
    best = highest_driven_rate(cells)
    command = "python -m bench.matrix " + shlex.join(sys.argv[1:] if args.argv is None else args.argv)
    lines = [
        f"Command: `{command.strip()}`; {date:%Y-%m-%d %H:%M %Z}, repository at `{commit}` (at the start); "
        f"{args.servers} servers per row; machine: {psutil.cpu_count()} cores, load average (1 / 5 min) "
        f"{load_before} before, {_load()} after; matrix wall time {wall:.0f} s; logs in {logdir}.",
        "",
        *markdown_table(cells),
        "",
        *([*summary_table(cells), ""] if args.repeat > 1 else []),
        f"Highest rate the machine drives (strong baseline ≥ {100 * STEADY_GOAL:.0f} % steady occupancy): "
        + (f"{best} completions/s per server." if best else "none of the rows run."),
    ]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in cells], indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.matrix", description=" ".join(__doc__.split("\n\n")[0].split())
    )
    parser.add_argument(
        "--rates", default=",".join(r.name for r in RATES), help="comma-separated rows (default %(default)s)"
    )
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated (default %(default)s)")
    parser.add_argument("--servers", type=int, default=2, help="simulated servers (default %(default)s)")
    parser.add_argument(
        "--cell-scale",
        type=float,
        default=1.0,
        help="multiplies every row's cell length (default %(default)s)",
    )
    add_phase_arguments(parser)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of every row's phases, each with other request ids (default %(default)s)",
    )
    parser.add_argument("--markdown", type=Path, help="also write the report (markdown) to this file")
    parser.add_argument("--json", type=Path, help="also write the cells to this JSON file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (130 when interrupted)."""
    args = build_parser().parse_args(argv)
    args.argv = None if argv is None else list(argv)
    return run_main(amain, args)


if __name__ == "__main__":
    sys.exit(main())
