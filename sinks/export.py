"""The dataset export: ``python -m sinks.export --run RUN --to DIR|s3://bucket/prefix``.

Reads every object the sink wrote for a run (:mod:`sinks.layout`), checks each against its
metadata (SHA-256 of the body, record count, line offsets) and the objects of each partition
against the topic (offset gaps and overlaps, see *Coverage*), deduplicates by record id, compares
the ids with the expected ones, and writes the dataset:

* ``completions-00000.jsonl.zst`` ...: one :class:`~streams.records.CompletionRecord` per line
  (the bytes as produced), ``--shard-records`` per shard;
* ``errors-00000.jsonl.zst`` ...: the :class:`~streams.records.ErrorRecord` of each id whose
  winning record is an error (dead letters, and records the sink could not decode);
* ``manifest.json``: run id, creation time, counts by ``finish_reason``, by quality flag and by
  ``attempt``, token totals, duplicate counts, conflicts, foreign records, expected/missing/
  unexpected ids (lists capped by ``--list-cap``), per-shard record counts and SHA-256 (of the
  shard file as stored), and what was checked in the source objects.

Deduplication
    Records of other runs are left out first (*Foreign records*). Per id, the record of the latest
    ``attempt`` wins (a re-published prompt's new generation replaces the old one); within an
    attempt a completion beats an error; then the earliest Kafka offset wins (then topic,
    partition, for a deterministic order). Records of one id whose
    prompts differ (:func:`streams.records.prompt_identity`: messages, tools and params) are a
    *conflict*: two different prompts share the id. Each is reported with both sources
    (topic/partition/offset and attempt) and the export fails; a winner is still written.

Expected ids
    From the prompts topic (default; read ``read_committed`` from the beginning up to the end
    offsets taken at start) or from input files (``--input``, any number: files, globs, ``-``,
    ``s3://`` URIs and globs, plain, gzip or zstandard, opened with :mod:`streams.inputs` and
    parsed with :mod:`producers.formats` as the producer does). An input that cannot be read
    (missing, corrupt compressed data) is an error (exit 2). An id is *missing* when it has no
    record.

Coverage
    Per partition of every topic in the run folder (and of the configured completions and
    errors topics), the objects must cover the topic's offsets from its first offset still in
    Kafka to its end offset (``read_committed``, i.e. the last stable offset): before the first
    object, between objects and after the last. A hole in offsets is only a *gap* when Kafka
    holds a committed record in it: offsets of transaction markers and aborted records have no
    record (the completions and errors topics are written by an idempotent, non-transactional
    producer, so they have none, but the check does not rely on it); a hole below the partition's
    first offset in Kafka cannot be checked and counts as a gap. ``--no-topic-check`` skips
    Kafka: every hole between objects is then a gap.

Foreign records
    A record in the run's folder whose ``run_id`` is set and is not the run's belongs to another
    run (a prompts topic or folder shared by two runs, ``docs/runs.md``): it is left out of the
    dataset (it neither wins nor conflicts nor counts as present), counted in the manifest
    (``foreign``: count, per run, the first ``--list-cap`` with their sources) and fails the export.

Unreadable or corrupt source objects, gaps, conflicts and foreign records are printed (one line
each, the first 20) and listed in the manifest, and fail the export.

Destination
    Shards are written to a staging folder (inside a local destination; a temporary folder for
    ``s3://``), moved or uploaded into place, then ``manifest.json``; finally files of the
    destination named like this export's shards (``completions-NNNNN.jsonl.zst``,
    ``errors-NNNNN.jsonl.zst``) that the new manifest does not list are deleted, so re-exporting
    into the same folder leaves no stale shard of an earlier export.

Two passes over the objects keep memory to the id index (about 300 bytes per id) plus one
object; shards are streamed to disk (uploaded per shard for an ``s3://`` destination).

Exit status: 0; 1 when ids are missing (unless ``--allow-missing``), a source object is corrupt
or unreadable, offsets are not covered, ids conflict, or records of another run are in the
folder; 2 on bad arguments, settings or inputs;
3 when Kafka or S3 cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec
import zstandard
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from botocore.exceptions import BotoCoreError, ClientError

from sinks.layout import (
    LayoutError,
    Line,
    ObjectKey,
    ObjectMeta,
    decode_line,
    iter_body_lines,
    parse_key,
    run_prefix,
)
from streams import naming
from streams.config import Settings, load_settings
from streams.errors import ConfigError, InputError, KafkagenError, StorageError
from streams.inputs import FormatName, MappingOptions, open_input, parse_line, resolve_inputs
from streams.kafka import client_kwargs, consumer_kwargs, unreachable_message
from streams.records import (
    CompletionRecord,
    ErrorRecord,
    PromptRecord,
    RecordDecodeError,
    decode,
    prompt_identity,
)
from streams.storage import s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger("kafkagen.export")

DEFAULT_SHARD_RECORDS: Final = 100_000
DEFAULT_LIST_CAP: Final = 1000
SHOWN: Final = 20
"""Problems of each kind printed on the terminal (all are in the manifest, up to ``--list-cap``)."""
SHARD_NAME: Final = re.compile(r"^(completions|errors)-\d{5}\.jsonl\.zst$")
"""Names of the files this export writes besides ``manifest.json``."""
STAGE_PREFIX: Final = ".kafkagen-export-"


class _Head(msgspec.Struct):
    """The fields of a completion or error record the first pass needs."""

    id: str
    attempt: int = 0
    prompt: PromptRecord | None = None
    run_id: str | None = None


def _foreign(head: _Head, run_id: str) -> bool:
    """Whether the record belongs to another run than ``run_id`` (its ``run_id`` is set and differs)."""
    return head.run_id is not None and head.run_id != run_id


_head_decoder: Final = msgspec.json.Decoder(_Head)

_Rank = tuple[int, int, int, str, int]
"""(-attempt, 0 completion | 1 error, offset, topic, partition): the smallest wins."""

_Origin = tuple[bytes, str, int, int, int]
"""(prompt identity digest, topic, partition, offset, attempt) of an id's first record with a prompt."""


