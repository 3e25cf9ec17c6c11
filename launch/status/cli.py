"""``kafkagen status [--run-id R] [--json] [--watch [--interval S]] [--serve [--host H] [--port P]]``:
a run's status from any host that reaches its Kafka (:mod:`launch.status.collect`).

The views (:mod:`launch.status.view`), ``--watch``, ``--serve`` (:mod:`launch.status.dashboard`),
the document's schema and the exit statuses (0; 1 no such run; 3 Kafka unreachable; 130
interrupted): docs/status.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Final, TypeVar

import click
from aiokafka.errors import KafkaError
from rich.console import Console
from rich.live import Live
from rich.text import Text

from launch.status.shape import DASHBOARD_PORT, RunStatus
from launch.status.view import PLAIN_WIDTH, status_line, status_view
from streams.cli import command_settings, run_command, settings_options
from streams.config import Settings
from streams.errors import ExitCode, RunNotFoundError
from streams.kafka import kafka_unavailable
from streams.runs import naming
from streams.runs.record import read_run_record

if TYPE_CHECKING:  # the collector and the dashboard load when a status is asked: --help is at once
    from launch.status.collect import Collector

__all__ = ["main", "status_command"]

T = TypeVar("T")

CLOSE_WAIT_S: Final = 10.0
"""Seconds a cancelled collection, or the clients' closing, may take once the watch stops."""


def _not_found(settings: Settings) -> RunNotFoundError:
    t = settings.topics
    return RunNotFoundError(
        f"run {settings.run_id!r} not found: Kafka at {settings.kafka.bootstrap_servers} has neither "
        f"{t.prompts} nor {t.completions}. Check --run-id (the main job's default is demo) and the "
        "Kafka address (KAFKAGEN_KAFKA__BOOTSTRAP_SERVERS)"
    )


async def _first(collector: Collector) -> RunStatus:
    """The first collection: Kafka unreachable ends the command (exit 3), an unknown run too (1)."""
    settings = collector.settings
    try:
        await collector.start()
        status = await collector.collect()
    except (KafkaError, TimeoutError, OSError) as exc:
        raise kafka_unavailable(settings.kafka, exc) from None
    if status.state == "not_found":
        raise _not_found(settings)
    return status


async def _once(settings: Settings, as_json: bool) -> None:
    from launch.status.collect import Collector

    collector = Collector(settings)
    try:
        status = await _first(collector)
    finally:
        await collector.stop()
    if as_json:
        click.echo(json.dumps(status.to_dict(), indent=2))
    else:
        width = None if sys.stdout.isatty() else PLAIN_WIDTH
        Console(highlight=False, width=width).print(status_view(status))


