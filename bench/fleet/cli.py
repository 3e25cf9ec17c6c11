"""The fleet benchmark's command line (``python -m bench.fleet``): its arguments (the per-phase
ones shared with :mod:`bench.matrix`) and :func:`main` (exit status 0, 130 when interrupted)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from bench.fleet.run import amain, run_main
from streams.config import ConsumerSettings, KeyBy

__all__ = ["add_phase_arguments", "build_parser", "main"]


def add_phase_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every phase reads from ``ctx.args`` (shared with :mod:`bench.matrix`)."""
    parser.add_argument(
        "--key-by",
        choices=get_args(KeyBy),
        default="balanced",
        help="how the prompts are spread over the partitions, as in producers.prompts (default %(default)s)",
    )
    parser.add_argument("--baseline-concurrency", type=int, default=48, help="default %(default)s")
    parser.add_argument(
        "--strong-queue",
        type=int,
        default=ConsumerSettings().standing_queue,
        help="strong baseline: requests queued per server beyond its running limit (default: the "
        "consumer's standing queue, %(default)s)",
    )
    parser.add_argument(
        "--sim-processes",
        action="store_true",
        help="run each simulator in a process of its own (for fleets one event loop cannot answer)",
    )
    parser.add_argument("--sample-interval", type=float, default=0.25, help="wall seconds between snapshots")
    parser.add_argument(
        "--consumer-args",
        default="",
        help="extra flags for every consumer, e.g. '--consumer.standing-queue 8'",
    )
    parser.add_argument("--logdir", type=Path, help="where logs go (default: a new temporary directory)")
    parser.add_argument(
        "--keep-topics", action="store_true", help="do not delete the run's topics at the end"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.fleet",
        description="Generation consumers vs. the old job's client on a simulated SGLang fleet.",
    )
    parser.add_argument("--prompts", type=int, default=20_000, help="prompts (default %(default)s)")
    parser.add_argument("--servers", type=int, default=7, help="simulated servers (default %(default)s)")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=5.0,
        help="simulated seconds per wall second (default %(default)s)",
    )
    parser.add_argument(
        "--phases",
        default="ours,baseline",
        help="comma-separated: ours, baseline (fixed concurrency), strong (per-server limit + queue, "
        "least-outstanding routing) (default %(default)s)",
    )
    parser.add_argument(
        "--warmup-s", type=float, default=60.0, help="simulated seconds after t0 left out of the steady state"
    )
    add_phase_arguments(parser)
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument(
        "--run-id",
        default="bench-fleet",
        help="run id: the simulator's outputs follow from it (via the rid), so a fixed run id gives "
        "every run the same work (default %(default)s); topics and group get fresh uuid names anyway",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (130 when interrupted)."""
    return run_main(amain, build_parser().parse_args(argv))