@dataclass(frozen=True)
class Expected:
    """The ids the run should have produced and where they came from (``topic:<name>`` or ``file:<path>``)."""

    source: str
    ids: set[str]
    unreadable: int = 0
    """input records whose id could not be read (bad rows, undecodable prompts without a key)."""


@dataclass
class _Source:
    key: str
    parsed: ObjectKey
    meta: ObjectMeta | None
    problem: str | None = None


@dataclass
class ExportResult:
    """What :func:`export` wrote: the manifest (as written) and the exit status it implies."""

    manifest: dict[str, Any]
    exit_status: int


# -- expected ids --------------------------------------------------------------------------------


async def prompt_ids_from_topic(settings: Settings, topic: str, *, stall_timeout_s: float = 30.0) -> Expected:
    """Every prompt id on ``topic``: ``read_committed``, from the beginning to the end offsets
    taken at start (later records are ignored). Undecodable prompts count by their key.

    Raises:
        ConfigError: the topic does not exist.
        TimeoutError: no progress for ``stall_timeout_s`` seconds.
    """
    partitions = (await _partitions(settings, [topic])).get(topic)
    if not partitions:
        raise ConfigError(
            f"prompts topic {topic!r} does not exist: set --prompts-topic or --input, or --replay-of RUN "
            "when this run replays run RUN's prompts (docs/runs.md)"
        )
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        ids: set[str] = set()
        unreadable = 0
        last_progress = time.monotonic()
        while True:
            behind = [tp for tp in tps if await consumer.position(tp) < ends[tp]]
            if not behind:
                break
            batch = await consumer.getmany(*behind, timeout_ms=500)
            if batch:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise TimeoutError(f"reading {topic}: no progress for {stall_timeout_s:.0f} s")
            for tp, records in batch.items():
                for rec in records:
                    if rec.offset >= ends[tp]:
                        continue
                    try:
                        ids.add(decode(rec.value or b"", PromptRecord).id)
                    except RecordDecodeError:
                        if rec.key:
                            ids.add(rec.key.decode("utf-8", "replace"))
                        else:
                            unreadable += 1
        return Expected(f"topic:{topic}", ids, unreadable)
    finally:
        await consumer.stop()


