"""``kafkagen stack up|down|status|logs|kill`` (also ``python -m launch.stack``): the local stack.

Addresses come from the ``KAFKAGEN_*`` settings (README, Configuration); services are named by
kind (``kafka``, ``s3``, ``llm``) or one by one (``kafka-2``, ``llm-30000``), so ``kill kafka-2``
then ``up kafka-2`` crashes and restarts one broker; ``--cluster3`` acts on the tests' 3-broker
cluster (:func:`launch.stack.cluster_beside`; docs/local-stack.md). Exit status
(:mod:`streams.cli`): 0 on success, 1 when ``status`` finds a service not ready, 2 on bad usage, 3
when a service cannot be started.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import click

from launch.stack import SERVICES, LocalStack, cluster_beside
from streams.cli import SummaryGroup, command_settings, run_command, settings_options
from streams.config import Settings
from streams.errors import ExitCode

__all__ = ["main", "stack"]

_SERVICE_HELP = f"SERVICE: any of {', '.join(SERVICES)} or one service such as kafka-2"


@click.group(cls=SummaryGroup, help="Run the local Kafka, S3 and LLM servers.")
@click.option(
    "--cluster3",
    is_flag=True,
    help="act on the 3-broker Kafka cluster beside the configured stack (home <home>/cluster3, "
    "brokers on the highest configured Kafka port + 2, + 4, + 6); Kafka only",
)
@settings_options(log_default="warning")
def stack(cluster3: bool) -> None:
    pass


def _stack(ctx: click.Context, services: Sequence[str]) -> tuple[LocalStack, list[str]]:
    assert ctx.parent is not None
    cluster3: bool = ctx.parent.params["cluster3"]
    kinds = list(services) or (["kafka"] if cluster3 else list(SERVICES))
    unknown = [k for k in kinds if k not in SERVICES and not re.fullmatch(r"(kafka|llm)-\d+", k)]
    if unknown:
        choices = ", ".join(SERVICES)
        raise click.UsageError(
            f"unknown service {', '.join(unknown)}: choose from {choices} or one such as kafka-2"
        )
    settings: Settings = command_settings(ctx)
    if cluster3:
        settings = cluster_beside(settings)
        others = [k for k in kinds if not k.startswith("kafka")]
        if others:
            raise click.UsageError(f"--cluster3 holds Kafka only, not {', '.join(others)}")
    return LocalStack(settings), kinds


_services = click.argument("services", nargs=-1, metavar="[SERVICE]...")


@stack.command(help=f"Start the services (idempotent) and wait until they are ready. {_SERVICE_HELP}")
@_services
@settings_options(log_default="warning")
@click.pass_context
def up(ctx: click.Context, services: tuple[str, ...]) -> None:
    local, kinds = _stack(ctx, services)
    local.up(kinds, echo=print)


@stack.command(help=f"Stop the services this stack started. {_SERVICE_HELP}")
@_services
@settings_options(log_default="warning")
@click.pass_context
def down(ctx: click.Context, services: tuple[str, ...]) -> None:
    local, kinds = _stack(ctx, services)
    local.down(kinds, echo=print)


@stack.command(help=f"Show each service, its address and whether it answers. {_SERVICE_HELP}")
@_services
@settings_options(log_default="warning")
@click.pass_context
def status(ctx: click.Context, services: tuple[str, ...]) -> int:
    local, kinds = _stack(ctx, services)
    states = local.status(kinds)
    for s in states:
        state = "ready" if s.ready else ("running, not answering" if s.running else "stopped")
        print(f"{s.name:<10} {state:<24} {s.address:<26} pid {s.pid or '-':<8} log {s.log}")
    return ExitCode.OK if all(s.ready for s in states) else ExitCode.FAILED


@stack.command(help=f"Print the end of each service's log. {_SERVICE_HELP}")
@_services
@click.option("-n", "--lines", type=int, default=30, show_default=True, help="lines per service")
@settings_options(log_default="warning")
@click.pass_context
def logs(ctx: click.Context, services: tuple[str, ...], lines: int) -> None:
    local, kinds = _stack(ctx, services)
    for name in local.names(kinds):
        print(f"==> {local.processes.log_path(name)} <==")
        print(local.processes.tail(name, lines))


@stack.command(help=f"SIGKILL services at once (crash tests); 'up' starts them again. {_SERVICE_HELP}")
@click.argument("services", nargs=-1, required=True, metavar="SERVICE...")
@settings_options(log_default="warning")
@click.pass_context
def kill(ctx: click.Context, services: tuple[str, ...]) -> None:
    local, kinds = _stack(ctx, services)
    for name in local.names(kinds):
        print(f"{name}: {'killed' if local.kill(name) else 'not running'}")


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m launch.stack") -> int:
    """Run ``stack`` on ``argv`` (``None``: the process arguments); returns the exit status."""
    return run_command(stack, argv, prog=prog)
