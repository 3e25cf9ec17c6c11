"""The dataset export: ``python -m sinks.export --run RUN --to DIR|s3://bucket/prefix``.

Reads every object the sink wrote for a run (:mod:`sinks.layout`), checks each against its
metadata (SHA-256 of the body, record count) and the objects of a partition against each other
(offset gaps and overlaps), deduplicates by record id, compares the ids with the expected ones,
and writes the dataset:

* ``completions-00000.jsonl.zst`` ...: one :class:`~streams.records.CompletionRecord` per line
  (the bytes as produced), ``--shard-records`` per shard;
* ``errors-00000.jsonl.zst`` ...: the :class:`~streams.records.ErrorRecord` of each id that has no
  completion (dead letters, and records the sink could not decode);
* ``manifest.json``: run id, creation time, counts by ``finish_reason`` and by quality flag,
  token totals, duplicate counts, expected/missing/unexpected ids (lists capped by
  ``--list-cap``), per-shard record counts and SHA-256 (of the shard file as stored), and what
  was checked in the source objects.

Deduplication: a completion beats an error; between records of the same kind the earliest Kafka
offset wins (then topic, partition, for a deterministic order). Expected ids come from the prompts
topic (default; read ``read_committed`` from the beginning up to the end offsets taken at start)
or from the input file (``--input``, parsed with :mod:`producers.formats` as the producer does).
An id is *missing* when it has neither a completion nor an error.

Two passes over the objects keep memory to the id index (about 100 bytes per id) plus one
object; shards are streamed to disk (uploaded per shard for an ``s3://`` destination).

Exit status: 0; 1 when ids are missing (unless ``--allow-missing``) or a source object is
corrupt; 2 on bad arguments or settings; 3 when Kafka cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import logging
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec
import zstandard
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from producers.formats import FormatName, MappingOptions, parse_line
from sinks.layout import (
    LayoutError,
    ObjectKey,
    ObjectMeta,
    decode_line,
    iter_body_lines,
    parse_key,
    run_prefix,
)
from streams.config import Settings, load_settings
from streams.errors import ConfigError, InputError, KafkagenError
from streams.kafka import client_kwargs, consumer_kwargs, unreachable_message
from streams.records import CompletionRecord, ErrorRecord, PromptRecord, RecordDecodeError, decode
from streams.storage import s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger("kafkagen.export")

DEFAULT_SHARD_RECORDS: Final = 100_000
DEFAULT_LIST_CAP: Final = 1000


class _Id(msgspec.Struct):
    id: str


_id_decoder: Final = msgspec.json.Decoder(_Id)

_Rank = tuple[int, int, str, int]
"""(0 completion | 1 error, offset, topic, partition): the smallest wins."""


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
    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="export-admin"))
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    partitions = sorted(p["partition"] for t in described if not t.get("error_code") for p in t["partitions"])
    if not partitions:
        raise ConfigError(f"prompts topic {topic!r} does not exist (set --prompts-topic or --input)")
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


def prompt_ids_from_file(path: Path, options: MappingOptions) -> Expected:
    """Every record id of a prompt input file, parsed as the producer parses it (blank lines
    skipped; rows the producer would reject are counted as ``unreadable``).

    Raises:
        OSError: the file cannot be read.
    """
    ids: set[str] = set()
    unreadable = 0
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                ids.add(parse_line(raw, source=str(path), line=number, options=options).id)
            except InputError:
                unreadable += 1
    return Expected(f"file:{path}", ids, unreadable)


# -- output --------------------------------------------------------------------------------------


class _Destination:
    """A local folder, or ``s3://bucket/prefix`` (files are staged locally, then uploaded)."""

    def __init__(self, target: str, client: S3Client | None) -> None:
        self.target = target
        if target.startswith("s3://"):
            bucket, _, prefix = target.removeprefix("s3://").partition("/")
            if not bucket:
                raise ConfigError(f"--to {target!r}: expected s3://bucket/prefix")
            self.bucket: str | None = bucket
            self.prefix = prefix.strip("/")
            self.stage = Path(tempfile.mkdtemp(prefix="kafkagen-export-"))
            self.client = client
        else:
            self.bucket = None
            self.prefix = ""
            self.stage = Path(target)
            self.stage.mkdir(parents=True, exist_ok=True)
            self.client = None

    def path(self, name: str) -> Path:
        return self.stage / name

    def where(self, name: str) -> str:
        if self.bucket is None:
            return str(self.stage / name)
        return f"s3://{self.bucket}/{self.prefix + '/' if self.prefix else ''}{name}"

    def publish(self, name: str) -> None:
        """Upload a staged file (S3 destinations; local files are already in place)."""
        if self.bucket is None or self.client is None:
            return
        key = f"{self.prefix}/{name}" if self.prefix else name
        self.client.upload_file(str(self.stage / name), self.bucket, key)
        (self.stage / name).unlink()

    def close(self) -> None:
        if self.bucket is not None:
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


