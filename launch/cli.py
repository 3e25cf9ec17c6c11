"""The ``kafkagen`` command line: one click group, a subcommand per job.

======================  ====================================================  =====================
command                 what                                                  also
======================  ====================================================  =====================
``kafkagen run``        the main job end to end (:mod:`launch.run`)           ``python -m launch.run``
``kafkagen produce``    publish prompt files to the prompts topic             ``python -m producers.prompts``
``kafkagen generate``   one generation consumer per inference server          ``python -m consumers.generate``
``kafkagen sink``       completions and dead letters to S3, exactly once      ``python -m sinks.s3``
``kafkagen export``     the dataset and its manifest from S3                  ``python -m sinks.export``
``kafkagen stack``      the local Kafka, S3 and llama.cpp servers             ``python -m launch.stack``
``kafkagen serve``      a fleet of SGLang servers, one per GPU (docs/serve)   :mod:`launch.serve.cli`
======================  ====================================================  =====================

Subcommands are imported when they run, so ``kafkagen produce`` does not load faust and
``kafkagen --help`` starts at once. Settings flags, the exit statuses and the logging set-up are
the same for every command (:mod:`streams.cli`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from streams import naming
from streams.cli import command_settings, flag_given, run_command, settings_options
from streams.errors import ConfigError

__all__ = ["kafkagen", "main", "run_main"]

_COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("launch.cli", "run_command_"),
    "produce": ("producers.cli", "produce"),
    "generate": ("consumers.cli", "generate"),
    "sink": ("sinks.cli", "sink"),
    "export": ("sinks.export.cli", "export_command"),
    "stack": ("launch.stack.cli", "stack"),
    "serve": ("launch.serve.cli", "serve"),
}
_SUMMARIES = {
    "run": "The main job end to end: stack, consumers, sink, producer, progress, export.",
    "produce": "Publish prompt files to the prompts topic, exactly once.",
    "generate": "Generation consumer: one per inference server.",
    "sink": "Write completions and dead letters to S3, exactly once.",
    "export": "Build the dataset and its manifest from a run's S3 objects.",
    "stack": "Run the local Kafka, S3 and LLM servers.",
    "serve": "A fleet of SGLang servers, one per GPU, detached under supervisord.",
}


class _LazyGroup(click.Group):
    """A group whose subcommands are imported by name when used (module docstring)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return None
        module, attr = _COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl(list(_SUMMARIES.items()))


@click.group(cls=_LazyGroup, help="Resumable, high-throughput LLM batch generation over Kafka.")
@click.version_option(package_name="kafkagen")
def kafkagen() -> None:
    pass


@click.command(
    "run",
    help="The main job end to end: start the local stack, one generation consumer per server and "
    "the S3 sink under supervisord, publish the prompts, show progress, export the dataset. The same "
    "--run-id resumes; settings flags (see --settings-help) apply to every process of the run.",
)
@click.option(
    "--prompts",
    "prompts",
    multiple=True,
    type=click.Path(path_type=Path),
    help="prompt file(s), any format `kafkagen produce` reads (default: the bundled demo prompts)",
)
@click.option(
    "--server",
    "servers",
    multiple=True,
    help="inference server URL, once per server (default: the local llama.cpp servers)",
)
@click.option("--max-tokens", type=click.IntRange(min=1), help="tokens per completion (local default 128)")
@click.option(
    "--thinking/--no-thinking",
    default=None,
    help="ask for reasoning (chat_template_kwargs.enable_thinking); default on for real servers",
)
@click.option(
    "--to",
    help="dataset destination: a folder or s3://bucket/prefix (default <stack home>/datasets/<run id>)",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    help="give up after this many seconds",
)
@click.option("--keep-running", is_flag=True, help="leave the consumers and the sink running")
@click.option("--no-progress", is_flag=True, help="no progress bars")
@settings_options("run_id", "replay_of", log_default="warning")
@click.pass_context
def run_command_(
    ctx: click.Context,
    prompts: tuple[Path, ...],
    servers: tuple[str, ...],
    max_tokens: int | None,
    thinking: bool | None,
    to: str | None,
    timeout_s: float | None,
    keep_running: bool,
    no_progress: bool,
) -> int:
    from launch.run import RunOptions, run, run_settings

    settings = command_settings(ctx)
    run_id = settings.run_id if flag_given(ctx, "run_id") or settings.run_id != "default" else "demo"
    try:
        settings = naming.for_run(settings, run_id)
    except ValueError as exc:
        raise ConfigError(f"--run-id: {exc}") from None
    options = RunOptions(
        prompts=prompts,
        servers=servers,
        max_tokens=max_tokens,
        thinking=thinking,
        to=to,
        timeout_s=timeout_s,
        keep_running=keep_running,
        progress=not no_progress,
    )
    return run(run_settings(settings, options), options)


def run_main(argv: Sequence[str] | None = None, *, prog: str = "python -m launch.run") -> int:
    """``kafkagen run`` on ``argv``; returns the exit status."""
    return run_command(run_command_, argv, prog=prog)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``kafkagen`` console script; returns the exit status (:mod:`streams.cli`)."""
    return run_command(kafkagen, argv, prog="kafkagen")


if __name__ == "__main__":
    sys.exit(main())