async def _watch(settings: Settings, as_json: bool, interval_s: float) -> bool:
    """Watch until SIGINT or SIGTERM; whether one came (the first collection's errors are raised).

    The signals set an event the loop waits on, rather than cancel the task (``asyncio.run``'s
    SIGINT handling): a cancellation lost inside a client (Python 3.11's ``asyncio.wait_for`` can
    drop one, CPython issue 86296) would keep the command printing after Ctrl-C."""
    live_view = sys.stdout.isatty() and not as_json
    from launch.status.collect import Collector

    collector = Collector(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        status = await _unless_stopped(_first(collector), stop)
        if status is not None:
            if live_view:
                await _live(collector, status, interval_s, stop)
            else:
                await _lines(collector, status, interval_s, as_json, stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await collector.stop()
    return stop.is_set()


async def _unless_stopped(call: Awaitable[T], stop: asyncio.Event) -> T | None:
    """``call``'s result, or None when ``stop`` is set first: then ``call`` is cancelled and
    given ``CLOSE_WAIT_S`` seconds to end."""
    task = asyncio.ensure_future(call)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.wait({task}, timeout=CLOSE_WAIT_S)
    return None


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Whether ``stop`` is set within ``seconds``."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
    return stop.is_set()


async def _live(collector: Collector, status: RunStatus, interval_s: float, stop: asyncio.Event) -> None:
    """The live terminal view, redrawn after each collection (rich ``Live``), until ``stop``."""
    with Live(status_view(status), console=Console(highlight=False), auto_refresh=False) as live:
        while not await _stopped_within(stop, interval_s):
            try:
                status_now = await _unless_stopped(collector.collect(), stop)
            except (KafkaError, TimeoutError, OSError) as exc:
                live.update(Text(f"Kafka unreachable ({type(exc).__name__}); asking again"), refresh=True)
                await collector.stop()  # the next collection connects anew
            else:
                if status_now is not None:
                    live.update(status_view(status_now), refresh=True)


async def _lines(
    collector: Collector, status: RunStatus, interval_s: float, as_json: bool, stop: asyncio.Event
) -> None:
    """One line per interval (a plain line, or with ``as_json`` one document), on the interval's
    grid: a slow collection does not make the lines drift. Until ``stop``."""
    started = time.monotonic()
    n = 0
    line: str = json.dumps(status.to_dict()) if as_json else status_line(status)
    while not stop.is_set():
        click.echo(line)
        n += 1
        if await _stopped_within(stop, max(0.0, started + n * interval_s - time.monotonic())):
            return
        try:
            status_now = await _unless_stopped(collector.collect(), stop)
        except (KafkaError, TimeoutError, OSError) as exc:
            when, name = time.strftime("%H:%M:%S"), type(exc).__name__
            line = f"{when} run {collector.settings.run_id}: Kafka unreachable ({name}); asking again"
            await collector.stop()  # the next collection connects anew
        else:
            if status_now is not None:
                line = json.dumps(status_now.to_dict()) if as_json else status_line(status_now)


@click.command(
    "status",
    help="A run's status from any host that reaches its Kafka: prompts published, generated, in S3 "
    "and exported; lag per partition and consumer; servers, rates and load; quality, gate, ETA (an "
    "interval: the rate's counting noise over its 120 s window). 'remaining' is prompts: published "
    "minus result records written. 'lag' is Kafka offsets: the prompts topic's end offsets minus the "
    "generation group's committed offsets; it also counts prompts finished behind an unfinished one "
    "(only a contiguous prefix is committed) and the producer's transaction markers, so it is at "
    "least remaining. 'sink' lag: results not in S3 yet. Details: docs/status.md, Lag and "
    "remaining. Exit status: 0; 1 when the run does not exist; 3 when Kafka cannot be reached.",
)
@click.option("--json", "as_json", is_flag=True, help="print the status document (schema_version 1)")
@click.option(
    "--watch",
    is_flag=True,
    help="collect again every --interval seconds: a live view on a terminal, else one line per interval",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    default=2.0,
    show_default=True,
    help="seconds between collections with --watch or --serve",
)
@click.option(
    "--serve",
    is_flag=True,
    help="serve the web dashboard (live charts; assets bundled, no internet needed) on "
    "http://HOST:PORT/ until interrupted (docs/dashboard.md)",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="address the dashboard binds (--serve)")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DASHBOARD_PORT,
    show_default=True,
    help="its port (--serve)",
)
@settings_options("run_id", "replay_of", log_default="warning")
@click.pass_context
def status_command(
    ctx: click.Context, as_json: bool, watch: bool, interval: float, serve: bool, host: str, port: int
) -> int:
    settings = command_settings(ctx)
    from launch.status.collect import quiet_kafka_logs
    from launch.status.dashboard import serve_dashboard

    quiet_kafka_logs()
    settings = _as_recorded(settings)
    if serve:
        if as_json or watch:
            raise click.UsageError("--serve shows the status in a browser: use it without --json and --watch")
        serve_dashboard(settings, host, port, interval_s=interval)
    elif watch:
        if asyncio.run(_watch(settings, as_json, interval)):
            return ExitCode.INTERRUPTED
    else:
        asyncio.run(_once(settings, as_json))
    return 0


def _as_recorded(settings: Settings) -> Settings:
    """``settings`` declared the replay its run record says the run is (``RunRecord.parent``), when
    ``--replay-of`` was not given: a replay's prompts topic is its parent's. Unchanged when the
    record cannot be read (the status then says what it can)."""
    if settings.replay_of is not None:
        return settings
    try:
        record = asyncio.run(read_run_record(settings, timeout_s=5.0))
    except (KafkaError, TimeoutError):
        return settings
    if record is None or record.parent is None:
        return settings
    return naming.for_run(settings, settings.run_id, replay_of=record.parent)


def main(argv: Sequence[str] | None = None) -> int:
    """``kafkagen status`` on ``argv`` (``None``: the process arguments); returns the exit status."""
    return run_command(status_command, argv, prog="kafkagen status")
