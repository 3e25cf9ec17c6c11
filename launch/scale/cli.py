"""``kafkagen scale --run-id RUN``: add or remove a running run's servers, or raise its partition
count (docs/runs.md "Scaling a running run").

``--add-server`` / ``--remove-server`` / ``--servers`` write the run's next fleet record
(:mod:`launch.scale.control`), which its main job follows (:mod:`launch.scale.watch`);
``--partitions N`` raises the prompts topic's partition count. Exit status (:mod:`streams.cli`): 0
done or nothing to change; 2 bad usage (a bad URL, a server not in the fleet, the last server, fewer
partitions, no such run or no main job's fleet); 3 Kafka or an added server unreachable.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from pathlib import Path

import click
from aiokafka.errors import KafkaError

from streams.cli import command_settings, flag_given, run_command, settings_options
from streams.config import Settings
from streams.kafka import kafka_unavailable

__all__ = ["check_scale_args", "main", "scale_command"]


def check_scale_args(
    add: Sequence[str], remove: Sequence[str], servers: Sequence[str] | None, partitions: int | None
) -> None:
    """Check that the options fit together (``servers``: the ``--servers`` list, None when not
    given).

    Raises:
        click.UsageError: nothing asked; ``--servers`` with ``--add-server`` or
            ``--remove-server``; an empty ``--servers``.
    """
    if not add and not remove and servers is None and partitions is None:
        raise click.UsageError(
            "nothing to change: give --add-server URL, --remove-server URL, --servers URL,URL "
            "or --partitions N"
        )
    if servers is not None and (add or remove):
        raise click.UsageError("--servers gives the whole fleet: drop --add-server and --remove-server")
    if servers is not None and not servers:
        raise click.UsageError("--servers is empty: a run needs at least one server")


@click.command(
    "scale",
    help="Add or remove servers of a running run, or raise its prompts topic's partition count. The "
    "run's main job starts or stops one generation consumer per server within seconds; a removed "
    "consumer finishes its requests in flight, commits and hands its partitions over.",
)
@click.option("--add-server", "add", multiple=True, metavar="URL", help="a server to add (repeatable)")
@click.option(
    "--remove-server", "remove", multiple=True, metavar="URL", help="a server to remove (repeatable)"
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    metavar="N",
    help="raise the prompts topic to N partitions (never lowers it; see docs/runs.md for placement)",
)
@click.option(
    "--server-timeout",
    "server_timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="wait this long for an added server to answer",
)
@settings_options("run_id", "servers", log_default="warning")
@click.pass_context
def scale_command(
    ctx: click.Context,
    add: tuple[str, ...],
    remove: tuple[str, ...],
    partitions: int | None,
    server_timeout_s: float,
) -> None:
    # --servers is the servers setting's own flag (a list: URL,URL, JSON or repeated), the
    # whole fleet; the variable KAFKAGEN_SERVERS does not count here.
    given = flag_given(ctx, "servers")
    settings = command_settings(ctx)
    fleet = list(settings.servers) if given else None
    check_scale_args(add, remove, fleet, partitions)
    by = f"kafkagen scale@{socket.gethostname()}"
    try:
        asyncio.run(_scale(settings, add, remove, fleet, partitions, server_timeout_s, by))
    except (KafkaError, TimeoutError) as exc:
        raise kafka_unavailable(settings.kafka, exc) from None


async def _scale(
    settings: Settings,
    add: Sequence[str],
    remove: Sequence[str],
    servers: Sequence[str] | None,
    partitions: int | None,
    server_timeout_s: float,
    by: str,
) -> None:
    # here, not at the top: --help answers at once
    from launch.scale.control import check_partitions, raise_partitions, scale_fleet
    from launch.supervise import Supervisor

    if partitions is not None:
        await check_partitions(settings, partitions)  # refused before anything is written
    if add or remove or servers is not None:
        record = await scale_fleet(
            settings, add=add, remove=remove, servers=servers, by=by, server_timeout_s=server_timeout_s
        )
        home = Path(settings.home) / "runs" / settings.run_id
        if record is not None and not Supervisor(home).running():
            print(
                f"note: no main job of run {settings.run_id} runs on this host (no supervisord in {home}): "
                "the fleet applies when the main job runs (its same command starts this fleet)"
            )
    if partitions is not None:
        before, after = await raise_partitions(settings, partitions, by=by)
        topic = settings.topics.prompts
        if before == after:
            print(f"{topic}: {before} partitions already; nothing changed")
        else:
            print(
                f"{topic}: {before} -> {after} partitions; the prompts already published stay in theirs, "
                "prompts published from now on are dealt over all of them (docs/runs.md)"
            )


def main(argv: Sequence[str] | None = None, *, prog: str = "kafkagen scale") -> int:
    """Run ``scale`` on ``argv`` (``None``: the process arguments); returns the exit status."""
    return run_command(scale_command, argv, prog=prog)
