"""How a :class:`launch.status.shape.RunStatus` is shown: one plain line (logs, a terminal that is
not a tty, the main job's progress when not on a tty) and a rich view (a few aligned lines, the
servers and the consumers as tables) for ``kafkagen status`` and its ``--watch`` live view.

Pure: nothing here reads Kafka or a server; the rich renderables are printed by the caller
(``rich.console.Console`` / ``rich.live.Live``, rich 13+).
"""

from __future__ import annotations

import math
import time

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from launch.status.projection import Budgets, Projection, against
from launch.status.shape import RunStatus, ServerView
from streams.quality import classes_text

__all__ = [
    "PLAIN_WIDTH",
    "clock",
    "duration",
    "eta_text",
    "progress_line",
    "projection_text",
    "status_line",
    "status_view",
]

PLAIN_WIDTH = 200
"""columns of the view when stdout is not a terminal (rich would assume 80 and wrap the tables)."""


def duration(seconds: float | None) -> str:
    """``seconds`` as ``42 s``, ``7 min 05 s`` or ``3 h 02 min``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


def clock(at: float | None = None) -> str:
    """Unix time ``at`` (default now) as local ``HH:MM:SS``: the first word of every plain progress
    and status line."""
    return time.strftime("%H:%M:%S", time.localtime(at))


def eta_text(status: RunStatus) -> str:
    """``ETA 4-6 min``: the ETA's interval (:attr:`RunStatus.eta_range_s`), in seconds below a
    minute, whole minutes below an hour, else hours to a tenth; ``ETA over 2 min`` when it has no
    upper bound yet (a rate counted from few results); ``ETA -`` without a rate."""
    span = status.eta_range_s
    if span is None:
        return f"ETA {duration(status.eta_s)}"
    low, high = span
    if high is None:
        return f"ETA over {duration(low)}"
    if high < 60:
        a, b, unit = math.floor(low), math.ceil(high), "s"
    elif high < 3600:
        a, b, unit = math.floor(low / 60), math.ceil(high / 60), "min"
    else:
        return f"ETA {low / 3600:.1f}-{high / 3600:.1f} h"
    return f"ETA {b} {unit}" if a == b else f"ETA {a}-{b} {unit}"


def _load(status: RunStatus) -> str:
    servers = status.servers
    if not servers:
        return "no server known yet"
    up = sum(1 for s in servers if s.server_up)
    running = [s.running for s in servers if s.running is not None]
    queued = [s.queued for s in servers if s.queued is not None]
    text = f"servers {up}/{len(servers)} up"
    if running:
        text += f", running {sum(running)}, queued {sum(queued)}"
    return text


def progress_line(status: RunStatus) -> str:
    """The main job's progress in prompts: ``generated 80/100 (5 errors), in S3 70/80, 1.2/s,
    ETA 14-21 s; servers 2/2 up, running 8, queued 0``; before the first result ``generated
    0/100, waiting for the first results; ...`` (no S3 total, rate or ETA is known yet)."""
    p = status.prompts
    if p.results == 0:
        return f"generated 0/{p.published}, waiting for the first results; {_load(status)}"
    errors = f" ({p.errors} errors)" if p.errors else ""
    rate = status.rates.completions_per_s
    return (
        f"generated {min(p.results, p.published)}/{p.published}{errors}, in S3 {p.in_s3}/{p.results}, "
        f"{rate:.1f}/s, {eta_text(status)}; {_load(status)}"
    )


def status_line(status: RunStatus) -> str:
    """One plain line: the time (:func:`clock`), the run, its state and :func:`progress_line`'s
    counts; ``lag`` is offsets, ``remaining`` prompts (docs/status.md, "Lag and remaining")."""
    when = clock(status.at)
    p = status.prompts
    gate = f"; gate HALTED: {status.gate.reason}" if status.gate.state == "halted" else ""
    exported = "" if p.exported is None else f", exported {p.exported}"
    return (
        f"{when} run {status.run_id} {status.state}: published {p.published}, "
        f"results {p.results} ({p.errors} errors), in S3 {p.in_s3}{exported}, remaining {p.remaining}, "
        f"lag {status.lag.total}, {status.rates.completions_per_s:.1f} completions/s, "
        f"{status.rates.tokens_per_s:.0f} tokens/s, {eta_text(status)}; {_load(status)}{gate}"
    )


def _opt(value: object) -> str:
    return "-" if value is None else str(value)


def _servers_table(servers: list[ServerView]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("instance", "server", "state", "up"):
        table.add_column(name, no_wrap=True)
    numbers = ("tok/s", "done/s", "done", "err", "flight/win", "running", "queued", "slots", "busy", "report")
    for name in numbers:
        table.add_column(name, justify="right", no_wrap=True)
    for s in servers:
        busy = "-" if s.occupancy is None else f"{s.occupancy:.0%}"
        age = "-" if s.report_age_s is None else f"{s.report_age_s:.0f} s ago"
        table.add_row(
            s.instance,
            s.server,
            s.state,
            "yes" if s.server_up else "NO",
            f"{s.tokens_per_s:.0f}",
            f"{s.completions_per_s:.2f}",
            str(s.completions),
            str(s.errors),
            f"{s.in_flight}/{s.window}",
            _opt(s.running),
            _opt(s.queued),
            _opt(s.slots),
            busy,
            age,
        )
    return table


def _consumers_table(status: RunStatus) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("member", "host", "partitions", "lag"):
        table.add_column(name, justify="right" if name == "lag" else "left", no_wrap=True)
    for c in status.lag.consumers:
        table.add_row(c.member, c.client_host, ",".join(map(str, c.partitions)) or "-", str(c.lag))
    return table


def projection_text(p: Projection) -> str:
    """The projection in one line: output tokens, GPU-hours, finish (local time), each with its 95%
    interval in brackets."""

    def when(at: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))

    o = p.output_tokens
    parts = [f"output tokens {o.value:,.0f} [{o.low:,.0f}-{o.high:,.0f}]"]
    if p.gpu_hours is not None:
        g = p.gpu_hours
        held = f", {p.gpu_hours_so_far:.2f} so far" if p.gpu_hours_so_far is not None else ""
        servers = f"{p.servers} server{'s' if p.servers != 1 else ''} now{held}"
        parts.append(f"GPU-hours {g.value:.2f} [{g.low:.2f}-{g.high:.2f}] ({servers})")
    if p.finish_at is not None:
        f = p.finish_at
        parts.append(f"finish {when(f.value)} [{when(f.low)} - {when(f.high)}]")
    return f"{', '.join(parts)} (95%, from {p.completions} completions)"


def budgets_text(b: Budgets, p: Projection | None) -> str:
    """The run's budgets, each with where the projection puts the run against it
    (:func:`launch.status.projection.against`)."""
    parts = []
    if b.max_output_tokens is not None:
        verdict = f" (projected: {against(p.output_tokens, b.max_output_tokens)})" if p is not None else ""
        parts.append(f"output tokens {b.max_output_tokens:,}{verdict}")
    if b.deadline is not None:
        finish = p.finish_at if p is not None else None
        verdict = f" (projected finish: {against(finish, b.deadline)})" if finish is not None else ""
        parts.append(f"deadline {time.strftime('%Y-%m-%d %H:%M', time.localtime(b.deadline))}{verdict}")
    return "; ".join(parts)


def status_view(status: RunStatus) -> RenderableType:
    """The terminal view: aligned summary lines, then the servers and the consumers."""
    p = status.prompts
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status.at))
    exact = "" if p.published_exact else " (from offsets: no producer resume point found)"
    if p.regenerated:
        exact += f" ({p.regenerated} of them regenerated: kafkagen regenerate)"
    lines = [
        Text.assemble(("run ", ""), (status.run_id, "bold"), f"  {status.state}  ", (when, "dim")),
        Text(f"prompts    published {p.published}{exact}, remaining {p.remaining}"),
        Text(
            f"results    {p.results} (completions {p.completions}, errors {p.errors}), in S3 {p.in_s3}, "
            f"exported {_opt(p.exported)}"
        ),
        Text(
            f"rate       {status.rates.completions_per_s:.2f} completions/s, "
            f"{status.rates.tokens_per_s:.0f} tokens/s, {eta_text(status)}"
        ),
        Text(
            f"lag        prompts {status.lag.total} (offsets, {len(status.lag.partitions)} partitions), "
            f"sink {status.lag.sink.lag} ({status.lag.sink.members} member(s))"
        ),
    ]
    q = status.quality
    lines.append(Text(f"quality    {classes_text(q.classes, q.results)}"))
    if status.projection is not None:
        lines.append(Text(f"projected  {projection_text(status.projection)}"))
        if status.projection.replayed is not None:
            lines.append(Text(f"           {status.projection.replayed.text()}", style="dim"))
    if status.budgets is not None:
        lines.append(Text(f"budgets    {budgets_text(status.budgets, status.projection)}"))
    g = status.gate
    if g.state == "halted":
        lines.append(Text(f"gate       HALTED (epoch {g.epoch}): {g.reason}", style="bold red"))
        if g.fix:
            lines.append(Text(f"           fix: {g.fix}"))
    else:
        lines.append(Text(f"gate       running (epoch {g.epoch})"))
    parts: list[RenderableType] = [*lines]
    if status.servers:
        parts += [Text(""), Text("servers", style="bold"), _servers_table(status.servers)]
    if status.lag.consumers:
        parts += [Text(""), Text("generation consumers", style="bold"), _consumers_table(status)]
    return Group(*parts)
