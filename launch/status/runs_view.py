"""How a :class:`launch.status.runs_shape.RunsListing` is shown: one table row per run, then a line per
halted run (why, and the fix) and the notes the rows need.

Pure: nothing here reads Kafka or S3; the rich renderable is printed by the caller
(``rich.console.Console``: colours on a terminal, plain text otherwise).
"""

from __future__ import annotations

import time

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from launch.status.runs_shape import RunRow, RunsListing
from launch.status.view import duration

__all__ = ["COLUMNS", "runs_view"]

COLUMNS = (
    "run",
    "state",
    "created",
    "parent",
    "model",
    "max_tokens",
    "published",
    "results",
    "errors",
    "lag",
    "in_s3",
    "exported",
    "regen",
    "last_activity",
)
"""The table's header, left to right (counts are prompts and records, lag in offsets)."""

_STATE_STYLE = {"running": "green", "halted": "bold red", "done": "cyan", "idle": "dim"}
_NUMBERS = {"max_tokens", "published", "results", "errors", "lag", "in_s3", "exported", "regen"}


def _opt(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def _row(run: RunRow, now: float) -> list[Text]:
    c, lag = run.counts, run.lag
    published = "-" if c is None else (str(c.published) if c.published_exact else f"~{c.published}")
    age = "-" if run.last_activity_at is None else f"{duration(max(0.0, now - run.last_activity_at))} ago"
    cells = [
        run.run_id,
        run.state,
        _when(run.created_at),
        _opt(run.parent),
        _opt(run.params.get("model")),
        _opt(run.params.get("max_tokens")),
        published,
        _opt(None if c is None else c.results),
        _opt(None if c is None else c.errors),
        _opt(None if lag is None else lag.prompts),
        _opt(None if c is None else c.in_s3),
        _opt(None if c is None else c.exported),
        str(run.regenerations),
        age,
    ]
    texts = [Text(cell) for cell in cells]
    texts[1].stylize(_STATE_STYLE.get(run.state, ""))
    return texts


def runs_view(listing: RunsListing) -> RenderableType:
    """The table of ``listing`` (ages from ``listing.at``), the halted runs' reasons and fixes, and
    a note when a published count is read from end offsets (``~``: no producer resume point, the
    transaction markers count too). No runs: one line saying where nobody found any."""
    where = f"Kafka at {listing.kafka}"
    if listing.s3_listed:
        where += f" and s3://{listing.s3_bucket}/{listing.s3_prefix.strip('/')}/"
    if not listing.runs:
        return Text(f"no runs found ({where})")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in COLUMNS:
        table.add_column(name, justify="right" if name in _NUMBERS else "left", no_wrap=True)
    for run in listing.runs:
        table.add_row(*_row(run, listing.at))
    parts: list[RenderableType] = [table]
    for run in listing.runs:
        if run.state == "halted":
            fix = f"; fix: {run.gate.fix}" if run.gate.fix else ""
            line = f"{run.run_id} halted (gate epoch {run.gate.epoch}): {run.gate.reason or '-'}{fix}"
            parts.append(Text(line, style="red"))
    if any(r.counts is not None and not r.counts.published_exact for r in listing.runs):
        parts.append(Text("~: published read from end offsets (no producer resume point)", style="dim"))
    return Group(*parts)
