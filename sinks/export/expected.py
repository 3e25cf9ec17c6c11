"""The ids a run should have produced: from its prompts topic or from the prompt input files.

Input files are resolved, opened and read row by row with :mod:`streams.inputs`
(:func:`streams.inputs.read_rows`: JSON Lines, JSON arrays, Parquet) and parsed with
:mod:`streams.inputs.formats` as the producer does, so the export expects exactly the ids the producer
would publish.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import zstandard

from streams.config import Settings
from streams.errors import ConfigError, InputError
from streams.inputs import MappingOptions, open_input, parse_line, read_rows, resolve_inputs, sampled
from streams.kafka import read_to_end, topic_partitions
from streams.records import PromptRecord, RecordDecodeError, decode
from streams.storage import storage_error

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["Expected", "prompt_ids_from_inputs", "prompt_ids_from_topic"]


@dataclass(frozen=True)
class Expected:
    """The ids the run should have produced and where they came from (``topic:<name>`` or ``file:<path>``)."""

    source: str
    ids: set[str]
    unreadable: int = 0
    """input records whose id could not be read (bad rows, undecodable prompts without a key)."""
    attempts: dict[str, int] = field(default_factory=dict)
    """id → its latest ``attempt`` on the prompts topic, for the ids re-published (attempt > 0)."""
    prompts: dict[str, str] = field(default_factory=dict)
    """sample id → its prompt's id, for the records of a ``--samples`` run (empty otherwise)."""
    per_prompt: int = 1
    """samples wanted per prompt (the most seen)."""


async def prompt_ids_from_topic(settings: Settings, topic: str, *, stall_timeout_s: float = 30.0) -> Expected:
    """Every prompt id on ``topic``: ``read_committed``, from the beginning to the end offsets
    taken at start (:func:`streams.kafka.end_offsets`; later records are ignored), and the latest
    attempt of each re-published one (``kafkagen regenerate``). Undecodable prompts count by their
    key.

    Raises:
        ConfigError: the topic does not exist.
        TimeoutError: no progress for ``stall_timeout_s`` seconds.
        aiokafka.errors.KafkaError: Kafka could not be read.
    """
    if not await topic_partitions(settings.kafka, topic):
        raise ConfigError(
            f"prompts topic {topic!r} does not exist: set --prompts-topic or --input, or --replay-of RUN "
            "when this run replays run RUN's prompts (docs/runs.md)"
        )
    ids: set[str] = set()
    attempts: dict[str, int] = {}
    prompts: dict[str, str] = {}
    per_prompt = 1
    unreadable = 0
    async for records in read_to_end(settings.kafka, topic, stall_timeout_s=stall_timeout_s):
        for rec in records:
            try:
                prompt = decode(rec.value or b"", PromptRecord)
                ids.add(prompt.id)
                if prompt.sample is not None:
                    prompts[prompt.id] = prompt.prompt_id
                    per_prompt = max(per_prompt, prompt.sample + 1)
                if prompt.attempt > attempts.get(prompt.id, 0):
                    attempts[prompt.id] = prompt.attempt
            except RecordDecodeError:
                if rec.key:
                    ids.add(rec.key.decode("utf-8", "replace"))
                else:
                    unreadable += 1
    return Expected(f"topic:{topic}", ids, unreadable, attempts, prompts, per_prompt)


def prompt_ids_from_inputs(
    items: Sequence[str],
    options: MappingOptions,
    s3: Callable[[], S3Client],
    *,
    skip_unreadable: bool = False,
) -> Expected:
    """Every record id of the prompt inputs ``items`` (files, globs, folders (``skip_unreadable``
    as :func:`streams.inputs.resolve_inputs` has it),
    ``-``, ``s3://`` URIs or globs; JSON Lines or JSON arrays, plain, gzip or zstandard; Parquet),
    resolved, opened, read and parsed as the producer does (blank lines skipped; rows the producer
    would reject are counted as ``unreadable``; only the first ``options.limit`` rows when set).

    Raises:
        InputError: an input is missing, matches nothing, is a folder holding files that are
            not prompt files, or cannot be read to its end (I/O error,
            corrupt or truncated compressed data, a broken JSON array, unreadable Parquet).
        StorageError: S3 failed.
    """
    from botocore.exceptions import BotoCoreError, ClientError  # here: a --help imports this module

    ids: set[str] = set()
    prompts: dict[str, str] = {}
    unreadable = 0
    rows_left = options.limit  # --limit: the first rows of the inputs, in order, as the producer reads
    specs = resolve_inputs(items, s3, skip_unreadable=skip_unreadable)
    for spec in specs:
        number = 0
        if rows_left == 0:
            break
        try:
            with open_input(spec, s3) as opened:
                for row in read_rows(opened, source=spec.name, limit=None):
                    if row.text is not None and rows_left is not None:
                        if rows_left == 0:
                            break
                        rows_left -= 1
                    number += 1
                    if row.text is None:
                        continue
                    try:
                        record = parse_line(row.text, source=spec.name, line=number, options=options)
                    except InputError:
                        unreadable += 1
                        continue
                    for sample in sampled(record, options.samples):
                        ids.add(sample.id)
                        if sample.sample is not None:
                            prompts[sample.id] = record.id
        except (ClientError, BotoCoreError) as exc:
            bucket = spec.name.removeprefix("s3://").split("/")[0]
            raise storage_error(exc, f"reading {spec.name}", bucket, name_it=True) from None
        except (OSError, EOFError, zstandard.ZstdError) as exc:
            where = f"after line {number}" if number else "at its start"
            raise InputError(
                f"cannot be read {where}: {type(exc).__name__}: {exc} (a corrupt or truncated file?)",
                source=spec.name,
            ) from None
    return Expected(
        "file:" + ", ".join(s.name for s in specs),
        ids,
        unreadable,
        prompts=prompts,
        per_prompt=options.samples,
    )