def prompt_ids_from_inputs(
    items: Sequence[str], options: MappingOptions, s3: Callable[[], S3Client]
) -> Expected:
    """Every record id of the prompt inputs ``items`` (files, globs, ``-``, ``s3://`` URIs or
    globs; plain, gzip or zstandard), resolved, opened and parsed as the producer does (blank lines
    skipped; rows the producer would reject are counted as ``unreadable``).

    Raises:
        InputError: an input is missing, matches nothing, or cannot be read to its end (I/O error,
            corrupt or truncated compressed data).
        StorageError: S3 failed.
    """
    ids: set[str] = set()
    unreadable = 0
    specs = resolve_inputs(items, s3)
    for spec in specs:
        number = 0
        try:
            with open_input(spec, s3) as opened:
                while raw := opened.lines.readline():
                    number += 1
                    if not raw.strip():
                        continue
                    try:
                        ids.add(parse_line(raw, source=spec.name, line=number, options=options).id)
                    except InputError:
                        unreadable += 1
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"{spec.name}: reading from S3 failed: {exc}") from None
        except (OSError, EOFError, zstandard.ZstdError) as exc:
            where = f"after line {number}" if number else "at its start"
            raise InputError(
                f"cannot be read {where}: {type(exc).__name__}: {exc} (a corrupt or truncated file?)",
                source=spec.name,
            ) from None
    return Expected("file:" + ", ".join(s.name for s in specs), ids, unreadable)


# -- output --------------------------------------------------------------------------------------


class _Destination:
    """A local folder, or ``s3://bucket/prefix``. Files are written to a staging folder (inside
    a local destination, so a move is a rename) and put in place by :meth:`publish`."""

    def __init__(self, target: str, client: S3Client | None) -> None:
        self.target = target
        if target.startswith("s3://"):
            bucket, _, prefix = target.removeprefix("s3://").partition("/")
            if not bucket:
                raise ConfigError(f"--to {target!r}: expected s3://bucket/prefix")
            self.bucket: str | None = bucket
            self.prefix = prefix.strip("/")
            self.folder: Path | None = None
            self.stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX))
            self.client = client
        else:
            self.bucket = None
            self.prefix = ""
            self.folder = Path(target)
            self.folder.mkdir(parents=True, exist_ok=True)
            self.stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=self.folder))
            self.client = None

    def path(self, name: str) -> Path:
        """Where to write ``name`` before :meth:`publish`."""
        return self.stage / name

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def where(self, name: str) -> str:
        if self.folder is not None:
            return str(self.folder / name)
        return f"s3://{self.bucket}/{self._key(name)}"

    def publish(self, name: str) -> None:
        """Put a staged file in place (a rename, or an upload for S3)."""
        if self.folder is not None:
            os.replace(self.stage / name, self.folder / name)
            return
        assert self.bucket is not None and self.client is not None
        self.client.upload_file(str(self.stage / name), self.bucket, self._key(name))
        (self.stage / name).unlink()

    def shard_names(self) -> set[str]:
        """Names of the files in place that are named like this export's shards."""
        if self.folder is not None:
            return {p.name for p in self.folder.iterdir() if SHARD_NAME.match(p.name)}
        assert self.bucket is not None and self.client is not None
        found: set[str] = set()
        base = f"{self.prefix}/" if self.prefix else ""
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=base, Delimiter="/"
        ):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(base) :]
                if SHARD_NAME.match(name):
                    found.add(name)
        return found

    def remove(self, name: str) -> None:
        """Delete a file in place (a stale shard)."""
        if self.folder is not None:
            (self.folder / name).unlink(missing_ok=True)
        else:
            assert self.bucket is not None and self.client is not None
            self.client.delete_object(Bucket=self.bucket, Key=self._key(name))

    def close(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)


@dataclass
class _Shards:
    """Writes ``<kind>-NNNNN.jsonl.zst`` files of at most ``per_shard`` lines."""

    dest: _Destination
    kind: str
    per_shard: int
    level: int = 3
    written: list[dict[str, Any]] = field(default_factory=list)
    _file: Any = None
    _writer: Any = None
    _name: str = ""
    _count: int = 0

    def add(self, value: bytes) -> None:
        if self._writer is None:
            self._name = f"{self.kind}-{len(self.written):05d}.jsonl.zst"
            self._file = self.dest.path(self._name).open("wb")
            self._writer = zstandard.ZstdCompressor(level=self.level).stream_writer(self._file, closefd=False)
            self._count = 0
        self._writer.write(value + b"\n")
        self._count += 1
        if self._count >= self.per_shard:
            self.close()

    def close(self) -> None:
        if self._writer is None:
            return
        self._writer.flush(zstandard.FLUSH_FRAME)
        self._writer.close()
        self._file.close()
        path = self.dest.path(self._name)
        sha = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                sha.update(chunk)
        entry = {
            "path": self._name,
            "kind": self.kind,
            "records": self._count,
            "bytes": path.stat().st_size,
            "sha256": sha.hexdigest(),
        }
        self.dest.publish(self._name)
        self.written.append(entry)
        self._writer = self._file = None


