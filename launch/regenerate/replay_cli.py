"""``kafkagen replay RUN --as NEW [overrides] [run options]``: generate every prompt of run ``RUN``
again under the new run id ``NEW``, with new generation parameters, publishing nothing.

It is the main job (:mod:`launch.run.job`) as ``--run-id NEW --replay-of RUN``; ``NEW`` starts
from ``RUN``'s generation settings (:func:`inherited_flags`, from its run record), which the
overrides (``--max-tokens``, ``--thinking/--no-thinking``, ``--temperature``, ``--top-p``,
``--model``) beat. Exit status: the main job's (2 also when ``RUN`` has no prompts topic, or
``NEW`` is ``RUN``). docs/runs.md, "Re-generating a run".
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Final

import click
from aiokafka.errors import KafkaError

from launch.run.cli import run_command_, run_main
from streams.cli import run_command
from streams.config import Settings
from streams.control import RunRecord
from streams.errors import ConfigError
from streams.runs import naming
from streams.runs.record import generation_in_environment, read_run_record

__all__ = ["inherited_flags", "main", "replay_argv", "replay_command"]


_INHERITED: Final = {
    # RunRecord.generation field: the flags that set it (any of them given: not inherited)
    "max_tokens": ("--max-tokens", "--generation.max-tokens"),
    "thinking": ("--thinking", "--no-thinking", "--generation.chat-template-kwargs"),
    "temperature": ("--temperature", "--generation.temperature"),
    "top_p": ("--top-p", "--generation.top-p"),
}


def inherited_flags(
    parent: RunRecord | None, given_args: Sequence[str], environ: Mapping[str, str]
) -> list[str]:
    """The ``kafkagen run`` flags that give the replay its parent's generation settings
    (``max_tokens``, thinking, ``temperature``, ``top_p`` from the parent's :class:`RunRecord`),
    each unless ``given_args`` (the replay's own arguments: its overrides and the options passed
    through) or a ``KAFKAGEN_GENERATION__*`` variable of ``environ`` sets it. Nothing without a run
    record (a run of hand-started pieces)."""
    if parent is None:
        return []
    given = {arg.split("=", 1)[0].replace("_", "-") for arg in given_args if arg.startswith("--")}
    in_env = generation_in_environment(environ)
    gen = parent.generation
    kwargs = gen.get("chat_template_kwargs")
    values: dict[str, object] = {
        "max_tokens": gen.get("max_tokens"),
        "thinking": kwargs.get("enable_thinking") if isinstance(kwargs, dict) else None,
        "temperature": gen.get("temperature"),
        "top_p": gen.get("top_p"),
    }
    flags: list[str] = []
    for name, value in values.items():
        env_name = "chat_template_kwargs" if name == "thinking" else name
        if value is None or given.intersection(_INHERITED[name]) or env_name in in_env:
            continue
        if name == "thinking":
            flags.append("--thinking" if value else "--no-thinking")
        elif name == "max_tokens":
            flags += ["--max-tokens", str(value)]
        else:
            flags += [f"--generation.{name.replace('_', '-')}", str(value)]
    return flags


def replay_argv(
    run: str,
    new: str,
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    model: str | None = None,
    reuse_identical: bool = False,
    rest: Sequence[str] = (),
    inherited: Sequence[str] = (),
) -> list[str]:
    """The ``kafkagen run`` arguments of a replay of ``run`` as ``new`` (``rest``: other ``run``
    options, passed as they are, ``--max-tokens`` and ``--thinking`` among them; ``inherited``:
    :func:`inherited_flags`, which leaves out what the overrides and ``rest`` set);
    ``reuse_identical``: NEW copies ``run``'s completions of requests that did not change
    (``consumer.reuse_from``)."""
    argv = ["--run-id", new, "--replay-of", run]
    if temperature is not None:
        argv += ["--generation.temperature", repr(temperature)]
    if top_p is not None:
        argv += ["--generation.top-p", repr(top_p)]
    if model is not None:
        argv += ["--generation.model", model]
    if reuse_identical:
        argv += ["--consumer.reuse-from", run]
    return [*argv, *inherited, *rest]


_SET_BY_REPLAY: Final = frozenset({"--run-id", "--replay-of", "--help"})
"""``kafkagen run`` options that replay sets itself (from RUN and --as), not listed as passed through."""


class _ReplayCommand(click.Command):
    """``kafkagen replay``: its --help lists, after its own options, every ``kafkagen run`` option
    it passes through (those it sets itself, or has itself, left out)."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_options(ctx, formatter)
        own = {name for param in self.get_params(ctx) for name in param.opts} | _SET_BY_REPLAY
        run_ctx = click.Context(
            run_command_, info_name="run", parent=ctx.parent, help_option_names=ctx.help_option_names
        )
        rows = [
            record
            for param in run_command_.get_params(run_ctx)
            if not own.intersection(param.opts) and (record := param.get_help_record(run_ctx)) is not None
        ]
        with formatter.section("Options of kafkagen run (passed through to it)"):
            formatter.write_dl(rows)


@click.command(
    "replay",
    cls=_ReplayCommand,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    help="Generate every prompt of run RUN again under the new run id NEW (--as), with new generation "
    "parameters, publishing nothing: RUN's prompts topic is read in NEW's own consumer group and NEW "
    "gets its own topics, S3 folder and dataset. Every other option is `kafkagen run`'s, listed "
    "below. The same command again resumes NEW.",
)
@click.argument("run")
@click.option("--as", "new", required=True, metavar="NEW", help="the new run id")
@click.option("--temperature", type=click.FloatRange(min=0.0), help="NEW's sampling temperature")
@click.option(
    "--top-p", type=click.FloatRange(min=0.0, max=1.0, min_open=True), help="NEW's nucleus sampling"
)
@click.option("--model", help="the model name NEW sends (generation.model)")
@click.option(
    "--reuse-identical",
    is_flag=True,
    help="copy RUN's completion of every prompt whose request (messages, tools, parameters, model) "
    "did not change instead of generating it again (consumer.reuse_from; docs/runs.md)",
)
@click.pass_context
def replay_command(
    ctx: click.Context,
    run: str,
    new: str,
    temperature: float | None,
    top_p: float | None,
    model: str | None,
    reuse_identical: bool,
) -> int:
    try:
        naming.check_run_id(run, what="RUN")
        naming.check_run_id(new, what="--as")
        naming.check_not_self_replay(new, run)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:  # the parent's generation settings are the replay's defaults (Kafka from the environment)
        parent = asyncio.run(read_run_record(naming.for_run(Settings(), run, replay_of=None), timeout_s=15))
    except (KafkaError, TimeoutError, ValueError) as exc:
        print(f"note: run {run}'s generation settings could not be read ({exc!r}): the replay uses its own")
        parent = None
    overrides = [f for f, v in (("--temperature", temperature), ("--top-p", top_p)) if v is not None]
    inherited = inherited_flags(parent, [*overrides, *ctx.args], os.environ)
    if inherited:
        print(f"replay of run {run}: its generation settings unless overridden: {' '.join(inherited)}")
    return run_main(
        replay_argv(
            run,
            new,
            temperature=temperature,
            top_p=top_p,
            model=model,
            reuse_identical=reuse_identical,
            rest=ctx.args,
            inherited=inherited,
        ),
        prog="kafkagen replay",
    )


def main(argv: Sequence[str] | None = None, *, prog: str = "kafkagen replay") -> int:
    """Run ``replay`` on ``argv`` (``None``: the process arguments); returns the exit status."""
    return run_command(replay_command, argv, prog=prog)
