"""``kafkagen replay RUN --as NEW [overrides] [run options]``: generate every prompt of run ``RUN``
again under the new run id ``NEW``, with new generation parameters, publishing nothing.

It is the main job (:mod:`launch.run`) declared a replay (``--run-id NEW --replay-of RUN``,
docs/runs.md): ``NEW``'s consumers read ``RUN.prompts`` in their own consumer group, from the first
offset, and write ``NEW.completions`` / ``NEW.errors``; the sink writes ``runs/NEW/``; the export
compares with ``RUN.prompts``. Every record of ``RUN.prompts`` is generated, including the attempts
``kafkagen regenerate`` re-published (their ``params`` overrides still apply; the export keeps each
id's latest attempt). Re-running the same command resumes ``NEW``.

The generation overrides (``--max-tokens``, ``--thinking/--no-thinking``, ``--temperature``,
``--top-p``, ``--model``) become ``NEW``'s defaults; every other option is ``kafkagen run``'s
(``--server URL`` for another model's servers, ``--to``, ``--timeout``, settings flags ...).
Exit status: the main job's (2 also when ``RUN`` has no prompts topic, :func:`launch.run.run`,
or ``NEW`` is ``RUN``).
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from launch.run_cli import run_main
from streams import naming
from streams.cli import run_command
from streams.errors import ConfigError

__all__ = ["main", "replay_argv", "replay_command"]


def replay_argv(
    run: str,
    new: str,
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    model: str | None = None,
    rest: Sequence[str] = (),
) -> list[str]:
    """The ``kafkagen run`` arguments of a replay of ``run`` as ``new`` (``rest``: other ``run``
    options, passed as they are, ``--max-tokens`` and ``--thinking`` among them)."""
    argv = ["--run-id", new, "--replay-of", run]
    if temperature is not None:
        argv += ["--generation.temperature", repr(temperature)]
    if top_p is not None:
        argv += ["--generation.top_p", repr(top_p)]
    if model is not None:
        argv += ["--generation.model", model]
    return [*argv, *rest]


@click.command(
    "replay",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    help="Generate every prompt of run RUN again under the new run id NEW (--as), with new generation "
    "parameters, publishing nothing: RUN's prompts topic is read in NEW's own consumer group and NEW "
    "gets its own topics, S3 folder and dataset. Every other option is `kafkagen run`'s (--server, "
    "--max-tokens, --no-thinking, --to, ...). The same command again resumes NEW.",
)
@click.argument("run")
@click.option("--as", "new", required=True, metavar="NEW", help="the new run id")
@click.option("--temperature", type=click.FloatRange(min=0.0), help="NEW's sampling temperature")
@click.option(
    "--top-p", type=click.FloatRange(min=0.0, max=1.0, min_open=True), help="NEW's nucleus sampling"
)
@click.option("--model", help="the model name NEW sends (generation.model)")
@click.pass_context
def replay_command(
    ctx: click.Context, run: str, new: str, temperature: float | None, top_p: float | None, model: str | None
) -> int:
    try:
        naming.check_run_id(run, what="RUN")
        naming.check_run_id(new, what="--as")
        naming.check_not_self_replay(new, run)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return run_main(
        replay_argv(run, new, temperature=temperature, top_p=top_p, model=model, rest=ctx.args),
        prog="kafkagen replay",
    )


def main(argv: Sequence[str] | None = None, *, prog: str = "kafkagen replay") -> int:
    """Run ``replay`` on ``argv`` (``None``: the process arguments); returns the exit status."""
    return run_command(replay_command, argv, prog=prog)
