"""``kafkagen gate status|halt|resume --run-id R``: the run's fleet-wide quality gate by hand
(docs/gate.md, "kafkagen gate").

``status`` prints the gate's state, epoch, the fleet's counts per class against their thresholds
and one line per consumer's latest report (:mod:`streams.control`); ``halt --reason`` halts the run
now; ``resume`` starts the next gate epoch. Exit status (:mod:`streams.cli`): 0 done (``status``:
not halted), 1 ``status`` found the run halted, 2 bad usage or settings, 3 Kafka unreachable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import click
from aiokafka.errors import KafkaError

from launch.gate.control import change_gate
from streams.cli import SummaryGroup, command_settings, run_command, settings_options
from streams.config import Settings
from streams.control import ControlState, MemberReport, read_control
from streams.errors import ExitCode
from streams.kafka import kafka_unavailable
from streams.quality import QUALITY_CLASSES

__all__ = ["describe_state", "gate", "main"]

_TIMEOUT_S = 30.0


def describe_state(settings: Settings, state: ControlState, *, now: float | None = None) -> list[str]:
    """The lines ``kafkagen gate status`` prints for ``state`` (run ``settings.run_id``; report
    ages in seconds from ``now``, Unix seconds). A consumer whose last report is older than 10
    report intervals and that did not say it stopped shows as ``silent`` (killed, or cut off)."""
    now = time.time() if now is None else now
    run = settings.run_id
    gate = state.gate
    lines: list[str] = []
    if state.halted and gate is not None:
        lines.append(f"run {run}: HALTED by {gate.by} at epoch {gate.epoch} ({now - gate.at:.0f} s ago)")
        lines.append(f"  reason: {gate.reason or '-'}")
        lines.append(f"  fix:    {gate.fix or '-'}")
        lines.append(
            f"  resume: re-run the main job with the fix (kafkagen run ... --run-id {run}), or restart the "
            f"consumers with the fix, then kafkagen gate resume --run-id {run}"
        )
    elif gate is None and not state.members:
        lines.append(f"run {run}: nothing on {settings.topics.control} yet (no consumer has started)")
    else:
        since = f", resumed by {gate.by}" if gate is not None else ""
        lines.append(f"run {run}: running, gate epoch {state.epoch}{since}")
    fleet = state.fleet_gate_counts()
    thresholds = settings.gate.thresholds()
    lines.append(f"fleet counts, epoch {state.epoch}: {fleet.results} results")
    for name in QUALITY_CLASSES:
        count = fleet.classes.get(name, 0)
        if not count:
            continue
        share = count / fleet.results if fleet.results else 0.0
        limit = thresholds.get(name, 1.0)
        over = "  OVER" if limit < 1.0 and share > limit else ""
        lines.append(f"  {name:<22} {count:>8} {share:>7.1%}  (max {limit:.0%}){over}")
    if not state.members:
        lines.append("no consumer has reported yet")
    else:
        lines.append("consumers (latest report of each; silent: no report for 10 intervals, not stopped):")
    silent_s = 10 * settings.gate.report_interval_s
    for report in sorted(state.members.values(), key=lambda r: r.instance):
        lines.append(_member_line(report, now, silent_s))
    return lines


def _member_line(r: MemberReport, now: float, silent_s: float) -> str:
    slots = f"{r.running if r.running is not None else '?'}/{r.slots if r.slots is not None else '?'}"
    shown = "silent" if r.state != "stopped" and now - r.at > silent_s else r.state
    return (
        f"  {r.instance:<24} {shown:<11} epoch {r.epoch} results {r.gate.results}/{r.totals.results} "
        f"completions {r.completions} errors {r.errors} {r.tokens_per_s:.0f} tok/s "
        f"in flight {r.in_flight}/{r.window} waiting {r.waiting} server {r.server} running {slots} "
        f"max_tokens {r.max_tokens} thinking {'on' if r.thinking else 'off'} "
        f"({now - r.at:.0f} s ago, pid {r.pid} on {r.host})"
    )


@click.group(
    "gate", cls=SummaryGroup, help="The run's fleet-wide quality gate: status, halt, resume (docs/gate.md)."
)
def gate() -> None:
    pass


@gate.command(
    help="Print the gate's state, the fleet's counts and each consumer's latest report. "
    "Exit 1 when the run is halted."
)
@settings_options("run_id", log_default="warning")
@click.pass_context
def status(ctx: click.Context) -> int:
    settings = command_settings(ctx)
    try:
        state = asyncio.run(read_control(settings, timeout_s=_TIMEOUT_S))
    except (KafkaError, TimeoutError) as exc:
        raise kafka_unavailable(settings.kafka, exc) from None
    for line in describe_state(settings, state):
        print(line)
    return ExitCode.FAILED if state.halted else ExitCode.OK


@gate.command(help="Halt the run now: no consumer starts a new prompt; requests in flight finish.")
@click.option("--reason", required=True, help="why, one line (shown by status and in the consumer logs)")
@settings_options("run_id", log_default="warning")
@click.pass_context
def halt(ctx: click.Context, reason: str) -> None:
    settings = command_settings(ctx)
    try:
        print(asyncio.run(change_gate(settings, "halt", reason))[1])
    except (KafkaError, TimeoutError) as exc:
        raise kafka_unavailable(settings.kafka, exc) from None


@gate.command(
    help="Resume a halted run: the next gate epoch starts with counts from zero. Restart "
    "the consumers with the fixed settings first."
)
@click.option("--reason", default="", help="what was fixed (kept in the gate record)")
@settings_options("run_id", log_default="warning")
@click.pass_context
def resume(ctx: click.Context, reason: str) -> None:
    settings = command_settings(ctx)
    try:
        print(asyncio.run(change_gate(settings, "resume", reason))[1])
    except (KafkaError, TimeoutError) as exc:
        raise kafka_unavailable(settings.kafka, exc) from None


def main(argv: Sequence[str] | None = None, *, prog: str = "kafkagen gate") -> int:
    """Run ``gate`` on ``argv`` (``None``: the process arguments); returns the exit status."""
    return run_command(gate, argv, prog=prog)
