"""The figures of a phase (:func:`report`) and how they are shown: Markdown tables on stdout
(:func:`print_report`) and the JSON summary (:func:`as_json`). Definitions are in
:mod:`bench.analysis`."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from bench.analysis import (
    ServerWindow,
    ideal_makespan,
    run_occupancy,
    steady_window,
    token_ideal_makespan,
)
from bench.fleet.context import BenchContext, PhaseOutcome

__all__ = ["PhaseReport", "as_json", "percent", "print_report", "quantile", "report"]


@dataclass
class PhaseReport:
    """The figures of one phase."""

    outcome: PhaseOutcome
    makespan_wall: float
    makespan_sim: float
    windows: list[ServerWindow | None]
    steady: float | None
    run_occ: list[float]
    work_per_server: list[float]
    prompts_per_server: list[int]
    lags: list[float]
    """the simulator loop's lag samples (s) between t0 and the end of the makespan."""
    refill: list[float] = field(default_factory=list)
    """ours: every server's refill delays (wall s), pooled."""
    queue_cover_s: float | None = None
    """ours: wall seconds the standing queue lasts at the steady completion rate (mean of servers)."""


def report(ctx: BenchContext, o: PhaseOutcome) -> PhaseReport:
    """Makespan, steady-state and whole-run occupancy, and per-server work of one phase."""
    scale = ctx.fleet.time_scale
    slots = ctx.fleet.profile.max_running_requests
    n = ctx.args.servers
    end = max(o.first_finish.values(), default=o.t0_epoch)
    makespan_wall = end - o.t0_epoch
    makespan_sim = makespan_wall * scale
    windows = [
        steady_window(o.samples, k, t0_mono=o.t0_mono, warmup_s=ctx.args.warmup_s, time_scale=scale)
        for k in range(n)
    ]
    used = span = 0.0
    for w in windows:
        if w is not None:
            used += w.occupancy * w.span_s
            span += w.span_s
    start = [s for s in o.samples if s.mono <= o.t0_mono + 1e-9]
    first = start[-1] if start else o.samples[0]
    last = o.samples[-1]
    run_occ = [run_occupancy(first.stats[k], last.stats[k], makespan_sim) for k in range(n)]
    service = {w.prompt_id: w.service_s for w in ctx.work}
    work = [0.0] * n
    count = [0] * n
    for pid, k in o.server_of.items():
        work[k] += service[pid] / slots
        count[k] += 1
    lags = [lag for t, lag in o.lags if o.t0_mono <= t <= o.t0_mono + makespan_wall]
    refill: list[float] = []
    covers: list[float] = []
    for k, (window, delays) in o.refill.items():
        refill += delays
        w = windows[k]
        if w is None or window <= slots:
            continue
        a, b = o.t0_epoch + w.start_s / scale, o.t0_epoch + w.end_s / scale
        done = sum(1 for pid, t in o.first_finish.items() if o.server_of[pid] == k and a <= t <= b)
        if done:
            covers.append((window - slots) / (done / (b - a)))
    return PhaseReport(
        o,
        makespan_wall,
        makespan_sim,
        windows,
        used / span if span else None,
        run_occ,
        work,
        count,
        lags,
        refill,
        statistics.fmean(covers) if covers else None,
    )


def percent(x: float | None) -> str:
    """A fraction (0–1) as a percentage with one decimal, "n/a" for None."""
    return "n/a" if x is None else f"{100 * x:.1f} %"


