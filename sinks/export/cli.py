"""The export's command line: ``kafkagen export`` (``python -m sinks.export``) ``--run-id RUN --to DIR|s3://bucket/prefix``.

Parses the flags and settings, reads the expected ids (:mod:`sinks.export.expected`), runs
:func:`sinks.export.dataset.export` and prints :func:`sinks.export.manifest.summary`. Exit
statuses: docs/export.md, "Exit status". :mod:`sinks.export.__main__` is the ``python -m`` entry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click
from aiokafka.errors import KafkaError

from sinks.export.dataset import DEFAULT_LIST_CAP, DEFAULT_SHARD_RECORDS, export
from sinks.export.expected import prompt_ids_from_inputs, prompt_ids_from_topic
from sinks.export.formats import FORMATS, REASONING_MODES, ReasoningMode, parse_formats
from sinks.export.manifest import summary
from sinks.export.report import export_report, publish_export_report, regenerations_of
from sinks.export.sources import KEEPS, Keep
from streams.cli import (
    command_settings,
    flag_given,
    input_format_option,
    run_command,
    settings_options,
    skip_unreadable_option,
    template_options,
)
from streams.errors import ConfigError
from streams.inputs import MAX_SAMPLES, FormatName, MappingOptions, prompt_template
from streams.kafka import kafka_unavailable
from streams.runs import naming
from streams.storage import s3_client, storage_error

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["export_command", "main"]


@click.command(
    "export",
    help="Turn run --run-id's S3 objects into a deduplicated, checked dataset with a manifest. Exit "
    "status: 0; 1 when the export failed (gaps, corrupt objects, conflicts, missing ids); 2 on bad "
    "arguments, settings or inputs; 3 when Kafka or S3 cannot be reached.",
)
@click.option("--run", hidden=True, help="the old spelling of --run-id, kept for scripts")
@click.option(
    "--to",
    metavar="DIR|s3://bucket/prefix",
    help="output folder, or s3://bucket/prefix (default: the run's dataset folder <home>/datasets/<run id>, "
    "where kafkagen run exports it; home is the home setting, KAFKAGEN_HOME, default .local)",
)
@click.option(
    "--prompts-topic",
    is_flag=False,
    flag_value="",
    default=None,
    help="compare with this prompts topic (default: the topics.prompts setting; this is the default)",
)
@click.option(
    "--input",
    "inputs",
    multiple=True,
    metavar="INPUT",
    help="compare with the ids of these prompt inputs, read as the producer reads them (files, globs, "
    "'-', s3://bucket/key or glob; plain, .gz or .zst); repeatable, and the arguments after it are "
    "inputs too (--input data/*.jsonl)",
)
@click.argument("more_inputs", nargs=-1, metavar="[INPUT]...")
@input_format_option("the format of the --input files (docs/inputs.md, Row formats)")
@click.option("--prompt-field", help="--input dataset rows: the prompt field")
@click.option("--id-field", help="--input: the field holding record ids")
@click.option(
    "--allow-missing",
    is_flag=True,
    help="publish the dataset and exit 0 even when ids are missing, or re-published (kafkagen regenerate) "
    "and not generated yet; without it such a run is incomplete: what is missing is printed, nothing is "
    "written to --to, and the exit status is 1",
)
@click.option(
    "--no-topic-check",
    is_flag=True,
    help="do not check the objects' offsets against Kafka (only holes between objects are found)",
)
@click.option(
    "--shard-records",
    type=click.IntRange(min=1),
    default=DEFAULT_SHARD_RECORDS,
    show_default=True,
    help="records per dataset shard",
)
@click.option(
    "--list-cap",
    type=click.IntRange(min=0),
    default=DEFAULT_LIST_CAP,
    show_default=True,
    help="ids listed per problem in the manifest (counts are always complete)",
)
@click.option(
    "--keep",
    type=click.Choice(KEEPS),
    default="latest",
    show_default=True,
    help="which record of an id the dataset keeps: latest (the latest attempt: a regeneration replaces "
    "what it regenerated) or best (a completion without quality flags, then a flagged one, then a dead "
    "letter; the latest attempt among equals)",
)
@click.option(
    "--output-format",
    "formats",
    multiple=True,
    metavar="FORMAT",
    help=f"dataset format: {', '.join(FORMATS)} (default jsonl); repeatable or comma-separated "
    "(--output-format jsonl,parquet): all are written from the same records (docs/export.md)",
)
@click.option("--format", "old_format", multiple=True, hidden=True, expose_value=True)
@click.option(
    "--reasoning",
    type=click.Choice(REASONING_MODES),
    default="field",
    show_default=True,
    help="--output-format chat: the reasoning in the assistant message's reasoning_content (field), before "
    "the answer in <think>...</think> (inline), or left out (drop)",
)
@skip_unreadable_option()
@template_options()
@click.option(
    "--samples",
    type=click.IntRange(1, MAX_SAMPLES),
    default=1,
    show_default=True,
    help="--input: the run's --samples (completions per prompt)",
)
@settings_options("run_id", "replay_of", log_default="warning")
@click.pass_context
def export_command(
    ctx: click.Context,
    run: str | None,
    to: str | None,
    prompts_topic: str | None,
    inputs: tuple[str, ...],
    more_inputs: tuple[str, ...],
    format_: str,
    prompt_field: str | None,
    id_field: str | None,
    allow_missing: bool,
    no_topic_check: bool,
    shard_records: int,
    list_cap: int,
    keep: Keep,
    formats: tuple[str, ...],
    old_format: tuple[str, ...],
    reasoning: ReasoningMode,
    skip_unreadable: bool,
    template: str | None,
    system_template: str | None,
    samples: int,
) -> int:
    from botocore.exceptions import BotoCoreError, ClientError  # here: --help answers without boto3

    if old_format:  # its old name, refused: the input side's --format now means --input-format
        raise click.UsageError(
            f"--format {old_format[0]}: export's dataset format is --output-format (--output-format "
            f"{old_format[0]}); the format of --input files is --input-format"
        )
    try:
        formats = parse_formats(formats)
    except ValueError as exc:
        hint = (
            " (the format of --input files is --input-format)"
            if any(v in {f.value for f in FormatName} for f in formats for v in f.split(","))
            else ""
        )
        raise click.BadParameter(f"{exc}{hint}", param_hint="--output-format") from None
    logging.getLogger("aiokafka.consumer.fetcher").setLevel(logging.CRITICAL)
    if more_inputs and not inputs:
        raise click.UsageError(f"unexpected argument {more_inputs[0]!r}: inputs follow --input")
    inputs = (*inputs, *more_inputs)
    if prompts_topic is not None and inputs:
        raise click.UsageError("--prompts-topic and --input are alternatives: give one")
    settings = command_settings(ctx)
    if run is not None and run != settings.run_id:
        if flag_given(ctx, "run_id"):
            raise click.UsageError(f"--run {run} is the old spelling of --run-id {settings.run_id}: give one")
        try:  # the run's own names: <run>.prompts ... unless set explicitly (streams.runs.naming)
            settings = naming.for_run(settings, run)
        except ValueError as exc:
            raise ConfigError(f"--run-id: {exc}") from None
    to = to or str(naming.dataset_folder(settings.home, settings.run_id))  # the run id is checked
    try:
        if inputs:
            options = MappingOptions(
                format=FormatName(format_),
                prompt_field=prompt_field,
                id_field=id_field,
                template=prompt_template(template, system_template),
                samples=samples,
            )
            clients: list[S3Client] = []

            def s3() -> S3Client:
                if not clients:
                    clients.append(s3_client(settings.s3))
                return clients[0]

            expected = prompt_ids_from_inputs(list(inputs), options, s3, skip_unreadable=skip_unreadable)
        else:
            topic = prompts_topic or settings.topics.prompts
            expected = asyncio.run(prompt_ids_from_topic(settings, topic))
        result = export(
            settings,
            settings.run_id,
            to,
            expected=expected,
            allow_missing=allow_missing,
            shard_records=shard_records,
            list_cap=list_cap,
            check_topics=not no_topic_check,
            keep=keep,
            regenerations=None if no_topic_check else asyncio.run(regenerations_of(settings)),
            formats=formats,
            reasoning=reasoning,
        )
    except (ClientError, BotoCoreError) as exc:
        raise storage_error(exc, f"at {settings.s3.endpoint_url}", settings.s3.bucket, name_it=True) from None
    except (KafkaError, TimeoutError) as exc:
        raise kafka_unavailable(settings.kafka, exc) from None
    print(summary(result.manifest))
    if result.exit_status == 0 and not no_topic_check:  # --no-topic-check: Kafka is not used
        report = export_report(settings.run_id, result.manifest, to)
        asyncio.run(publish_export_report(settings, report))
    return result.exit_status


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m sinks.export") -> int:
    """Run the export on ``argv`` (``None``: the process arguments); returns the exit status."""
    return run_command(export_command, argv, prog=prog)