# -- export --------------------------------------------------------------------------------------


def _list_sources(client: S3Client, bucket: str, prefix: str) -> Iterator[_Source]:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            try:
                parsed = parse_key(obj["Key"])
            except LayoutError as exc:
                log.warning("skipping %s: %s", obj["Key"], exc)
                continue
            yield _Source(obj["Key"], parsed, None)


def _read_lines(client: S3Client, bucket: str, source: _Source) -> list[bytes]:
    """The object's lines, after checking them against its metadata; sets ``source.problem``."""
    resp = client.get_object(Bucket=bucket, Key=source.key)
    body = resp["Body"].read()
    try:
        source.meta = ObjectMeta.from_s3(resp.get("Metadata", {}))
        lines = list(iter_body_lines(body))
    except LayoutError as exc:
        source.problem = str(exc)
        return []
    digest = hashlib.sha256(b"".join(lines)).hexdigest()
    if digest != source.meta.sha256:
        source.problem = f"SHA-256 of the body is {digest}, metadata says {source.meta.sha256}"
    elif len(lines) != source.meta.record_count:
        source.problem = f"{len(lines)} lines, metadata says {source.meta.record_count}"
    return lines


def _rank(kind: str, offset: int, topic: str, partition: int) -> _Rank:
    return (0 if kind == "completion" else 1, offset, topic, partition)