# -- reading the run's objects -------------------------------------------------------------------


def _list_sources(client: S3Client, bucket: str, prefix: str) -> Iterator[_Source]:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            try:
                parsed = parse_key(obj["Key"])
            except LayoutError as exc:
                log.warning("skipping %s: %s", obj["Key"], exc)
                continue
            yield _Source(obj["Key"], parsed, None)


def _read_object(client: S3Client, bucket: str, source: _Source) -> list[tuple[Line, _Head]]:
    """The object's lines with the head of each record, after checking the body against the
    metadata (SHA-256, count), each line's topic, partition and offset against the key and the
    metadata, and that every record has an id. Never raises for a bad object: it sets
    ``source.problem`` and returns no lines (a corrupt object contributes nothing)."""
    try:
        resp = client.get_object(Bucket=bucket, Key=source.key)
        body = resp["Body"].read()
    except (ClientError, BotoCoreError) as exc:
        source.problem = f"unreadable: {exc}"
        return []
    try:
        meta = ObjectMeta.from_s3(resp.get("Metadata", {}))
        source.meta = meta
        raws = list(iter_body_lines(body))
        digest = hashlib.sha256(b"".join(raws)).hexdigest()
        if digest != meta.sha256:
            raise LayoutError(f"SHA-256 of the body is {digest}, metadata says {meta.sha256}")
        if len(raws) != meta.record_count:
            raise LayoutError(f"{len(raws)} lines, metadata says {meta.record_count}")
        out: list[tuple[Line, _Head]] = []
        previous = -1
        parsed = source.parsed
        for number, raw in enumerate(raws, start=1):
            try:
                line = decode_line(raw)
                head = _head_decoder.decode(line.value)
            except (LayoutError, msgspec.DecodeError) as exc:
                raise LayoutError(f"line {number}: {exc}") from None
            if (line.topic, line.partition) != (parsed.topic, parsed.partition):
                raise LayoutError(
                    f"line {number}: a record of {line.topic}-{line.partition} in the object of "
                    f"{parsed.topic}-{parsed.partition}"
                )
            if not meta.start_offset <= line.offset <= meta.end_offset or line.offset <= previous:
                raise LayoutError(
                    f"line {number}: offset {line.offset} is out of order or outside "
                    f"{meta.start_offset}..{meta.end_offset}"
                )
            previous = line.offset
            out.append((line, head))
        if out and out[0][0].offset != meta.start_offset:
            raise LayoutError(f"first line has offset {out[0][0].offset}, metadata says {meta.start_offset}")
        return out
    except LayoutError as exc:
        source.problem = str(exc)
        return []


def _rank(kind: str, attempt: int, offset: int, topic: str, partition: int) -> _Rank:
    return (-attempt, 0 if kind == "completion" else 1, offset, topic, partition)


def _where(topic: str, partition: int, offset: int, attempt: int) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "offset": offset, "attempt": attempt}


# -- coverage ------------------------------------------------------------------------------------

_Spans = dict[tuple[str, int], list[tuple[int, int]]]
"""(topic, partition) → sorted (start, end) offsets of its objects, inclusive."""


def _spans(sources: list[_Source]) -> _Spans:
    spans: _Spans = {}
    for s in sources:
        if s.meta is not None:
            spans.setdefault((s.parsed.topic, s.parsed.partition), []).append(
                (s.meta.start_offset, s.meta.end_offset)
            )
    for found in spans.values():
        found.sort()
    return spans


def _holes(spans: list[tuple[int, int]], start: int | None, end: int | None) -> list[tuple[int, int, str]]:
    """Offset ranges (inclusive) of a partition that no object covers: before the first object
    (from ``start``), between objects, after the last (to ``end - 1``). ``None`` bounds: unknown."""
    holes: list[tuple[int, int, str]] = []
    if not spans:
        if start is not None and end is not None and start < end:
            holes.append((start, end - 1, "no object"))
        return holes
    if start is not None and spans[0][0] > start:
        holes.append((start, spans[0][0] - 1, "before the first object"))
    reach = spans[0][1]
    for first, last in spans[1:]:
        if first > reach + 1:
            holes.append((reach + 1, first - 1, "between objects"))
        reach = max(reach, last)
    if end is not None and reach + 1 < end:
        holes.append((reach + 1, end - 1, "after the last object"))
    return holes


