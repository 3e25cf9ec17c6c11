"""The producer's command line: ``python -m producers.prompts FILE [FILE ...] [options]``.

Exit status
    0 success; 1 some line was bad (0 with ``--allow-bad``); 2 usage error, missing or unreadable
    input, input changed since an earlier run, prompts topic of another run; 3 Kafka or S3 failure
    (unreachable, fenced by another producer of the same input); 130 interrupted (SIGINT or
    SIGTERM: the open transaction is aborted, a re-run continues after the last commit).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, get_args

from aiokafka.errors import KafkaError, ProducerFenced
from pydantic import BaseModel
from tqdm import tqdm

from producers.badlines import BadLineReport
from producers.publisher import publish
from producers.results import RunResult
from producers.transactions import quiet_abandoned_kafka_futures
from streams.config import KeyBy, Settings, load_settings
from streams.errors import ConfigError, ForeignRunError, InputError, KafkagenError
from streams.inputs import FormatName, MappingOptions, resolve_inputs
from streams.kafka import unreachable_message

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "EXIT_BAD_LINES",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SERVICE",
    "EXIT_USAGE",
    "PROG",
    "build_parser",
    "main",
]

PROG: Final = "python -m producers.prompts"

EXIT_OK: Final = 0
EXIT_BAD_LINES: Final = 1
EXIT_USAGE: Final = 2
EXIT_SERVICE: Final = 3
EXIT_INTERRUPTED: Final = 130

_SETTINGS_GROUPS: Final = ("kafka", "topics", "s3", "producer")


def _settings_flags() -> list[tuple[str, str]]:
    """``(flag, help)`` for ``--run-id`` and every field of the settings groups the producer uses."""
    fields = Settings.model_fields
    flags = [("--run-id", fields["run_id"].description or "")]
    for group in _SETTINGS_GROUPS:
        model = fields[group].annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        for name, info in model.model_fields.items():
            default = info.get_default(call_default_factory=True)
            text = f"{info.description or ''} (default: {default})".strip()
            flags.append((f"--{group}.{name.replace('_', '-')}", text))
    return flags


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (its settings flags are passed on to :func:`streams.config.load_settings`)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage="%(prog)s [options] FILE [FILE ...]",
        description="Publish prompt files (JSON Lines: plain, .gz, .zst, stdin, s3://) to the prompts topic, "
        "exactly once: a re-run after a crash continues where the last committed transaction ended.",
        epilog="Every setting can also come from the environment (KAFKAGEN_KAFKA__BOOTSTRAP_SERVERS=...). "
        "Exit status: 0 ok, 1 bad lines (unless --allow-bad), 2 usage or input error, 3 Kafka/S3 failure, "
        "130 interrupted.",
    )
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="FILE",
        help="JSON Lines file, glob, '-' for stdin, s3://bucket/key (or glob)",
    )
    mapping = parser.add_argument_group("how rows become prompts (see streams/inputs/formats.py)")
    mapping.add_argument(
        "--format", choices=[f.value for f in FormatName], default="auto", help="row format (default: auto)"
    )
    mapping.add_argument("--prompt-field", metavar="NAME", help="dataset rows: the field holding the prompt")
    mapping.add_argument("--id-field", metavar="NAME", help="the field holding the record id")
    mapping.add_argument("--system", metavar="TEXT", help="system prompt for rows that have none")
    mapping.add_argument(
        "--keep-field",
        action="append",
        default=[],
        metavar="NAME",
        help="copy this row field into metadata.extra (repeatable)",
    )
    mapping.add_argument(
        "--tag", action="append", default=[], metavar="TAG", help="add to metadata.tags (repeatable)"
    )
    run = parser.add_argument_group("publishing")
    run.add_argument(
        "--key-by",
        choices=get_args(KeyBy),
        help="pick the partition round-robin by line (balanced, default), by a hash of the record id, "
        "or by a hash of the shared prefix (system prompt + tools); same as --producer.key-by",
    )
    run.add_argument(
        "--from-scratch",
        action="store_true",
        help="ignore the stored progress and publish everything again (records published earlier stay: "
        "their ids appear twice)",
    )
    run.add_argument("--allow-bad", action="store_true", help="exit 0 even when some lines were bad")
    run.add_argument(
        "--bad-lines",
        type=Path,
        default=Path("bad-lines.jsonl"),
        metavar="PATH",
        help="JSON Lines report of bad lines, written only if there are any (default: ./bad-lines.jsonl)",
    )
    run.add_argument(
        "--no-progress", action="store_true", help="no progress bar (it is off anyway when stderr is no tty)"
    )
    settings = parser.add_argument_group("settings (override KAFKAGEN_* environment variables)")
    for flag, text in _settings_flags():
        settings.add_argument(flag, metavar="VALUE", help=text, default=argparse.SUPPRESS)
    return parser


def _settings_argv(args: argparse.Namespace) -> list[str]:
    """The settings flags given on the command line, as argv for :func:`streams.config.load_settings`
    (``--key-by`` as ``--producer.key-by``). Declared in :func:`build_parser` so that ``--help`` lists
    them and argparse does not take their values for ``FILE`` arguments."""
    argv: list[str] = []
    for flag, _text in _settings_flags():
        dest = flag[2:].replace("-", "_")
        if hasattr(args, dest):
            argv += [flag, str(getattr(args, dest))]
    if args.key_by is not None:
        argv += ["--producer.key-by", args.key_by]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m producers.prompts FILE [FILE ...] [options]``; returns the exit status (the module
    docstring). ``argv``: the arguments without the program name (``None``: ``sys.argv[1:]``).

    Raises:
        SystemExit: on ``--help`` or a usage error (argparse, status 2).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # A topic created a moment ago answers offset requests with "not leader" until its leader is
    # elected; aiokafka retries, logging each try as an error. Failures that last still raise.
    logging.getLogger("aiokafka.consumer.fetcher").setLevel(logging.CRITICAL)

    def echo(message: str) -> None:
        tqdm.write(message, file=sys.stderr)

    try:
        settings = load_settings(Settings, _settings_argv(args), prog=PROG)
        options = MappingOptions(
            format=args.format,
            prompt_field=args.prompt_field,
            id_field=args.id_field,
            system=args.system,
            keep_fields=tuple(args.keep_field),
            tags=tuple(args.tag),
            run_id=settings.run_id,
        )
    except ConfigError as exc:
        echo(f"error: {exc}")
        return EXIT_USAGE

    s3_client: list[S3Client] = []

    def s3() -> S3Client:
        if not s3_client:
            from streams.storage import s3_client as make_s3_client

            s3_client.append(make_s3_client(settings.s3))
        return s3_client[0]

    folder = args.bad_lines.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        echo(f"error: --bad-lines {args.bad_lines}: folder {folder} does not exist or is not writable")
        return EXIT_USAGE
    report = BadLineReport(args.bad_lines, echo=echo)

    async def run() -> RunResult:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(quiet_abandoned_kafka_futures)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, RuntimeError):  # not the main thread (tests)
                loop.add_signal_handler(sig, task.cancel)
        inputs = await asyncio.to_thread(resolve_inputs, args.inputs, s3)
        return await publish(
            settings,
            options,
            inputs,
            report=report,
            from_scratch=args.from_scratch,
            progress_bar=not args.no_progress,
            echo=echo,
            s3=s3,
        )

    try:
        result = asyncio.run(run())
    except asyncio.CancelledError:
        echo("interrupted: the open transaction was aborted; run the same command again to continue")
        return EXIT_INTERRUPTED
    except (InputError, ForeignRunError) as exc:
        echo(f"error: {exc}")
        return EXIT_USAGE
    except ProducerFenced:
        echo(
            "error: another producer started publishing the same input (same run id and topic) and took over"
        )
        return EXIT_SERVICE
    except (KafkaError, TimeoutError) as exc:
        echo(unreachable_message(settings.kafka, exc))
        return EXIT_SERVICE
    except OSError as exc:
        echo(f"error: {exc}")
        return EXIT_USAGE
    except KafkagenError as exc:
        echo(f"error: {exc}")
        return EXIT_SERVICE
    finally:
        report.close()
    echo(result.summary())
    if report.count and not args.allow_bad:
        return EXIT_BAD_LINES
    return EXIT_OK