def _coverage(sources: list[_Source]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Offset gaps and overlaps between consecutive objects of each partition."""
    gaps: list[dict[str, Any]] = []
    overlaps: list[dict[str, Any]] = []
    by_tp: dict[tuple[str, int], list[ObjectMeta]] = {}
    for s in sources:
        if s.meta is not None:
            by_tp.setdefault((s.parsed.topic, s.parsed.partition), []).append(s.meta)
    for (topic, partition), metas in sorted(by_tp.items()):
        metas.sort(key=lambda m: m.start_offset)
        for prev, cur in itertools.pairwise(metas):
            where = {"topic": topic, "partition": partition}
            if cur.start_offset > prev.end_offset + 1:
                gaps.append({**where, "from": prev.end_offset + 1, "to": cur.start_offset - 1})
            elif cur.start_offset <= prev.end_offset:
                overlaps.append(
                    {**where, "from": cur.start_offset, "to": min(prev.end_offset, cur.end_offset)}
                )
    return gaps, overlaps


def export(
    settings: Settings,
    run_id: str,
    to: str,
    *,
    expected: Expected | None,
    allow_missing: bool = False,
    shard_records: int = DEFAULT_SHARD_RECORDS,
    list_cap: int = DEFAULT_LIST_CAP,
) -> ExportResult:
    """Export run ``run_id`` from ``settings.s3`` to ``to`` (a folder or ``s3://bucket/prefix``).

    Returns:
        the manifest and the exit status (1 when ids are missing and not ``allow_missing``, or a
        source object is corrupt).

    Raises:
        ConfigError: a malformed destination or run id.
        botocore.exceptions.ClientError, BotoCoreError: S3 failed (after botocore's retries).
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

    # Pass 1: the winning line of every id.
    winners: dict[str, _Rank] = {}
    kinds_seen: dict[str, int] = {}  # id -> (lines << 2) | 1 if a completion | 2 if an error
    lines_total = 0
    lines_by_kind: Counter[str] = Counter()
    for source in sources:
        for raw in _read_lines(client, bucket, source):
            line = decode_line(raw)
            record_id = _id_decoder.decode(line.value).id
            rank = _rank(line.kind, line.offset, line.topic, line.partition)
            lines_total += 1
            lines_by_kind[line.kind] += 1
            best = winners.get(record_id)
            if best is None or rank < best:
                winners[record_id] = rank
            bits = kinds_seen.get(record_id, 0) | (1 if line.kind == "completion" else 2)
            kinds_seen[record_id] = bits + 4

    # Pass 2: write the winners, with statistics over them.
    dest = _Destination(to, client)
    shards = {kind: _Shards(dest, kind, shard_records) for kind in ("completions", "errors")}
    by_finish: Counter[str] = Counter()
    by_flag: Counter[str] = Counter()
    by_error: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    flagged = 0
    try:
        for source in sources:
            if source.problem is not None and source.meta is None:
                continue
            for raw in _read_lines(client, bucket, source):
                line = decode_line(raw)
                value = bytes(line.value)
                record_id = _id_decoder.decode(value).id
                if winners.get(record_id) != _rank(line.kind, line.offset, line.topic, line.partition):
                    continue
                winners.pop(record_id)  # an exact duplicate line (same offset) is written once
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

        present = set(kinds_seen)
        completed = sum(1 for bits in kinds_seen.values() if bits & 1)
        gaps, overlaps = _coverage(sources)
        corrupt = [{"key": s.key, "problem": s.problem} for s in sources if s.problem is not None]
        missing = sorted(expected.ids - present) if expected is not None else []
        unexpected = sorted(present - expected.ids) if expected is not None else []
        status = 1 if corrupt or (missing and not allow_missing) else 0
        manifest: dict[str, Any] = {
            "run_id": run_id,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "source": {
                "s3": f"s3://{bucket}/{folder}",
                "objects": len(sources),
                "lines": lines_total,
                "lines_by_kind": dict(sorted(lines_by_kind.items())),
                "corrupt_objects": corrupt,
                "offset_gaps": gaps[:list_cap],
                "offset_overlaps": overlaps[:list_cap],
            },
            "records": {
                "ids": len(present),
                "completions": completed,
                "errors": len(present) - completed,
            },
            "by_finish_reason": dict(sorted(by_finish.items())),
            "by_quality_flag": dict(sorted(by_flag.items())),
            "flagged_completions": flagged,
            "errors_by_type": dict(sorted(by_error.items())),
            "tokens": {k: tokens[k] for k in ("prompt", "completion", "reasoning")},
            "duplicates": {
                "records_dropped": lines_total - len(present),
                "ids": sum(1 for info in kinds_seen.values() if info >> 2 > 1),
                "completion_beat_error": sum(1 for info in kinds_seen.values() if info & 3 == 3),
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
        manifest["_where"] = dest.where("manifest.json")
        return ExportResult(manifest, status)
    finally:
        dest.close()


def summary(manifest: dict[str, Any]) -> str:
    """A few lines for the terminal."""
    rec = manifest["records"]
    dup = manifest["duplicates"]
    lines = [
        f"run {manifest['run_id']}: {rec['completions']} completions, {rec['errors']} errors "
        f"({manifest['source']['objects']} objects, {manifest['source']['lines']} records read, "
        f"{dup['records_dropped']} duplicates dropped)",
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
    if manifest["source"]["corrupt_objects"]:
        lines.append(
            f"CORRUPT source objects: {len(manifest['source']['corrupt_objects'])} (see the manifest)"
        )
    if manifest["source"]["offset_overlaps"]:
        lines.append(f"offset overlaps between objects: {len(manifest['source']['offset_overlaps'])}")
    lines.append(f"finish reasons: {manifest['by_finish_reason']}; tokens: {manifest['tokens']}")
    lines += [
        f"  {s['path']}: {s['records']} records, sha256 {s['sha256'][:16]}..." for s in manifest["shards"]
    ]
    lines.append(f"manifest: {manifest.get('_where', 'manifest.json')}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sinks.export --run RUN --to DIR|s3://bucket/prefix [--prompts-topic [T] | --input FILE]
    [--allow-missing]`` plus any settings flag (``--s3.prefix``, ``--kafka.bootstrap-servers``...).
    Returns the exit status (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m sinks.export",
        description="Turn a run's S3 objects into a deduplicated, checked dataset with a manifest.",
        epilog="Settings (S3 location, Kafka) are flags too, e.g. --s3.prefix runs "
        "(see `python -m sinks.export --settings-help`).",
    )
    parser.add_argument(
        "--run", required=False, help="the run id to export (default: the run_id setting, i.e. --run-id)"
    )
    parser.add_argument("--to", required=False, help="output folder, or s3://bucket/prefix")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--prompts-topic",
        nargs="?",
        const="",
        help="compare with this prompts topic (default: the topics.prompts setting; this is the default)",
    )
    source.add_argument("--input", type=Path, help="compare with the ids of this prompt input file")
    parser.add_argument("--format", default="auto", help="--input format (producers.formats names)")
    parser.add_argument("--prompt-field", help="--input dataset rows: the prompt field")
    parser.add_argument("--id-field", help="--input: the field holding record ids")
    parser.add_argument("--allow-missing", action="store_true", help="exit 0 even when ids are missing")
    parser.add_argument("--shard-records", type=int, default=DEFAULT_SHARD_RECORDS, help="records per shard")
    parser.add_argument("--list-cap", type=int, default=DEFAULT_LIST_CAP, help="ids listed in the manifest")
    parser.add_argument("--settings-help", action="store_true", help="list every settings flag")
    args, rest = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(Settings, ["--help"] if args.settings_help else rest, prog=parser.prog)
        if not args.to:
            parser.error("--to is required")
        if args.shard_records <= 0 or args.list_cap < 0:
            parser.error("--shard-records must be positive and --list-cap not negative")
        run_id = args.run or settings.run_id
        if args.input is not None:
            try:
                fmt = FormatName(args.format)
            except ValueError:
                raise ConfigError(f"unknown --format {args.format!r}") from None
            options = MappingOptions(
                format=fmt,
                prompt_field=args.prompt_field,
                id_field=args.id_field,
            )
            expected = prompt_ids_from_file(args.input, options)
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
        )
    except (KafkagenError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KafkaError as exc:
        print(unreachable_message(settings.kafka, exc), file=sys.stderr)
        return 3
    print(summary(result.manifest))
    return result.exit_status


if __name__ == "__main__":
    sys.exit(main())
