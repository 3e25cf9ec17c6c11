"""The ``kafkagen`` command line: one click group, a subcommand per job.

======================  ====================================================  =====================
command                 what                                                  also
======================  ====================================================  =====================
``kafkagen run``        the main job end to end (:mod:`launch.run_cli`)       ``python -m launch.run``
``kafkagen produce``    publish prompt files to the prompts topic             ``python -m producers.prompts``
``kafkagen generate``   one generation consumer per inference server          ``python -m consumers.generate``
``kafkagen sink``       completions and dead letters to S3, exactly once      ``python -m sinks.s3``
``kafkagen export``     the dataset and its manifest from S3                  ``python -m sinks.export``
``kafkagen stack``      the local Kafka, S3 and llama.cpp servers             ``python -m launch.stack``
``kafkagen serve``      a fleet of SGLang servers, one per GPU (docs/serve)   :mod:`launch.serve.cli`
``kafkagen preflight``  a sample of the input judged on every server          :mod:`launch.preflight_cli`
``kafkagen status``     a run's status (``--json``, ``--watch``)              :mod:`launch.status_cli`
``kafkagen gate``       the run's quality gate: status, halt, resume          :mod:`launch.gate_cli`
``kafkagen replay``     a run's prompts again under a new run id               :mod:`launch.replay_cli`
``kafkagen regenerate`` a selection of a run's prompts again, as attempt + 1   :mod:`launch.regenerate_cli`
``kafkagen runs``       the runs Kafka and S3 know (``--json``)               :mod:`launch.runs_cli`
``kafkagen scale``      add/remove a running run's servers, its partitions    :mod:`launch.scale_cli`
======================  ====================================================  =====================

Subcommands are imported when they run, so ``kafkagen produce`` does not load faust and
``kafkagen --help`` starts at once. Settings flags, the exit statuses and the logging set-up are
the same for every command (:mod:`streams.cli`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import click

from streams.cli import run_command

__all__ = ["kafkagen", "main"]

_COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("launch.run_cli", "run_command_"),
    "produce": ("producers.cli", "produce"),
    "generate": ("consumers.cli", "generate"),
    "sink": ("sinks.cli", "sink"),
    "export": ("sinks.export.cli", "export_command"),
    "stack": ("launch.stack.cli", "stack"),
    "serve": ("launch.serve.cli", "serve"),
    "preflight": ("launch.preflight_cli", "preflight_command"),
    "status": ("launch.status_cli", "status_command"),
    "gate": ("launch.gate_cli", "gate"),
    "replay": ("launch.replay_cli", "replay_command"),
    "regenerate": ("launch.regenerate_cli", "regenerate_command"),
    "runs": ("launch.runs_cli", "runs_command"),
    "scale": ("launch.scale_cli", "scale_command"),
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
