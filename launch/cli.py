"""The ``kafkagen`` command line: one click group, a subcommand per job.

Each subcommand lives with its concern (``_COMMANDS``); ``kafkagen run``, ``produce``,
``generate``, ``sink``, ``export`` and ``stack`` are also ``python -m launch.run``,
``producers.prompts``, ``consumers.generate``, ``sinks.s3``, ``sinks.export`` and ``launch.stack``.
Subcommands are imported when they run, so ``kafkagen produce`` does not load faust and ``kafkagen
--help`` starts at once. Settings flags, exit statuses and logging are every command's
(:mod:`streams.cli`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import click

from streams.cli import run_command

__all__ = ["kafkagen", "main"]

_COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("launch.run.cli", "run_command_"),
    "produce": ("producers.cli", "produce"),
    "generate": ("consumers.cli", "generate"),
    "sink": ("sinks.cli", "sink"),
    "export": ("sinks.export.cli", "export_command"),
    "stack": ("launch.stack.cli", "stack"),
    "serve": ("launch.serve.cli", "serve"),
    "preflight": ("launch.preflight.cli", "preflight_command"),
    "status": ("launch.status.cli", "status_command"),
    "gate": ("launch.gate.cli", "gate"),
    "replay": ("launch.regenerate.replay_cli", "replay_command"),
    "regenerate": ("launch.regenerate.cli", "regenerate_command"),
    "runs": ("launch.status.runs_cli", "runs_command"),
    "scale": ("launch.scale.cli", "scale_command"),
}
_SUMMARIES = {
    "run": "The main job end to end: stack, consumers, sink, producer, progress, export.",
    "produce": "Publish prompt files to the prompts topic, exactly once.",
    "generate": "Generation consumer: one per inference server.",
    "sink": "Write completions and dead letters to S3, exactly once.",
    "export": "Build the dataset and its manifest from a run's S3 objects.",
    "stack": "Run the local Kafka, S3 and LLM servers.",
    "serve": "A fleet of SGLang servers, one per GPU, detached under supervisord.",
    "preflight": "Send a sample of the input to every server and judge it before a run.",
    "status": "A run's status: counts, lag, servers, quality, ETA (--json, --watch).",
    "gate": "The run's fleet-wide quality gate: status, halt, resume.",
    "replay": "Generate every prompt of a run again under a new run id, with new parameters.",
    "regenerate": "Re-publish a run's prompts selected by quality, finish_reason, error or id.",
    "runs": "The runs Kafka and S3 know: state, parent, parameters, counts (--json).",
    "scale": "Add or remove a running run's servers; raise its partition count.",
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


def main(argv: Sequence[str] | None = None) -> int:
    """The ``kafkagen`` console script; returns the exit status (:mod:`streams.cli`)."""
    return run_command(kafkagen, argv, prog="kafkagen")


if __name__ == "__main__":
    sys.exit(main())