def _overlaps(spans: _Spans) -> list[dict[str, Any]]:
    overlaps: list[dict[str, Any]] = []
    for (topic, partition), found in sorted(spans.items()):
        for (_, prev_end), (cur_start, cur_end) in itertools.pairwise(found):
            if cur_start <= prev_end:
                overlaps.append(
                    {"topic": topic, "partition": partition, "from": cur_start, "to": min(prev_end, cur_end)}
                )
    return overlaps


async def _partitions(settings: Settings, topics: Sequence[str]) -> dict[str, list[int]]:
    """The partitions of each of ``topics`` that exists."""
    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="export-admin"))
    await admin.start()
    try:
        described = await admin.describe_topics(list(topics))
    finally:
        await admin.close()
    return {
        t["topic"]: sorted(p["partition"] for p in t["partitions"])
        for t in described
        if not t.get("error_code") and t["partitions"]
    }


async def _first_record(
    consumer: AIOKafkaConsumer, tp: TopicPartition, first: int, last: int, stall_timeout_s: float
) -> int | None:
    """The offset of the first committed record in ``first..last`` of ``tp``, or ``None`` when the
    range holds only transaction markers and aborted records (``read_committed`` skips them)."""
    consumer.assign([tp])
    consumer.seek(tp, first)
    last_progress = time.monotonic()
    position = first
    while position <= last:
        batch = await consumer.getmany(tp, timeout_ms=500, max_records=10)
        records = batch.get(tp)
        if records:
            return records[0].offset if records[0].offset <= last else None
        now_at = await consumer.position(tp)
        if now_at > position:
            position, last_progress = now_at, time.monotonic()
        elif time.monotonic() - last_progress > stall_timeout_s:
            raise TimeoutError(
                f"reading {tp.topic}-{tp.partition} at {position}: no progress for {stall_timeout_s:.0f} s"
            )
    return None


async def topic_coverage(
    settings: Settings, spans: _Spans, topics: set[str], *, stall_timeout_s: float = 30.0
) -> tuple[list[dict[str, Any]], list[str]]:
    """Check the objects' offsets against Kafka (module docstring, *Coverage*).

    Args:
        spans: the objects' offsets per partition.
        topics: every topic to check (those of the objects and the configured result topics).

    Returns:
        the gaps (``topic``, ``partition``, ``from``, ``to`` inclusive, ``where`` and ``first_record``:
        the first record found in the range, ``None`` when the range is no longer in Kafka), and
        problems that make the coverage uncheckable (a topic of the objects missing from Kafka,
        objects beyond the topic's end).

    Raises:
        KafkaError, TimeoutError: Kafka could not be read.
    """
    partitions = await _partitions(settings, sorted(topics))
    problems = [
        f"topic {t} is not in Kafka: the offsets of its objects cannot be checked "
        "(set --topics.completions/--topics.errors, or --no-topic-check)"
        for t in sorted({t for t, _ in spans} - set(partitions))
    ]
    tps = [TopicPartition(t, p) for t, ps in sorted(partitions.items()) for p in ps]
    gaps: list[dict[str, Any]] = []
    if not tps:
        return gaps, problems
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    await consumer.start()
    try:
        consumer.assign(tps)
        starts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)  # read_committed: the last stable offsets
        for tp in tps:
            found = spans.get((tp.topic, tp.partition), [])
            start, end = starts[tp], ends[tp]
            if found and max(e for _, e in found) >= end:
                problems.append(
                    f"{tp.topic}-{tp.partition}: objects reach offset {max(e for _, e in found)} but the "
                    f"topic ends at {end} (a re-created topic? export the run from its own topic)"
                )
            for first, last, where in _holes(found, start, end):
                gap = {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "from": first,
                    "to": last,
                    "where": where,
                }
                gone = f"offsets below {start} are no longer in Kafka (retention): cannot tell what they held"
                if last < start:
                    gaps.append({**gap, "first_record": None, "reason": gone})
                    continue
                record = await _first_record(consumer, tp, max(first, start), last, stall_timeout_s)
                if record is not None:
                    reason = f"Kafka holds record {record} there, no object has it"
                    gaps.append({**gap, "first_record": record, "reason": reason})
                elif first < start:
                    gaps.append({**gap, "first_record": None, "reason": gone})
    finally:
        await consumer.stop()
    for topic, partition in spans:
        if topic in partitions and partition not in partitions[topic]:
            problems.append(f"{topic}-{partition}: objects of a partition the topic does not have")
    return gaps, problems


