"""``kafkagen runs [RUN]... [--json] [--no-s3]``: the runs Kafka and S3 know, from any host that
reaches them (:mod:`launch.status.runs`; the table: :mod:`launch.status.runs_view`; the document's
schema and the state rule: docs/status.md).

Exit status (:mod:`streams.cli`): 0; 1 when a RUN given matches no run (the others are still
listed), or S3 refuses the listing (a missing bucket, a refused key); 3 when Kafka cannot be
reached (nothing listed), or S3 cannot be (Kafka's runs are listed, and a warning says the runs
known only from S3 are missing).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence

import click
from aiokafka.errors import KafkaError
from rich.console import Console, RenderableType

from launch.status.runs_view import runs_view
from launch.status.view import PLAIN_WIDTH
from streams.cli import command_settings, exit_code, run_command, settings_options
from streams.errors import ExitCode
from streams.kafka import kafka_unavailable

__all__ = ["main", "plain_text", "runs_command"]

_HELP = """List the runs Kafka and S3 know, from any host that reaches them: run id, state, when it
was created, its parent (the run a replay regenerates), its generation parameters, counts
(published, results, errors, lag, in S3, exported) and its regenerations. Oldest first.

RUN... lists only these runs (run ids or shell patterns such as 'exp-*').

\b
A run is found by its topics (<run>.prompts, .completions, .errors, .control)
or its S3 folder (<s3.prefix>/<run>/); its record on <run>.control, written by
the main job, gives its parent, creation time and parameters. A run without
one (older, or started by hand) is listed from what its topics, consumer
groups and reports say (created: its first record).

\b
State, the first that holds:
  halted   the quality gate's latest record is "halted"
           (kafkagen gate status / resume)
  running  a generation consumer reported within the last 3 report
           intervals (at least 10 s) and did not report "stopped"
  done     exported (no regeneration since) and nothing remains: every
           prompt's offset committed by the run's generation group, every
           result committed to S3, and results >= published
  idle     anything else: not started, stopped part way (re-run it to
           resume), generated but not exported yet (kafkagen export), or
           known from S3 only (its topics are gone)

Exit status: 0; 1 when a RUN matches no run, or S3 refuses the listing (no such bucket, a
refused key); 3 when Kafka cannot be reached, or S3 cannot be (Kafka's runs are still listed)."""


@click.command("runs", help=_HELP)
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@click.option("--json", "as_json", is_flag=True, help="print the listing document (schema_version 1)")
@click.option("--no-s3", is_flag=True, help="list what Kafka knows only: do not list the S3 run folders")
@settings_options("kafka.bootstrap_servers", "s3.bucket", "s3.prefix", log_default="warning")
@click.pass_context
def runs_command(ctx: click.Context, runs: tuple[str, ...], as_json: bool, no_s3: bool) -> int:
    settings = command_settings(ctx)
    from launch.status.collect import quiet_kafka_logs  # here: --help does not load the collector
    from launch.status.runs import collect_runs

    quiet_kafka_logs()
    try:
        listing, s3_error = asyncio.run(collect_runs(settings, runs, with_s3=not no_s3))
    except (KafkaError, TimeoutError, OSError) as exc:
        raise kafka_unavailable(settings.kafka, exc) from None
    if as_json:
        click.echo(json.dumps(listing.to_dict(), indent=2))
    elif sys.stdout.isatty():
        Console(highlight=False).print(runs_view(listing))
    else:
        click.echo(plain_text(runs_view(listing)))
    status = ExitCode.OK
    if s3_error is not None:
        click.echo(f"warning: runs known only from S3 are not listed: {s3_error}", err=True)
        status = exit_code(s3_error)
    if listing.not_found:
        where = f"on Kafka at {settings.kafka.bootstrap_servers}"
        if not no_s3 and s3_error is None:
            where += f" nor in s3://{settings.s3.bucket}/{settings.s3.prefix.strip('/')}/"
        for pattern in listing.not_found:
            click.echo(f"error: no run {pattern!r} {where}", err=True)
        if status == ExitCode.OK:
            status = ExitCode.FAILED
    return int(status)


def plain_text(view: RenderableType) -> str:
    """``view`` as plain text for a stdout that is not a terminal: as wide as it needs (at least
    :data:`launch.status.view.PLAIN_WIDTH` columns; nothing wrapped or cut), no colours, no
    trailing spaces."""
    width = max(PLAIN_WIDTH, Console(width=100_000).measure(view).maximum)
    console = Console(width=width, highlight=False, color_system=None)
    with console.capture() as captured:
        console.print(view)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


def main(argv: Sequence[str] | None = None) -> int:
    """``kafkagen runs`` on ``argv`` (``None``: the process arguments); returns the exit status."""
    return run_command(runs_command, argv, prog="kafkagen runs")
