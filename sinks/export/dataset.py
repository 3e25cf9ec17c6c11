"""The export itself: one run's S3 objects → a deduplicated, checked dataset and its manifest.

Two passes over the objects keep memory to the id index (about 300 bytes per id,
:mod:`sinks.export.index`) plus one object: the first finds each id's winner, the second writes
the winners to shards (:mod:`sinks.export.destination`), streamed to disk (uploaded per shard for
an ``s3://`` destination). Then the coverage is checked (:mod:`sinks.export.coverage`), the
manifest written (:mod:`sinks.export.manifest`) and stale shards of an earlier export removed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Final

from sinks.export.coverage import overlaps, s3_only_gaps, spans, topic_coverage
from sinks.export.destination import Destination, Shards
from sinks.export.expected import Expected
from sinks.export.index import IdIndex
from sinks.export.manifest import Tally, build_manifest
from sinks.export.sources import Keep, list_sources, read_object
from sinks.layout import run_prefix
from streams.config import Settings
from streams.errors import ConfigError, LayoutError
from streams.records import CompletionRecord, ErrorRecord, decode
from streams.storage import s3_client

__all__ = ["DEFAULT_LIST_CAP", "DEFAULT_SHARD_RECORDS", "ExportResult", "export"]

log = logging.getLogger("kafkagen.export")

DEFAULT_SHARD_RECORDS: Final = 100_000
DEFAULT_LIST_CAP: Final = 1000


@dataclass
class ExportResult:
    """What :func:`export` wrote: the manifest (as written) and the exit status it implies."""

    manifest: dict[str, Any]
    exit_status: int


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

    Returns:
        the manifest and the exit status (0, or 1 when the export failed: :mod:`sinks.export`).

    Raises:
        ConfigError: a malformed destination or run id.
        botocore.exceptions.ClientError, BotoCoreError: S3 failed (after botocore's retries).
        aiokafka.errors.KafkaError, TimeoutError: Kafka could not be read (``check_topics``).
    """
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

    # Pass 2: write the winners, with statistics over them.
    dest = Destination(to, client)
    shards = {kind: Shards(dest, kind, shard_records) for kind in ("completions", "errors")}
    tally = Tally()
    try:
        for source in sources:
            if source.problem is not None:
                continue
            for line, head in read_object(client, bucket, source):
                if not index.take_winner(line, head):
                    continue
                value = bytes(line.value)
                if line.kind == "completion":
                    tally.completion(decode(value, CompletionRecord), head.attempt)
                    shards["completions"].add(value)
                else:
                    tally.error(decode(value, ErrorRecord), head.attempt)
                    shards["errors"].add(value)
        for s in shards.values():
            s.close()

        found = spans(sources)
        coverage_problems: list[str] = []
        if check_topics:
            topics = {t for t, _ in found} | {settings.topics.completions, settings.topics.errors}
            gaps, coverage_problems = asyncio.run(topic_coverage(settings, found, topics))
        else:
            gaps = s3_only_gaps(found)
        manifest = build_manifest(
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
            shards=[entry for s in shards.values() for entry in s.written],
            list_cap=list_cap,
            keep=keep,
            regenerations=regenerations or [],
        )
        (dest.path("manifest.json")).write_text(json.dumps(manifest, indent=2) + "\n")
        dest.publish("manifest.json")
        listed = {entry["path"] for entry in manifest["shards"]}
        for stale in sorted(dest.shard_names() - listed):
            dest.remove(stale)
            log.info("removed %s: a shard of an earlier export", dest.where(stale))
        manifest["_where"] = dest.where("manifest.json")
        return ExportResult(manifest, 0 if manifest["ok"] else 1)
    finally:
        dest.close()