def s3_only_gaps(spans: _Spans) -> list[dict[str, Any]]:
    """The holes between objects, without Kafka (``--no-topic-check``): every hole is a gap."""
    return [
        {
            "topic": topic,
            "partition": partition,
            "from": first,
            "to": last,
            "where": where,
            "first_record": None,
            "reason": "no object holds these offsets (not checked against Kafka)",
        }
        for (topic, partition), found in sorted(spans.items())
        for first, last, where in _holes(found, None, None)
    ]


# -- export --------------------------------------------------------------------------------------


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
) -> ExportResult:
    """Export run ``run_id`` from ``settings.s3`` to ``to`` (a folder or ``s3://bucket/prefix``).

    Args:
        check_topics: check the objects' coverage against Kafka (module docstring, *Coverage*).

    Returns:
        the manifest and the exit status (module docstring).

    Raises:
        ConfigError: a malformed destination or run id.
        botocore.exceptions.ClientError, BotoCoreError: S3 failed (after botocore's retries).
        KafkaError, TimeoutError: Kafka could not be read (``check_topics``).
    """
    client = s3_client(settings.s3)
    bucket = settings.s3.bucket
    try:
        folder = run_prefix(settings.s3.prefix, run_id)
    except LayoutError as exc:
        raise ConfigError(str(exc)) from None
    sources = sorted(
        _list_sources(client, bucket, folder),
        key=lambda s: (s.parsed.topic, s.parsed.partition, s.parsed.start_offset),
    )

    # Pass 1: the winning line of every id; prompt conflicts; records of other runs.
    winners: dict[str, _Rank] = {}
    kinds_seen: dict[str, int] = {}  # id -> (lines << 2) | 1 if a completion | 2 if an error
    origins: dict[str, _Origin] = {}
    conflicts: list[dict[str, Any]] = []
    conflicting: set[str] = set()
    superseded: set[str] = set()  # ids with records of more than one attempt
    lines_total = 0
    lines_by_kind: Counter[str] = Counter()
    foreign: list[dict[str, Any]] = []
    foreign_runs: Counter[str] = Counter()
    for source in sources:
        for line, head in _read_object(client, bucket, source):
            record_id = head.id
            lines_total += 1
            lines_by_kind[line.kind] += 1
            if _foreign(head, run_id):  # counted and reported, never part of the dataset
                assert head.run_id is not None
                foreign_runs[head.run_id] += 1
                if len(foreign) < list_cap:
                    foreign.append(
                        {"id": record_id, "run_id": head.run_id, "kind": line.kind}
                        | _where(line.topic, line.partition, line.offset, head.attempt)
                    )
                continue
            rank = _rank(line.kind, head.attempt, line.offset, line.topic, line.partition)
            best = winners.get(record_id)
            if best is None or rank < best:
                winners[record_id] = rank
            if best is not None and best[0] != rank[0]:
                superseded.add(record_id)
            bits = kinds_seen.get(record_id, 0) | (1 if line.kind == "completion" else 2)
            kinds_seen[record_id] = bits + 4
            if head.prompt is None:
                continue
            identity = bytes.fromhex(prompt_identity(head.prompt))
            origin = origins.get(record_id)
            if origin is None:
                origins[record_id] = (identity, line.topic, line.partition, line.offset, head.attempt)
            elif origin[0] != identity and record_id not in conflicting:
                conflicting.add(record_id)
                conflicts.append(
                    {
                        "id": record_id,
                        "first": _where(*origin[1:]),
                        "second": _where(line.topic, line.partition, line.offset, head.attempt),
                    }
                )
    del origins

    # Pass 2: write the winners, with statistics over them.
    dest = _Destination(to, client)
    shards = {kind: _Shards(dest, kind, shard_records) for kind in ("completions", "errors")}
    by_finish: Counter[str] = Counter()
    by_flag: Counter[str] = Counter()
    by_error: Counter[str] = Counter()
    by_attempt: Counter[int] = Counter()
    tokens: Counter[str] = Counter()
    flagged = 0
    try:
        for source in sources:
            if source.problem is not None:
                continue
            for line, head in _read_object(client, bucket, source):
                record_id = head.id
                if _foreign(head, run_id):
                    continue
                if winners.get(record_id) != _rank(
                    line.kind, head.attempt, line.offset, line.topic, line.partition
                ):
                    continue
                winners.pop(record_id)  # an exact duplicate line (same offset) is written once
                value = bytes(line.value)
                by_attempt[head.attempt] += 1
                if line.kind == "completion":
                    record = decode(value, CompletionRecord)
                    by_finish[record.finish_reason] += 1
                    by_flag.update(record.quality)
                    flagged += bool(record.quality)
                    tokens["prompt"] += record.usage.prompt_tokens
                    tokens["completion"] += record.usage.completion_tokens
                    tokens["reasoning"] += record.usage.reasoning_tokens
                    shards["completions"].add(value)
                else:
                    error = decode(value, ErrorRecord)
                    by_error[f"{error.stage}:{error.error_type}"] += 1
                    shards["errors"].add(value)
        for s in shards.values():
            s.close()

        spans = _spans(sources)
        coverage_problems: list[str] = []
        if check_topics:
            topics = {t for t, _ in spans} | {settings.topics.completions, settings.topics.errors}
            gaps, coverage_problems = asyncio.run(topic_coverage(settings, spans, topics))
        else:
            gaps = s3_only_gaps(spans)
        overlaps = _overlaps(spans)
        present = set(kinds_seen)
        corrupt = [{"key": s.key, "problem": s.problem} for s in sources if s.problem is not None]
        missing = sorted(expected.ids - present) if expected is not None else []
        unexpected = sorted(present - expected.ids) if expected is not None else []
        foreign_count = sum(foreign_runs.values())
        failed = bool(
            corrupt
            or gaps
            or coverage_problems
            or conflicts
            or foreign_count
            or (missing and not allow_missing)
        )
        written = {kind: sum(e["records"] for e in s.written) for kind, s in shards.items()}
        manifest: dict[str, Any] = {
            "run_id": run_id,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "ok": not failed,
            "source": {
                "s3": f"s3://{bucket}/{folder}",
                "objects": len(sources),
                "lines": lines_total,
                "lines_by_kind": dict(sorted(lines_by_kind.items())),
                "corrupt_objects": corrupt,
                "offsets_checked_against_kafka": check_topics,
                "offset_gaps": gaps[:list_cap],
                "offset_gaps_count": len(gaps),
                "coverage_problems": coverage_problems,
                "offset_overlaps": overlaps[:list_cap],
            },
            "foreign": {
                "count": foreign_count,
                "by_run": dict(sorted(foreign_runs.items())),
                "items": foreign,
                "truncated": foreign_count > len(foreign),
            },
            "records": {
                "ids": len(present),
                "completions": written["completions"],
                "errors": written["errors"],
            },
            "by_attempt": {str(a): n for a, n in sorted(by_attempt.items())},
            "by_finish_reason": dict(sorted(by_finish.items())),
            "by_quality_flag": dict(sorted(by_flag.items())),
            "flagged_completions": flagged,
            "errors_by_type": dict(sorted(by_error.items())),
            "tokens": {k: tokens[k] for k in ("prompt", "completion", "reasoning")},
            "duplicates": {
                "records_dropped": lines_total - foreign_count - len(present),
                "ids": sum(1 for info in kinds_seen.values() if info >> 2 > 1),
                "completion_beat_error": sum(1 for info in kinds_seen.values() if info & 3 == 3),
                "older_attempts_dropped": len(superseded),
            },
            "conflicts": {
                "count": len(conflicts),
                "items": conflicts[:list_cap],
                "truncated": len(conflicts) > list_cap,
            },
            "expected": None
            if expected is None
            else {"source": expected.source, "ids": len(expected.ids), "unreadable": expected.unreadable},
            "missing": {
                "count": len(missing),
                "ids": missing[:list_cap],
                "truncated": len(missing) > list_cap,
            },
            "unexpected": {
                "count": len(unexpected),
                "ids": unexpected[:list_cap],
                "truncated": len(unexpected) > list_cap,
            },
            "shards": [entry for s in shards.values() for entry in s.written],
        }
        (dest.path("manifest.json")).write_text(json.dumps(manifest, indent=2) + "\n")
        dest.publish("manifest.json")
        listed = {entry["path"] for entry in manifest["shards"]}
        for stale in sorted(dest.shard_names() - listed):
            dest.remove(stale)
            log.info("removed %s: a shard of an earlier export", dest.where(stale))
        manifest["_where"] = dest.where("manifest.json")
        return ExportResult(manifest, 1 if failed else 0)
    finally:
        dest.close()


