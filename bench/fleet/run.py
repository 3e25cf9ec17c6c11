"""A whole fleet run: the phases in order on a fleet restarted for each, the report, and the
clean-up of every process, simulator and topic on the way out; running such an async main with
SIGTERM/SIGHUP turned into cancellation (shared with :mod:`bench.matrix`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bench.analysis import ideal_makespan, plan_work
from bench.children import Children
from bench.fleet.baselines import run_baseline
from bench.fleet.context import PHASES, BenchContext, PhaseOutcome
from bench.fleet.cpu import find_broker
from bench.fleet.kafka_io import delete_topics
from bench.fleet.ours import run_ours
from bench.fleet.prompts import make_prompts
from bench.fleet.report import PhaseReport, as_json, percent, print_report, report
from bench.fleet.sim_fleet import SimFleet
from simulator import DEFAULT_PROFILE
from streams.config import Settings

__all__ = ["amain", "cancel_on_signals", "run_main", "run_phase"]


def cancel_on_signals() -> None:
    """SIGTERM and SIGHUP cancel the current task, so its ``finally`` clean-up runs."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if task is not None:
            loop.add_signal_handler(sig, task.cancel)


def run_main(
    amain: Callable[[argparse.Namespace], Coroutine[Any, Any, int]], args: argparse.Namespace
) -> int:
    """``asyncio.run(amain(args))``; 130 when interrupted."""
    try:
        return asyncio.run(amain(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: child processes stopped, simulators down", file=sys.stderr)
        return 130


async def run_phase(ctx: BenchContext, phase: str) -> PhaseOutcome:
    """Run the phase named (one of :data:`PHASES`) on a restarted fleet."""
    if phase in ("ours", "unlent"):
        return await run_ours(ctx, lend=phase == "ours")
    return await run_baseline(ctx, strong=phase == "strong")


async def amain(args: argparse.Namespace) -> int:
    """Run the phases and print the report; every process and topic is cleaned up on the way out."""
    cancel_on_signals()
    started = time.monotonic()
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not set(phases) <= set(PHASES) or not phases:
        raise SystemExit(f"--phases: expected some of {', '.join(PHASES)}, got {args.phases!r}")
    logdir = args.logdir or Path(tempfile.mkdtemp(prefix="kafkagen-bench-"))
    logdir.mkdir(parents=True, exist_ok=True)
    run_id = args.run_id
    profile = DEFAULT_PROFILE
    prompts = make_prompts(args.prompts)
    base = Settings()
    print(f"planning the work of {len(prompts)} prompts…", file=sys.stderr, flush=True)
    work = plan_work(prompts, profile, base.generation, run_id)
    fleet = SimFleet(args.servers, profile, args.time_scale, processes=args.sim_processes)
    ctx = BenchContext(args, fleet, prompts, work, run_id, base, logdir, Children())
    ctx.broker = find_broker(base.kafka.bootstrap_servers)
    reports: list[PhaseReport] = []
    try:
        await fleet.start()
        ideal = ideal_makespan(work, args.servers, profile.max_running_requests)
        print(
            f"fleet up ({', '.join(fleet.urls)}); ideal makespan {ideal:.0f} s simulated = "
            f"{ideal / args.time_scale:.0f} s wall; logs in {logdir}",
            file=sys.stderr,
            flush=True,
        )
        for phase in phases:
            outcome = await run_phase(ctx, phase)
            reports.append(report(ctx, outcome))
            r = reports[-1]
            print(
                f"  [{phase}] done: makespan {r.makespan_wall:.1f} s wall = {r.makespan_sim:.0f} s simulated "
                f"({r.makespan_sim / ideal:.3f} × ideal), steady occupancy {percent(r.steady)}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        ctx.children.terminate_all()
        await fleet.stop()
        if ctx.created_topics:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(delete_topics(base, ctx.created_topics), 30)
    print_report(ctx, reports, time.monotonic() - started)
    if args.json:
        args.json.write_text(json.dumps(as_json(ctx, reports), indent=2))
    return 0
