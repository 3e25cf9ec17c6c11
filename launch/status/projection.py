"""A run's projection (docs/budgets.md, "Projection"): its total output tokens, GPU-hours and finish
time at the end, and each quality class's count at the end, each with a 95% interval, from what
the members' reports on the control topic say so far. Pure; :func:`launch.status.shape.shape`
puts it in the status document (``projection``).

The interval of the output tokens treats the remaining completions as independent draws of the
per-completion token counts seen so far (their mean and spread, from the reports' sums of tokens
and of squared tokens): ``remaining × mean ± z·sqrt(remaining·var + remaining²·var/n)``, the second
term being the uncertainty of the mean itself. A class's count at the end is the same for a
0/1 draw (its share ``p``, ``var = p(1-p)``). The finish is when the last member is done with its
own partitions' backlog at its own tokens/s (:func:`drain_finish`; each member's rate from its first
result on: :func:`streams.control.window_rates`), else (every member lending to idle servers, or a
member with lag but no rate) the remaining tokens at the fleet's tokens/s;
the GPU-hours are the server-hours the members held so far (each process's ``started_at`` to its last
report) plus the live servers until the finish.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from launch.status.calibration import Calibration, Replayed
from streams.control import MemberReport

__all__ = [
    "Z_95",
    "Budgets",
    "Estimate",
    "Projection",
    "against",
    "budgets_of",
    "drain_finish",
    "project",
    "server_seconds",
]

Z_95 = 1.96
"""the normal quantile of a two-sided 95% interval."""


@dataclass(frozen=True)
class Estimate:
    """A projected value and its 95% interval (``low`` <= ``value`` <= ``high``), in the unit of
    the field that holds it."""

    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Projection:
    """The run at its end as projected at ``at`` (Unix seconds) from ``results`` of ``total``.

    ``output_tokens``: completion tokens of the run in all (tokens); ``gpu_hours``: server-hours
    (servers × wall hours) at the finish: ``gpu_hours_so_far`` (every member's held time, from its
    reports) plus the live ``servers`` until the finish; ``finish_at``: Unix seconds, None without
    a rate; ``classes``: per quality class, results with it at the end; ``started_at``: the run's
    start (Unix seconds); ``replayed``: how close the projection came at about this share of a
    replayed past run (:mod:`launch.status.calibration`), None before its first checkpoint (1%)
    and once nothing is left to project."""

    at: float
    results: int
    total: int
    completions: int
    output_tokens: Estimate
    gpu_hours: Estimate | None
    finish_at: Estimate | None
    servers: int
    started_at: float | None
    classes: dict[str, Estimate]
    gpu_hours_so_far: float | None = None
    replayed: Replayed | None = None


@dataclass(frozen=True)
class Budgets:
    """The run's budgets as its run record holds them (``gate.max_output_tokens``: tokens;
    ``gate.deadline``: Unix seconds); None where it has none (docs/budgets.md)."""

    max_output_tokens: int | None = None
    deadline: float | None = None


def budgets_of(gate: Mapping[str, object]) -> Budgets | None:
    """The budgets in a run record's ``gate`` settings (``deadline`` an ISO 8601 time with its
    zone, as pydantic writes it); None when it sets neither."""
    tokens, deadline = gate.get("max_output_tokens"), gate.get("deadline")
    at = datetime.fromisoformat(deadline).timestamp() if isinstance(deadline, str) else None
    if not isinstance(tokens, int) and at is None:
        return None
    return Budgets(tokens if isinstance(tokens, int) else None, at)


def against(estimate: Estimate, limit: float) -> str:
    """Where a projection falls against its budget ``limit``: ``within`` (all of its 95% interval
    at or below it), ``over`` (all of it above), else ``may cross``."""
    if estimate.high <= limit:
        return "within"
    return "over" if estimate.low > limit else "may cross"


def _draws(done: float, mean: float, var: float, n: int, remaining: float) -> Estimate:
    """``done`` plus ``remaining`` independent draws of mean ``mean`` and variance ``var``
    (estimated from ``n``), with its 95% interval (never below ``done``)."""
    value = done + remaining * mean
    spread = Z_95 * math.sqrt(max(0.0, remaining * var + remaining * remaining * var / max(n, 1)))
    return Estimate(value, max(done, value - spread), value + spread)


def server_seconds(report: MemberReport) -> float:
    """Seconds the member of ``report`` held its server so far: its earlier processes'
    (``earlier_s``) and this one's, ``started_at`` to the report's ``at``; 0 for a report without
    a ``started_at``."""
    if report.started_at <= 0:
        return 0.0
    return report.earlier_s + max(0.0, report.at - report.started_at)


def drain_finish(
    drain: Mapping[str, tuple[int, float]], *, at: float, remaining: int, mean: float, var: float, n: int
) -> Estimate | None:
    """When the last member is done with its own backlog: each member of ``drain`` (lag in offsets,
    completion tokens/s) gets its lag's share of the ``remaining`` results, as draws of ``mean`` and
    ``var`` tokens (from ``n``), at its own rate; the finish is the latest of them (value, low and
    high each). Partitions stay with their members until a rebalance, so a member with one
    partition more, or a slower server, sets the end while the others idle. None when no member
    has lag, or one with lag has no rate (starting, or its server down): then the fleet's rate."""
    lagged = {m: (lag, rate) for m, (lag, rate) in drain.items() if lag > 0}
    backlog = sum(lag for lag, _ in lagged.values())
    if not backlog or any(rate <= 0 for _, rate in lagged.values()):
        return None
    ends = []
    for lag, rate in lagged.values():
        share = remaining * lag / backlog
        e = _draws(0, mean, var, n, share)
        ends.append((at + e.value / rate, at + e.low / rate, at + e.high / rate))
    return Estimate(*(max(end[i] for end in ends) for i in range(3)))