def _gap_text(gap: dict[str, Any]) -> str:
    where = f"{gap['topic']}-{gap['partition']} offsets {gap['from']}..{gap['to']} ({gap['where']})"
    return f"{where}: {gap['reason']}"


def problem_lines(manifest: dict[str, Any]) -> list[str]:
    """One line per problem that failed the export (the first :data:`SHOWN` of each kind)."""
    lines: list[str] = []
    src = manifest["source"]

    def listed(title: str, items: list[str], total: int) -> None:
        lines.extend(f"{title}: {item}" for item in items[:SHOWN])
        if total > SHOWN:
            lines.append(f"... and {total - SHOWN} more {title.lower()} (see the manifest)")

    bucket = src["s3"].removeprefix("s3://").split("/", 1)[0]
    listed(
        "CORRUPT object",
        [f"s3://{bucket}/{c['key']}: {c['problem']}" for c in src["corrupt_objects"]],
        len(src["corrupt_objects"]),
    )
    listed("OFFSET GAP", [_gap_text(g) for g in src["offset_gaps"]], src["offset_gaps_count"])
    listed("COVERAGE", list(src["coverage_problems"]), len(src["coverage_problems"]))
    conflicts = manifest["conflicts"]
    listed(
        "CONFLICT",
        [
            f"id {c['id']!r}: different prompts at {_at(c['first'])} and {_at(c['second'])}"
            for c in conflicts["items"]
        ],
        conflicts["count"],
    )
    foreign = manifest["foreign"]
    listed(
        "FOREIGN record",
        [
            f"id {f['id']!r} at {_at(f)}: a {f['kind']} of run {f['run_id']}, not run {manifest['run_id']} "
            "(left out of the dataset; a prompts topic or S3 folder shared by two runs? see docs/runs.md)"
            for f in foreign["items"]
        ],
        foreign["count"],
    )
    return lines


