"""The producer's command line: ``python -m producers.prompts FILE [FILE ...] [options]``.

Exit status
    0 success; 1 some line was bad (0 with ``--allow-bad``); 2 usage error, missing or unreadable
    input, input changed since an earlier run, prompts topic of another run; 3 Kafka or S3 failure
    (unreachable, fenced by another producer of the same input); 130 interrupted (SIGINT or
    SIGTERM: the open transaction is aborted, a re-run continues after the last commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import click
from tqdm import tqdm

from streams.cli import (
    command_settings,
    mapping_options,
    run_command,
    settings_options,
)
from streams.errors import ConfigError, ExitCode, StorageError, UnavailableError
from streams.inputs import (
    InputMapping,
    resolve_inputs,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from producers.results import RunResult

__all__ = [
    "EXIT_BAD_LINES",
    "EXIT_OK",
    "PROG",
    "main",
    "produce",
]

PROG: Final = "python -m producers.prompts"

EXIT_OK: Final = ExitCode.OK
EXIT_BAD_LINES: Final = ExitCode.FAILED


def _echo(message: str) -> None:
    """One message line on stderr; when stderr is no terminal (a log, the main job's output) it
    starts with the local time, ``HH:MM:SS``, as every plain progress line of kafkagen does."""
    if not sys.stderr.isatty():
        message = f"{time.strftime('%H:%M:%S')} {message}"
    tqdm.write(message, file=sys.stderr)


@click.command(
    "produce",
    help="Publish prompt files (JSON Lines or a JSON array: plain, .gz, .zst, stdin, s3://; Parquet) to the "
    "prompts topic, exactly once: a re-run after a crash continues where the last committed transaction "
    "ended. FILE: a JSON Lines or JSON array file, a Parquet file, a folder of them (any other file in "
    "it is refused unless --skip-unreadable), a glob, '-' for stdin, s3://bucket/key (or glob). Exit "
    "status: 0 ok, 1 bad lines (unless --allow-bad), 2 usage or input error, 3 Kafka/S3 failure, 130 "
    "interrupted.",
)
@click.argument("inputs", nargs=-1, required=True, metavar="FILE...")
@mapping_options
@click.option(
    "--from-scratch",
    is_flag=True,
    help="ignore the stored progress and publish everything again (records published earlier stay: their "
    "ids appear twice)",
)
@click.option("--allow-bad", is_flag=True, help="exit 0 even when some lines were bad")
@click.option(
    "--bad-lines",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("bad-lines.jsonl"),
    show_default=True,
    metavar="PATH",
    help="JSON Lines report of bad lines, written only if there are any",
)
@click.option("--no-progress", is_flag=True, help="no progress bar (it is off anyway when stderr is no tty)")
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    help="serve Prometheus metrics on 127.0.0.1:PORT while publishing (docs/metrics.md)",
)
@settings_options("run_id", log_default="warning")
@click.pass_context
def produce(
    ctx: click.Context,
    inputs: tuple[str, ...],
    mapping: InputMapping,
    from_scratch: bool,
    allow_bad: bool,
    bad_lines: Path,
    no_progress: bool,
    metrics_port: int | None,
) -> int:
    # The reader thread parses without ever blocking; a short GIL switch interval (default 5 ms)
    # keeps the event loop's acks and commits prompt (measured: ~7% more throughput).
    ctx.call_on_close(functools.partial(sys.setswitchinterval, sys.getswitchinterval()))
    sys.setswitchinterval(0.0005)
    # A topic created a moment ago answers offset requests with "not leader" until its leader is
    # elected; aiokafka retries, logging each try as an error. Failures that last still raise.
    logging.getLogger("aiokafka.consumer.fetcher").setLevel(logging.CRITICAL)
    settings = command_settings(ctx)
    if mapping.key_by is not None:
        settings = settings.model_copy(
            update={"producer": settings.producer.model_copy(update={"key_by": mapping.key_by})}
        )
    options = mapping.options(settings.run_id)
    folder = bad_lines.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise ConfigError(f"--bad-lines {bad_lines}: folder {folder} does not exist or is not writable")

    s3_client: list[S3Client] = []

    def s3() -> S3Client:
        if not s3_client:
            from streams.storage import s3_client as make_s3_client

            s3_client.append(make_s3_client(settings.s3))
        return s3_client[0]

    # the machinery loads here, not at import: --help answers at once
    from aiokafka.errors import KafkaError, ProducerFenced

    from producers.metrics import ProducerMetrics
    from producers.publisher import publish
    from producers.reading.badlines import BadLineReport
    from producers.transactions import quiet_abandoned_kafka_futures
    from streams.kafka import kafka_unavailable
    from streams.metrics import serve_metrics

    report = BadLineReport(bad_lines, echo=_echo)
    metrics = ProducerMetrics(settings.run_id)
    if metrics_port is not None:
        serve_metrics(metrics_port, metrics.registry)

    async def run() -> RunResult:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(quiet_abandoned_kafka_futures)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, RuntimeError):  # not the main thread (tests)
                loop.add_signal_handler(sig, task.cancel)
        resolved = await asyncio.to_thread(
            resolve_inputs, inputs, s3, skip_unreadable=mapping.skip_unreadable
        )
        return await publish(
            settings,
            options,
            resolved,
            report=report,
            from_scratch=from_scratch,
            progress_bar=not no_progress,
            echo=_echo,
            s3=s3,
            metrics=metrics,
        )

    try:
        result = asyncio.run(run())
    except asyncio.CancelledError:
        _echo("interrupted: the open transaction was aborted; run the same command again to continue")
        return ExitCode.INTERRUPTED
    except ProducerFenced:
        raise UnavailableError(
            "another producer started publishing the same input (same run id and topic) and took over"
        ) from None
    except (KafkaError, TimeoutError) as exc:
        raise kafka_unavailable(settings.kafka, exc) from None
    except StorageError as exc:  # an S3 input that cannot be read: status 3, never 1 (bad lines)
        raise UnavailableError(str(exc)) from None
    finally:
        report.close()
    _echo(result.summary())
    if report.count and not allow_bad:
        return EXIT_BAD_LINES
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m producers.prompts FILE [FILE ...] [options]``; returns the exit status (the module
    docstring). ``argv``: the arguments without the program name (``None``: ``sys.argv[1:]``)."""
    return run_command(produce, argv, prog=PROG)
