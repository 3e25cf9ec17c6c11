"""``kafkagen regenerate RUN --where ... [overrides]``: re-publish a selection of a run's prompts
as new attempts of the same run (docs/runs.md, "Regenerating part of a run").

Selection: :mod:`launch.regenerate.select`; publishing once: :mod:`launch.regenerate.plan`. Exit
status (:mod:`streams.cli`): 0 published (or nothing to publish, or published before), 2 bad
usage, settings or ``--where``, or the run is a replay or has no prompts topic, 3 Kafka cannot be
reached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

import click
import msgspec
from aiokafka.errors import KafkaError

from launch.regenerate.plan import Plan, regenerate
from launch.regenerate.select import Where, parse_where
from streams.cli import command_settings, flag_given, run_command, settings_options
from streams.config import GenerationSettings, Settings
from streams.errors import ConfigError
from streams.kafka import kafka_unavailable
from streams.records import GenerationParams
from streams.runs import naming

__all__ = ["OVERRIDABLE", "main", "overrides_of", "regenerate_command"]

OVERRIDABLE: Final = tuple(
    f.name for f in msgspec.structs.fields(GenerationParams) if f.name in GenerationSettings.model_fields
)
"""The generation settings a flag of ``regenerate`` overrides in the new attempts (every
:class:`streams.records.GenerationParams` field a setting has: ``--repetition-penalty``,
``--top-k``, ``--generation.temperature``, ...)."""

_OWN_FLAGS: Final = {
    "max_tokens": "--max-tokens",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "chat_template_kwargs": "--thinking/--no-thinking",
}
"""The overrides ``regenerate`` has flags of its own for, and those flags."""


@click.command(
    "regenerate",
    help="Re-publish the prompts of run RUN whose latest result matches --where, as attempt + 1 with "
    "the overrides; the run's consumers generate them and the export keeps the latest attempt. "
    "Conditions: quality=CLASS[,CLASS] (a quality flag, degenerate or error), finish_reason=REASON, "
    "error_type=TYPE, ids=FILE (one id per line); several --where select the union. Overrides: --max-tokens, "
    "--temperature, --top-p, --thinking, and any generation setting given as a flag (--repetition-penalty, "
    "--top-k, --min-p, --seed, --stop, --frequency-penalty, --presence-penalty, --generation.*: see "
    "--settings-help). Running the same command again publishes nothing.",
)
@click.argument("run")
@click.option("--where", "conditions", multiple=True, metavar="KEY=VALUE[,VALUE]", help="what to select")
@click.option(
    "--next-turn",
    is_flag=True,
    help="instead of --where: the multi-turn prompts (MT-Bench turns) whose answer to turn k is usable "
    "and that have a turn k + 1, re-published as turn k + 1 (turn k's messages, the answer, the next "
    "user turn); again once those are generated, for the turn after",
)
@click.option(
    "--max-tokens", type=click.IntRange(min=1), help="override: tokens per completion (reasoning + answer)"
)
@click.option("--temperature", type=click.FloatRange(min=0.0), help="override: sampling temperature")
@click.option(
    "--top-p", type=click.FloatRange(min=0.0, max=1.0, min_open=True), help="override: nucleus sampling"
)
@click.option(
    "--thinking/--no-thinking",
    default=None,
    help="override: ask for reasoning or not (chat_template_kwargs.enable_thinking)",
)
@click.option("--dry-run", is_flag=True, help="say what would be re-published, publish nothing")
@settings_options(log_default="warning")
@click.pass_context
def regenerate_command(
    ctx: click.Context,
    run: str,
    conditions: tuple[str, ...],
    next_turn: bool,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    thinking: bool | None,
    dry_run: bool,
) -> None:
    if next_turn and conditions:
        raise click.UsageError(
            "--next-turn selects by itself: drop --where, or run the two one after the other"
        )
    where = Where(next_turn=True) if next_turn else parse_where(conditions)
    try:
        settings = naming.for_run(command_settings(ctx), run, replay_of=None)
    except ValueError as exc:
        raise ConfigError(f"RUN: {exc}") from None
    own: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "chat_template_kwargs": None if thinking is None else {"enable_thinking": thinking},
    }
    overrides = overrides_of(ctx, settings, {k: v for k, v in own.items() if v is not None})
    try:
        plan, record = asyncio.run(regenerate(settings, where, overrides, dry_run=dry_run))
    except (KafkaError, TimeoutError) as exc:
        raise kafka_unavailable(settings.kafka, exc) from None
    for line in describe_plan(settings, plan):
        print(line)
    if record is None:
        if dry_run and plan.done_before is None and plan.selection.prompts:
            print("--dry-run: nothing published")
        return
    attempts = ", ".join(f"{n} as attempt {a}" for a, n in record.attempts.items())
    print(
        f"published {record.ids} prompts to {settings.topics.prompts} ({attempts}), "
        f"regeneration {record.digest}"
    )
    if plan.gate is not None and plan.gate.halted:
        halt = plan.gate.gate
        assert halt is not None
        print(
            f"run {run} is halted by its quality gate (epoch {halt.epoch}, by {halt.by}): it stays "
            "halted, and these wait until its main job is run again with the fix (docs/gate.md)"
        )
    print(
        f"next: the run's consumers generate them (a running main job picks them up); once the main job "
        f"of run {run} has ended, run it again with --run-id {run}: it publishes nothing new, generates "
        "these and exports"
    )


def overrides_of(ctx: click.Context, settings: Settings, own: dict[str, Any]) -> GenerationParams:
    """The new attempts' overrides: ``own`` (the values of ``regenerate``'s own flags, set ones
    only) and every :data:`OVERRIDABLE` generation setting given as a flag on the command line,
    read from ``settings.generation`` (a value from the environment is the consumers' default, not
    an override).

    Raises:
        click.UsageError: one override given by both flags (``--temperature`` and
            ``--generation.temperature``).
    """
    merged = dict(own)
    for name in OVERRIDABLE:
        if not flag_given(ctx, "generation", name):
            continue
        if name in own:
            raise click.UsageError(
                f"{_OWN_FLAGS[name]} and --generation.{name.replace('_', '-')} both set {name}: give one"
            )
        merged[name] = getattr(settings.generation, name)
    return GenerationParams(**merged)


def describe_plan(settings: Settings, plan: Plan) -> list[str]:
    """The lines ``regenerate`` prints about ``plan`` before publishing."""
    s = plan.selection
    lines = [
        f"run {settings.run_id}: {plan.results} results read, {s.matched} "
        + (
            "have a next turn"
            if plan.where.next_turn
            else "match " + " or ".join(f"{k}={v}" for k, v in plan.where.describe().items())
        )
    ]
    if plan.foreign:
        lines.append(f"  {plan.foreign} results of other runs ignored")
    if s.pending:
        lines.append(f"  {s.pending} prompts left alone: their latest attempt has no result yet")
    if s.unknown_ids:
        lines.append(
            f"  {s.unknown_ids} ids of {plan.where.ids_file} have no result in run {settings.run_id} "
            "(mistyped, another run's, or not generated yet): not re-published"
        )
    if s.no_prompt:
        lines.append(
            f"  {s.no_prompt} matching ids have no prompt on {settings.topics.prompts}: not re-published"
        )
    overrides = plan.overrides.as_request_fields()
    earlier = plan.done_before or (plan.earlier[-1] if plan.earlier else None)
    if earlier is not None:
        others = sum(r is not earlier for r in plan.earlier)
        before = (
            f"this command was published before ({earlier.ids} prompts, regeneration {earlier.digest}, "
            f"by {earlier.by}" + (f", and {others} times more" if others else "") + ")"
        )
        if plan.done_before is not None or not s.prompts:
            lines.append(f"{before}: nothing new matches it now, nothing published")
            return lines
        lines.append(
            f"{before}; {len(s.prompts)} prompts match it since (new results, or new attempts matching again)"
        )
    lines.append(
        f"to re-publish: {len(s.prompts)} prompts, overrides {overrides or 'none (the same parameters)'}"
    )
    return lines


def main(argv: Sequence[str] | None = None, *, prog: str = "kafkagen regenerate") -> int:
    """Run ``regenerate`` on ``argv`` (``None``: the process arguments); returns the exit status."""
    return run_command(regenerate_command, argv, prog=prog)