def _at(where: dict[str, Any]) -> str:
    return f"{where['topic']}-{where['partition']}@{where['offset']} (attempt {where['attempt']})"


def summary(manifest: dict[str, Any]) -> str:
    """A few lines for the terminal, then one line per problem."""
    rec = manifest["records"]
    dup = manifest["duplicates"]
    lines = [
        f"run {manifest['run_id']}: {rec['completions']} completions, {rec['errors']} errors "
        f"({manifest['source']['objects']} objects, {manifest['source']['lines']} records read, "
        f"{dup['records_dropped']} duplicates dropped, {dup['older_attempts_dropped']} ids re-generated)",
    ]
    if manifest["expected"] is not None:
        exp, miss = manifest["expected"], manifest["missing"]
        lines.append(
            f"expected {exp['ids']} ids from {exp['source']}: {miss['count']} missing, "
            f"{manifest['unexpected']['count']} unexpected"
        )
        if miss["count"]:
            shown = ", ".join(miss["ids"][:10])
            lines.append(f"missing: {shown}{' ...' if miss['count'] > 10 else ''}")
    if manifest["source"]["offset_overlaps"]:
        lines.append(f"offset overlaps between objects: {len(manifest['source']['offset_overlaps'])}")
    lines.append(f"finish reasons: {manifest['by_finish_reason']}; tokens: {manifest['tokens']}")
    lines += [
        f"  {s['path']}: {s['records']} records, sha256 {s['sha256'][:16]}..." for s in manifest["shards"]
    ]
    lines.append(f"manifest: {manifest.get('_where', 'manifest.json')}")
    lines += problem_lines(manifest)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sinks.export --run RUN --to DIR|s3://bucket/prefix [--prompts-topic [T] | --input
    INPUT ...] [--allow-missing] [--no-topic-check]`` plus any settings flag (``--s3.prefix``,
    ``--kafka.bootstrap-servers``...). Returns the exit status (module docstring)."""
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
    parser.add_argument("--format", default="auto", help="--input format (producers.formats names)")
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


if __name__ == "__main__":
    sys.exit(main())
