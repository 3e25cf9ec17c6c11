"""What every phase of a fleet run shares (:class:`BenchContext`), what a phase yields
(:class:`PhaseOutcome`), the phase names and the progress line printed while one runs."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.analysis import Sample, Work
from bench.children import Children
from bench.fleet.cpu import CpuUsage
from bench.fleet.sim_fleet import SimFleet
from streams.config import Settings
from streams.records import PromptRecord

__all__ = ["PHASES", "BenchContext", "PhaseOutcome", "print_progress"]

PHASES = ("ours", "unlent", "baseline", "strong")
"""The phases a run may have: ours, ours with tail lending off (``consumer.lend``), the
fixed-concurrency baseline, the strong baseline."""


@dataclass
class PhaseOutcome:
    """What one phase (ours or the baseline) did."""

    name: str
    t0_epoch: float
    t0_mono: float
    first_finish: dict[str, float]
    """prompt id → epoch seconds of its first answer."""
    server_of: dict[str, int]
    """prompt id → index of the server that answered first."""
    answers: int
    failures: int
    samples: list[Sample]
    lags: list[tuple[float, float]]
    cpu: CpuUsage
    notes: list[str] = field(default_factory=list)
    refill: dict[int, tuple[int, list[float]]] = field(default_factory=dict)
    """server → (window, refill delays in wall seconds); ours only (see :func:`refill_latencies`)."""
    lent: int = 0
    """completions answered by another consumer's server than their writer's (ours: tail lending)."""


@dataclass
class BenchContext:
    """Everything both phases share."""

    args: argparse.Namespace
    fleet: SimFleet
    prompts: list[PromptRecord]
    work: list[Work]
    run_id: str
    base: Settings
    logdir: Path
    children: Children
    broker: psutil.Process | None = None
    created_topics: list[str] = field(default_factory=list)


def print_progress(ctx: BenchContext, name: str, sample: Sample, t0_mono: float, done: int) -> None:
    running = sum(s.running for s in sample.stats)
    queued = sum(s.queued for s in sample.stats)
    sim = (sample.mono - t0_mono) * ctx.fleet.time_scale
    print(
        f"  [{name}] {sample.mono - t0_mono:6.0f} s wall = {sim:7.0f} s simulated: "
        f"{done}/{len(ctx.prompts)} finished, running {running}, queued {queued}",
        file=sys.stderr,
        flush=True,
    )
