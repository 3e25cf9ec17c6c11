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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, get_args

import click
from aiokafka.errors import KafkaError, ProducerFenced
from tqdm import tqdm

from producers.metrics import ProducerMetrics
from producers.publisher import publish
from producers.reading.badlines import BadLineReport
from producers.results import RunResult
from producers.transactions import quiet_abandoned_kafka_futures
from streams.cli import (
    command_settings,
    input_format_option,
    run_command,
    settings_options,
    skip_unreadable_option,
    template_options,
)
from streams.config import KeyBy
from streams.errors import ConfigError, ExitCode, StorageError, UnavailableError
from streams.inputs import (
    LAST_TURN_RULES,
    MAX_SAMPLES,
    FormatName,
    InputMapping,
    LastTurn,
    MappingOptions,
    prompt_template,
    resolve_inputs,
)
from streams.kafka import kafka_unavailable
from streams.metrics import serve_metrics

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "EXIT_BAD_LINES",
    "EXIT_OK",
    "MAPPING_OPTIONS",
    "PROG",
    "main",
    "mapping_options",
    "produce",
]

PROG: Final = "python -m producers.prompts"

EXIT_OK: Final = ExitCode.OK
EXIT_BAD_LINES: Final = ExitCode.FAILED


MAPPING_OPTIONS: Final = (
    "--format",
    "--prompt-field",
    "--id-field",
    "--system",
    "--keep-field",
    "--tag",
    "--key-by",
    "--last-turn",
    "--skip-unreadable",
    "--template",
    "--system-template",
    "--samples",
)
"""The flags :func:`mapping_options` adds."""


def mapping_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for a click command that reads prompt inputs: the input mapping options
    (:data:`MAPPING_OPTIONS`: ``--format``, ``--prompt-field``, ``--id-field``, ``--system``,
    ``--keep-field``, ``--tag``, ``--key-by``, ``--last-turn``, ``--skip-unreadable``), handed to
    the command as one keyword argument ``mapping`` (an :class:`InputMapping`). ``kafkagen
    produce`` and ``kafkagen run`` both use it, so their options cannot drift apart. Put it below
    ``@click.command``."""

    @functools.wraps(command)
    def wrapper(
        *args: Any,
        format_: str,
        prompt_field: str | None,
        id_field: str | None,
        system: str | None,
        keep_field: tuple[str, ...],
        tag: tuple[str, ...],
        key_by: KeyBy | None,
        last_turn: LastTurn,
        skip_unreadable: bool,
        template: str | None,
        system_template: str | None,
        samples: int,
        **kwargs: Any,
    ) -> Any:
        rows = MappingOptions(
            template=prompt_template(template, system_template),
            samples=samples,
            format=FormatName(format_),  # a click.Choice of the names
            prompt_field=prompt_field,
            id_field=id_field,
            system=system,
            keep_fields=keep_field,
            tags=tag,
            last_turn=last_turn,
        )
        mapping = InputMapping(rows, key_by=key_by, skip_unreadable=skip_unreadable)
        return command(*args, mapping=mapping, **kwargs)

    decorators = [
        input_format_option("row format (streams/inputs/formats.py)"),
        click.option("--prompt-field", metavar="NAME", help="dataset rows: the field holding the prompt"),
        click.option("--id-field", metavar="NAME", help="the field holding the record id"),
        click.option("--system", metavar="TEXT", help="system prompt for rows that have none"),
        click.option(
            "--keep-field",
            multiple=True,
            metavar="NAME",
            help="copy this row field into metadata.extra (repeatable)",
        ),
        click.option("--tag", multiple=True, metavar="TAG", help="add to metadata.tags (repeatable)"),
        click.option(
            "--key-by",
            type=click.Choice(get_args(KeyBy)),
            help="pick the partition round-robin by line (balanced, default), by a hash of the record id, "
            "or by a hash of the shared prefix (system prompt + tools); same as --producer.key-by",
        ),
        click.option(
            "--last-turn",
            type=click.Choice(LAST_TURN_RULES),
            default="auto",
            show_default=True,
            help="a conversation ending with an assistant turn: 'reference' sends the turns before it and "
            "keeps the answer in metadata.extra.reference, 'keep' sends it whole; 'auto': reference for "
            "sharegpt rows, keep for the others (streams/inputs/answers.py)",
        ),
        skip_unreadable_option(),
        template_options(),
        click.option(
            "--samples",
            type=click.IntRange(1, MAX_SAMPLES),
            default=1,
            show_default=True,
            metavar="N",
            help="completions per prompt: each row is published as N records <id>#0 .. <id>#N-1, each "
            "with its own seed (docs/inputs.md, Samples)",
        ),
    ]
    decorated: Callable[..., Any] = wrapper
    for option in reversed(decorators):  # the first listed shows first in --help
        decorated = option(decorated)
    return decorated


def _echo(message: str) -> None:
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
