"""The export's command line: ``python -m sinks.export --run RUN --to DIR|s3://bucket/prefix``.

Parses the flags and settings, reads the expected ids (:mod:`sinks.export.expected`), runs
:func:`sinks.export.dataset.export` and prints :func:`sinks.export.manifest.summary`. Exit
statuses: :mod:`sinks.export`. :mod:`sinks.export.__main__` is the ``python -m`` entry.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiokafka.errors import KafkaError
from botocore.exceptions import BotoCoreError, ClientError

from sinks.export.dataset import DEFAULT_LIST_CAP, DEFAULT_SHARD_RECORDS, export
from sinks.export.expected import prompt_ids_from_inputs, prompt_ids_from_topic
from sinks.export.manifest import summary
from streams import naming
from streams.config import Settings, load_settings
from streams.errors import ConfigError, KafkagenError, StorageError
from streams.inputs import FormatName, MappingOptions
from streams.kafka import unreachable_message
from streams.storage import s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sinks.export --run RUN --to DIR|s3://bucket/prefix [--prompts-topic [T] | --input
    INPUT ...] [--allow-missing] [--no-topic-check]`` plus any settings flag (``--s3.prefix``,
    ``--kafka.bootstrap-servers``...). Returns the exit status (:mod:`sinks.export`): 0; 1 when
    the export failed; 2 on bad arguments, settings or inputs; 3 when Kafka or S3 cannot be reached."""
    parser = argparse.ArgumentParser(
        prog="python -m sinks.export",
        description="Turn a run's S3 objects into a deduplicated, checked dataset with a manifest.",
        epilog="Settings (S3 location, Kafka) are flags too, e.g. --s3.prefix runs "
        "(see `python -m sinks.export --settings-help`).",
    )
    parser.add_argument(
        "--run",
        required=False,
        help="the run id to export (default: the run_id setting, i.e. --run-id); its topics derive from it "
        "(docs/runs.md)",
    )
    parser.add_argument("--to", required=False, help="output folder, or s3://bucket/prefix")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--prompts-topic",
        nargs="?",
        const="",
        help="compare with this prompts topic (default: the topics.prompts setting; this is the default)",
    )
    source.add_argument(
        "--input",
        nargs="+",
        metavar="INPUT",
        help="compare with the ids of these prompt inputs, read as the producer reads them "
        "(files, globs, '-', s3://bucket/key or glob; plain, .gz or .zst)",
    )
    parser.add_argument("--format", default="auto", help="--input format (streams.inputs.formats names)")
    parser.add_argument("--prompt-field", help="--input dataset rows: the prompt field")
    parser.add_argument("--id-field", help="--input: the field holding record ids")
    parser.add_argument("--allow-missing", action="store_true", help="exit 0 even when ids are missing")
    parser.add_argument(
        "--no-topic-check",
        action="store_true",
        help="do not check the objects' offsets against Kafka (only holes between objects are found)",
    )
    parser.add_argument("--shard-records", type=int, default=DEFAULT_SHARD_RECORDS, help="records per shard")
    parser.add_argument("--list-cap", type=int, default=DEFAULT_LIST_CAP, help="ids listed in the manifest")
    parser.add_argument("--settings-help", action="store_true", help="list every settings flag")
    args, rest = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(Settings, ["--help"] if args.settings_help else rest, prog=parser.prog)
    except KafkagenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        if not args.to:
            parser.error("--to is required")
        if args.shard_records <= 0 or args.list_cap < 0:
            parser.error("--shard-records must be positive and --list-cap not negative")
        if args.run and args.run != settings.run_id:
            try:  # the run's own names: <run>.prompts ... unless set explicitly (streams.naming)
                settings = naming.for_run(settings, args.run)
            except ValueError as exc:
                raise ConfigError(f"--run: {exc}") from None
        run_id = settings.run_id
        if args.input is not None:
            try:
                fmt = FormatName(args.format)
            except ValueError:
                raise ConfigError(f"unknown --format {args.format!r}") from None
            options = MappingOptions(format=fmt, prompt_field=args.prompt_field, id_field=args.id_field)
            clients: list[S3Client] = []

            def s3() -> S3Client:
                if not clients:
                    clients.append(s3_client(settings.s3))
                return clients[0]

            expected = prompt_ids_from_inputs(args.input, options, s3)
        else:
            topic = args.prompts_topic or settings.topics.prompts
            expected = asyncio.run(prompt_ids_from_topic(settings, topic))
        result = export(
            settings,
            run_id,
            args.to,
            expected=expected,
            allow_missing=args.allow_missing,
            shard_records=args.shard_records,
            list_cap=args.list_cap,
            check_topics=not args.no_topic_check,
        )
    except StorageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except (KafkagenError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ClientError, BotoCoreError) as exc:
        print(f"error: S3 at {settings.s3.endpoint_url}: {exc}", file=sys.stderr)
        return 3
    except (KafkaError, TimeoutError) as exc:
        print(unreachable_message(settings.kafka, exc), file=sys.stderr)
        return 3
    print(summary(result.manifest))
    return result.exit_status