def print_report(ctx: BenchContext, reports: Sequence[PhaseReport], wall_total: float) -> None:
    """Markdown tables on stdout: the comparison, then one per-server table per phase."""
    a = ctx.args
    fleet = ctx.fleet
    p = fleet.profile
    slots = p.max_running_requests
    scale = fleet.time_scale
    ideal = ideal_makespan(ctx.work, a.servers, slots)
    ideal_tok = token_ideal_makespan(ctx.work, a.servers, p)
    tokens = sum(w.completion_tokens for w in ctx.work)
    print()
    print(
        f"Fleet: {a.servers} simulated servers ({p.name}: {slots} slots, {p.decode_tok_s_min:g}–"
        f"{p.decode_tok_s_max:g} tok/s at batch 1, {p.total_throughput(slots):.0f} tok/s at full batch), "
        f"time scale {fleet.time_scale:g}; {len(ctx.prompts)} prompts, {tokens:,} completion tokens "
        f"(mean {tokens / len(ctx.prompts):.0f}); machine: {psutil.cpu_count()} cores."
    )
    print(
        f"Ideal makespan (total full-batch service time / {a.servers * slots} slots): "
        f"{ideal:.0f} s simulated (token-based: {ideal_tok:.0f} s). "
        f"Steady state: from t0 + {a.warmup_s:g} s to each server's last arrival."
    )
    print()
    cols = [r.outcome.name for r in reports]
    rows: list[tuple[str, list[str]]] = [
        ("prompts completed", [f"{len(r.outcome.first_finish)}/{len(ctx.prompts)}" for r in reports]),
        ("answers received (incl. duplicates)", [str(r.outcome.answers) for r in reports]),
        ("failures / dead letters", [str(r.outcome.failures) for r in reports]),
        ("makespan, wall", [f"{r.makespan_wall:.1f} s" for r in reports]),
        ("makespan, simulated", [f"{r.makespan_sim:.0f} s" for r in reports]),
        ("makespan / ideal", [f"{r.makespan_sim / ideal:.3f}" for r in reports]),
        (
            "busiest server's work / ideal",
            [f"{max(r.work_per_server) / ideal:.3f}" for r in reports],
        ),
        (
            "makespan / busiest server's work",
            [
                f"{r.makespan_sim / max(r.work_per_server):.3f}" if max(r.work_per_server) > 0 else "n/a"
                for r in reports
            ],
        ),
        ("steady-state occupancy (fleet)", [percent(r.steady) for r in reports]),
        (
            "steady-state occupancy, min server",
            [percent(min((w.occupancy for w in r.windows if w), default=None)) for r in reports],
        ),
        (
            "steady-state mean running + queued / server",
            [
                f"{statistics.fmean([w.occupancy * slots + w.mean_queued for w in r.windows if w]):.2f}"
                if any(r.windows)
                else "n/a"
                for r in reports
            ],
        ),
        ("whole-run occupancy (fleet)", [percent(statistics.fmean(r.run_occ)) for r in reports]),
        (
            "machine CPU busy (steal), cores",
            [
                f"{r.outcome.cpu.machine_busy_cores:.2f} ({r.outcome.cpu.steal_cores:.2f}) "
                f"of {r.outcome.cpu.cores}"
                for r in reports
            ],
        ),
        (
            "CPU cores: simulators / clients / broker",
            [
                f"{r.outcome.cpu.bench_s / r.outcome.cpu.wall_s:.2f} / "
                f"{r.outcome.cpu.clients_s / r.outcome.cpu.wall_s:.2f} / "
                + (
                    "?"
                    if r.outcome.cpu.broker_s is None
                    else f"{r.outcome.cpu.broker_s / r.outcome.cpu.wall_s:.2f}"
                )
                for r in reports
            ],
        ),
        (
            "client refill delay p50 / p90 / p99 (wall)",
            [
                f"{1000 * quantile(r.refill, 0.5):.0f} / {1000 * quantile(r.refill, 0.9):.0f} / "
                f"{1000 * quantile(r.refill, 0.99):.0f} ms"
                if r.refill
                else "n/a"
                for r in reports
            ],
        ),
        (
            "standing queue lasts (wall / simulated)",
            [
                f"{1000 * r.queue_cover_s:.0f} ms / {r.queue_cover_s * scale:.1f} s"
                if r.queue_cover_s
                else "n/a"
                for r in reports
            ],
        ),
        (
            "simulator loop lag p50 / p99 / max",
            [
                f"{1000 * quantile(r.lags, 0.5):.0f} / {1000 * quantile(r.lags, 0.99):.0f} / "
                f"{1000 * max(r.lags, default=0):.0f} ms"
                for r in reports
            ],
        ),
    ]
    if len(reports) == 2:
        ratio = reports[1].makespan_sim / reports[0].makespan_sim
        rows.insert(5, (f"makespan ratio {cols[1]} / {cols[0]}", [f"{ratio:.3f}", ""]))
    print("| metric | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for label, values in rows:
        print(f"| {label} | " + " | ".join(values) + " |")
    for r in reports:
        print()
        print(f"{r.outcome.name}: per server ({'; '.join(r.outcome.notes)})")
        print()
        print(
            "| server | prompts | work (s) | steady window (s) | steady occupancy | mean queued | "
            "all slots busy | whole-run occupancy |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for k in range(a.servers):
            w = r.windows[k]
            window = f"{w.start_s:.0f}–{w.end_s:.0f}" if w else "n/a"
            print(
                f"| {k} | {r.prompts_per_server[k]} | {r.work_per_server[k]:.0f} | {window} | "
                f"{percent(w.occupancy if w else None)} | {f'{w.mean_queued:.2f}' if w else 'n/a'} | "
                f"{percent(w.full_fraction if w else None)} | {percent(r.run_occ[k])} |"
            )
    print()
    print(f"Benchmark wall time: {wall_total:.0f} s (logs: {ctx.logdir})")


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0–1) of ``values`` by rank (no interpolation); 0.0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def as_json(ctx: BenchContext, reports: Sequence[PhaseReport]) -> dict[str, Any]:
    """The run's headline figures per phase, for ``--json`` (seconds are simulated unless ``_wall``)."""
    slots = ctx.fleet.profile.max_running_requests
    ideal = ideal_makespan(ctx.work, ctx.args.servers, slots)
    return {
        "prompts": len(ctx.prompts),
        "servers": ctx.args.servers,
        "time_scale": ctx.fleet.time_scale,
        "ideal_makespan_s": ideal,
        "phases": {
            r.outcome.name: {
                "makespan_wall_s": r.makespan_wall,
                "makespan_s": r.makespan_sim,
                "makespan_over_ideal": r.makespan_sim / ideal,
                "busiest_server_work_s": max(r.work_per_server),
                "steady_occupancy": r.steady,
                "steady_occupancy_per_server": [w.occupancy if w else None for w in r.windows],
                "whole_run_occupancy_per_server": r.run_occ,
                "machine_busy_cores": r.outcome.cpu.machine_busy_cores,
                "answers": r.outcome.answers,
                "failures": r.outcome.failures,
            }
            for r in reports
        },
    }