def project(
    members: Iterable[MemberReport],
    *,
    at: float,
    total: int,
    results: int,
    tokens_per_s: float,
    live_servers: int,
    started_at: float | None,
    calibration: Calibration | None = None,
    drain: Mapping[str, tuple[int, float]] | None = None,
) -> Projection | None:
    """The projection of a run of ``total`` results with ``results`` written, from the members'
    latest ``members`` reports (every epoch's: their counts are cumulative per instance, and every
    member that ever reported counts its held time in the GPU-hours); None before a completion is
    reported. ``tokens_per_s``: the live members' completion tokens/s; ``live_servers``: how many
    they are. ``started_at``: the run's start (Unix seconds; None: the earliest report's
    ``started_at``); it counts ``live_servers`` from there for GPU-hours only when no report has a
    ``started_at``. ``calibration``: the replayed past run whose accuracy to attach. ``drain``: per
    live member, its partitions' lag (offsets) and its tokens/s; given, the finish is the last
    member's drain of its own backlog (:func:`drain_finish`), else the fleet's rate over all."""
    reports = list(members)
    n = sum(r.completions for r in reports)
    if n == 0:
        return None
    tokens = sum(r.completion_tokens for r in reports)
    squares = sum(r.completion_tokens_sq for r in reports)
    mean = tokens / n
    var = max(0.0, squares / n - mean * mean) if squares else 0.0
    remaining = max(0, total - results)
    out = _draws(tokens, mean, var, n, remaining)
    counted = sum(r.totals.results for r in reports)
    classes: dict[str, Estimate] = {}
    if counted:
        names = sorted({c for r in reports for c in r.totals.classes})
        for name in names:
            k = sum(r.totals.classes.get(name, 0) for r in reports)
            p = k / counted
            classes[name] = _draws(k, p, p * (1 - p), counted, remaining)
    start = started_at if started_at is not None else min((r.started_at for r in reports), default=None)
    finish: Estimate | None = None
    gpu: Estimate | None = None
    drained = drain_finish(drain, at=at, remaining=remaining, mean=mean, var=var, n=n) if drain else None
    if remaining == 0:
        finish = Estimate(at, at, at)
    elif drained is not None:
        finish = drained
    elif tokens_per_s > 0:
        left = (out.value - tokens, out.low - tokens, out.high - tokens)
        finish = Estimate(*(at + t / tokens_per_s for t in left))
    held = sum(server_seconds(r) for r in reports)
    ends = (finish.value, finish.low, finish.high) if finish is not None else ()
    if held > 0 and ends:
        gpu = Estimate(*((held + live_servers * max(0.0, f - at)) / 3600 for f in ends))
    elif ends and start is not None and live_servers > 0:  # reports without a start: the live ones
        gpu = Estimate(*(live_servers * max(0.0, f - start) / 3600 for f in ends))
    replayed = calibration.at(results / total) if calibration is not None and remaining > 0 else None
    return Projection(
        at, results, total, n, out, gpu, finish, live_servers, start, classes,
        held / 3600 if held > 0 else None, replayed,
    )  # fmt: skip
