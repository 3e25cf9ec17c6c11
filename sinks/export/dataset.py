"""The export itself: one run's S3 objects → a deduplicated, checked dataset and its manifest.

Two passes over the objects: the first (:mod:`sinks.export.index`) finds each id's winner, the
second writes the winners in every requested format (:mod:`sinks.export.formats`) to shards
(:mod:`sinks.export.destination`); then the coverage check (:mod:`sinks.export.coverage`), the
manifest (:mod:`sinks.export.manifest`) and the publication, or the rejection
(:class:`sinks.export.destination.Destination`). A run found incomplete after the first pass (ids
missing, or re-published and not generated yet) is not published: the second pass only counts, and
nothing is written to the destination (docs/export.md, "An incomplete run"). Memory and the second
pass's failed reads: docs/export.md, "Memory: two passes".
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from sinks.export.coverage import overlaps, s3_only_gaps, spans, topic_coverage
from sinks.export.destination import MANIFEST_NAME, Destination, parse_target
from sinks.export.expected import Expected
from sinks.export.formats import SHARD_NAME, FormatOptions, Output, ReasoningMode, open_outputs, parse_formats
from sinks.export.formats.card import CARD_NAME, card, is_ours
from sinks.export.index import IdIndex
from sinks.export.manifest import Tally, build_manifest, missing_and_pending
from sinks.export.sources import Keep, Source, list_sources, read_object
from sinks.layout import run_prefix
from streams.config import Settings
from streams.errors import ConfigError, LayoutError
from streams.records import CompletionRecord, ErrorRecord, decode
from streams.storage import s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["DEFAULT_LIST_CAP", "DEFAULT_SHARD_RECORDS", "ExportResult", "export"]

log = logging.getLogger("kafkagen.export")

DEFAULT_SHARD_RECORDS: Final = 100_000
DEFAULT_LIST_CAP: Final = 1000


@dataclass
class ExportResult:
    """What :func:`export` wrote: the manifest (as written) and the exit status it implies."""

    manifest: dict[str, Any]
    exit_status: int


def _ours(name: str, head: bytes) -> bool:
    """Whether the file ``name`` (starting with ``head``) of a destination is an export's: a shard
    of any format, the manifest, or a dataset card with the marker."""
    if name == CARD_NAME:
        return is_ours(head)
    return name == MANIFEST_NAME or SHARD_NAME.match(name) is not None


def export(
    settings: Settings,
    run_id: str,
    to: str,
    *,
    expected: Expected | None,
    allow_missing: bool = False,
    shard_records: int = DEFAULT_SHARD_RECORDS,
    list_cap: int = DEFAULT_LIST_CAP,
    check_topics: bool = True,
    keep: Keep = "latest",
    regenerations: list[dict[str, Any]] | None = None,
    formats: tuple[str, ...] = ("jsonl",),
    reasoning: ReasoningMode = "field",
) -> ExportResult:
    """Export run ``run_id`` from ``settings.s3`` to ``to`` (a folder or ``s3://bucket/prefix``).

    Args:
        expected: the ids the run should have (``None``: not compared).
        allow_missing: missing ids do not fail the export.
        shard_records: records per shard file.
        list_cap: ids and items listed in the manifest per kind.
        check_topics: check the objects' coverage against Kafka (:mod:`sinks.export.coverage`).
        keep: which record of an id is kept (:data:`sinks.export.sources.Keep`).
        regenerations: the run's ``kafkagen regenerate`` commands (``RegenerateRecord`` as dicts),
            listed in the manifest with the attempts.
        formats: the dataset formats to write (:data:`sinks.export.formats.FORMATS`), each from the
            same winners.
        reasoning: where the ``chat`` format puts the reasoning (:mod:`sinks.export.formats.chat`).

    Returns:
        the manifest and the exit status (0, or 1 when the export failed: docs/export.md, "Exit status").
        An incomplete run (ids missing or pending, without ``allow_missing``) writes nothing to
        ``to``: its manifest (not written either) has ``_unpublished``, the destination it left as
        it was. A failed export over a dataset whose manifest says ``ok`` leaves that dataset in
        place; its own manifest then has ``_rejected`` (where it was kept, and the previous one's
        counts).

    Raises:
        ConfigError: a malformed destination or run id, an unknown format.
        botocore.exceptions.ClientError, BotoCoreError: S3 failed (after botocore's retries).
        aiokafka.errors.KafkaError, TimeoutError: Kafka could not be read (``check_topics``).
        OSError: a local destination could not be written (the dataset in place is untouched).
    """
    try:
        formats = parse_formats(formats)
    except ValueError as exc:
        raise ConfigError(f"--output-format: {exc}") from None
    to_bucket, to_prefix, to_folder = parse_target(to)  # a malformed --to before anything is read
    client = s3_client(settings.s3)
    bucket = settings.s3.bucket
    try:
        folder = run_prefix(settings.s3.prefix, run_id)
    except LayoutError as exc:
        raise ConfigError(str(exc)) from None
    sources = sorted(
        list_sources(client, bucket, folder),
        key=lambda s: (s.parsed.topic, s.parsed.partition, s.parsed.start_offset),
    )

    # Pass 1: the winning line of every id; prompt conflicts; records of other runs.
    index = IdIndex(run_id, list_cap, keep)
    for source in sources:
        for line, head in read_object(client, bucket, source):
            index.add(line, head)
    index.end_of_pass()

    def manifest_of(tally: Tally, shards: list[dict[str, Any]]) -> dict[str, Any]:
        """The coverage check (against Kafka with ``check_topics``), then the manifest over the
        second pass's ``tally`` and the ``shards`` it wrote."""
        found = spans(sources)
        coverage_problems: list[str] = []
        if check_topics:
            topics = {t for t, _ in found} | {settings.topics.completions, settings.topics.errors}
            gaps, coverage_problems = asyncio.run(topic_coverage(settings, found, topics))
        else:
            gaps = s3_only_gaps(found)
        return build_manifest(
            run_id=run_id,
            source_uri=f"s3://{bucket}/{folder}",
            sources=sources,
            index=index,
            tally=tally,
            expected=expected,
            allow_missing=allow_missing,
            checked_against_kafka=check_topics,
            gaps=gaps,
            coverage_problems=coverage_problems,
            overlaps=overlaps(found),
            shards=shards,
            list_cap=list_cap,
            keep=keep,
            regenerations=regenerations or [],
            formats={"formats": list(formats), "reasoning": reasoning if "chat" in formats else None},
            card=CARD_NAME if "parquet" in formats else None,
        )

    missing, pending = missing_and_pending(expected, index, index.present)
    if (missing or pending) and not allow_missing:
        # An incomplete run is not published: nothing is written to `to`, so nothing there can be
        # taken for a dataset; the second pass only counts what the dataset would hold.
        tally = Tally()
        _second_pass(client, bucket, sources, index, tally, [])
        manifest = manifest_of(tally, [])
        manifest["_unpublished"] = (
            str(to_folder) if to_folder is not None else f"s3://{to_bucket}/{to_prefix}"
        )
        return ExportResult(manifest, 1)

    # Pass 2: write the winners, with statistics over them.
    dest = Destination(to, client, _ours)
    tally = Tally()
    try:
        outputs = open_outputs(
            formats, dest, shard_records, FormatOptions(run_id=run_id, reasoning=reasoning)
        )
        _second_pass(client, bucket, sources, index, tally, outputs)
        for out in outputs:
            out.close()
        manifest = manifest_of(tally, [entry for out in outputs for entry in out.written])
        names = [CARD_NAME] if manifest["card"] is not None else []
        if names:
            dest.path(CARD_NAME).write_text(card(manifest))
        dest.path(MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        previous = dest.previous_manifest()
        if not manifest["ok"] and previous is not None and previous.get("ok") is True:
            manifest["_rejected"] = {
                "kept_at": dest.reject(),
                "previous": dest.where(MANIFEST_NAME),
                "previous_ids": previous.get("records", {}).get("ids"),
                "previous_created_at": previous.get("created_at"),
            }
            return ExportResult(manifest, 1)
        dest.commit([*names, MANIFEST_NAME])
        manifest["_where"] = dest.where(MANIFEST_NAME)
        return ExportResult(manifest, 0 if manifest["ok"] else 1)
    finally:
        dest.close()


def _second_pass(
    client: S3Client, bucket: str, sources: list[Source], index: IdIndex, tally: Tally, outputs: list[Output]
) -> None:
    """Read the objects again and hand each id's winner to every output (none: only counted in
    ``tally``). An object that fails to read leaves its winners in ``index.unwritten``."""
    for source in sources:
        if source.problem is not None:
            continue
        for line, head in read_object(client, bucket, source):
            if not index.take_winner(line, head):
                continue
            value = bytes(line.value)
            if line.kind == "completion":
                completion = decode(value, CompletionRecord)
                tally.completion(completion, head.attempt)
                for out in outputs:
                    out.completion(value, completion)
            else:
                error = decode(value, ErrorRecord)
                tally.error(error, head.attempt)
                for out in outputs:
                    out.error(value, error)
