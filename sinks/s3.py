"""The S3 sink: ``python -m sinks.s3`` writes the completions and dead-letter topics to S3, exactly once.

Objects are zstd JSON Lines under :mod:`sinks.layout` keys
(``<prefix>/<run_id>/<topic>/partition=<p>/<topic>+<p>+<start offset>.jsonl.zst``), one folder per
topic, so dead letters land beside completions but never mixed with them.

Guarantee
---------
Every record of the two topics ends up in exactly one object of the run folder, however often
the sink is stopped or killed, and no offset is committed before its record is in S3. It rests on
four rules, the Kafka Connect S3 sink's recipe (docs/kafka.md) plus position
recovery from the objects themselves (as Connect's HDFS sink does from its file names):

1. **Deterministic objects.** An object starts at the first record at or after a *chain
   position* (offset 0, or the end offset + 1 of an existing object) and is cut after
   ``flush_records`` records or ``flush_bytes`` uncompressed bytes, counted from that start;
   the key names only the start offset. Only the idle flush (``idle_flush_s`` of silence on a
   partition) cuts by wall clock; rule 2 makes that safe.
2. **Conditional create.** Every object is written with ``If-None-Match: *`` (``PutObject``, or
   ``CompleteMultipartUpload`` above ``multipart_threshold_bytes``; AWS S3 conditional writes,
   honoured by SeaweedFS, tests/streams/test_storage.py). A 412 means another attempt already
   wrote that start offset: the existing object wins, is never overwritten, and the sink resumes
   after *its* end offset (read from its metadata), seeking the consumer there. Since every writer
   starts at a chain position and each start offset can be created once, objects never overlap
   (two sinks racing on one folder with different batch sizes: tests/sinks/test_s3_sink.py).
3. **Upload, then commit.** ``end + 1`` is committed only after the object exists. A crash in
   between leaves the commit behind S3, which rule 4 absorbs.
4. **Recovery from S3: S3 wins.** On every partition assignment (start-up included) the sink
   lists the partition's folder, reads the end offset of the object with the highest start
   offset and seeks there (to the partition's first offset in Kafka when the folder is empty),
   whatever the group's committed offset says, then commits that position. A commit behind S3
   (expired, lost, or a crash between upload and commit) therefore never re-writes data; a commit
   *ahead* of S3 means objects are gone from this destination (the folder was deleted to re-sink,
   or the bucket, prefix or run id changed): the sink logs a warning naming the folder and the
   offsets, and writes them again from Kafka. No record is skipped because of a commit. (The
   alternative, a group id derived from the destination, would not cover a deleted folder.)
   Offsets Kafka no longer holds (retention) cannot be re-written: a warning names them, and the
   export reports the gap. Multipart uploads left dangling by a killed writer in the folder are
   aborted.

A record is appended to a batch only when its offset is at or after the partition's next
expected offset (the last appended + 1), so re-deliveries after a seek are dropped and the
lines of an object are in strictly increasing offset order; and only when it comes from a fetch
issued after the partition's latest seek: records fetched before it (which may lie beyond the new
position) are dropped and the partition sought again, so no seek can open a gap.

Why the sink runs its own aiokafka consumer inside the faust app
---------------------------------------------------------------
The issue asks for a faust-streaming app whose agent consumes the topics. Reading faust-streaming
0.15.3's source, its agent path cannot carry rule 3 and 4 without patching faust internals:

* its worker consumer reads ``read_uncommitted`` unless ``processing_guarantee="exactly_once"``
  (``AIOKafkaConsumerThread._create_worker_consumer``), so aborted transactional records would be
  sunk; every other kafkagen consumer reads ``read_committed`` (:func:`streams.kafka.consumer_kwargs`);
* ``Stream.__aiter__`` *acks* events it skips (flow control paused, or a message from an older
  consumer generation during a rebalance), and ``take()`` acks when the agent raises: faust then
  commits offsets that were never uploaded (kafka-pitfalls.md);
* after a forward seek (rule 4) ``Consumer._new_offset`` refuses to commit acked offsets that do not
  follow the committed one (``min(acked) - committed > 1`` returns ``None``): commits would stall;
* its seek from the agent runs on the consumer thread's aiokafka object from another thread, and
  its consumer takes faust's own credentials, not the project's client factories.

So the faust app (:class:`SinkApp`) is the process host: worker lifecycle, logging, SIGTERM/SIGINT
handling and crash exit codes come from ``faust.Worker``; its own Kafka consumer, producer, web
server and tables are switched off (``BootStrategy``), and the sink's
:class:`SinkRunner` owns one ``AIOKafkaConsumer`` built by :func:`streams.kafka.consumer_kwargs`
(``read_committed``, manual commits, the project's security settings). Values arrive as raw
bytes and are decoded here with :func:`streams.records.decode`; no faust ack or commit exists.
The faust app id and the consumer group are both :func:`group_id`: ``<sink.group>.<run_id>``.
The topics it reads are the run's (``<run id>.completions`` and ``.errors`` unless set,
:mod:`streams.naming`, ``docs/runs.md``).
Rule 4 makes S3, not the group, the position, so the committed offsets serve progress and lag
reports.

Undecodable records
-------------------
A value that is not a valid record of the topic's type (not JSON, wrong schema, null) becomes an
``undecodable`` line *in its place* in the batch: an :class:`~streams.records.ErrorRecord`
(``stage="sink"``, ``source`` = topic/partition/offset, ``message`` = the decoder's reason,
``raw`` = the bytes as UTF-8 with replacement characters) plus ``raw_b64``, the exact bytes. It is
written and committed like any record: never a crash loop, never a silent skip.

Backpressure and memory
-----------------------
S3 calls run in worker threads, one operation per partition at a time, while the next batch of
that partition fills. A transient failure (S3 down, 5xx, timeouts, throttling) is retried forever
with capped exponential backoff (``retry_initial_s`` .. ``retry_max_s``) on top of botocore's own
(3 attempts); its log lines are rate-limited (the first three, then one every 10 s with a count).
A permanent one (:func:`permanent_error`: access denied, no such bucket, bad credentials, or a
key of ours holding a foreign object) stops the sink with exit status 1 and one error line naming
the bucket or key and what to do. Once the filling batch is full too, that partition is paused
in the consumer (other partitions go on), and the consumer keeps polling so the group never
expires it. Per assigned
partition the sink holds at most two batches, one uploading and one filling (each kept
zstd-compressed as it grows, at most ``flush_bytes`` uncompressed plus one record), and at most
``2 * poll_records`` fetched records waiting for them. If the upload finds the key taken by an
object with another end offset, the filling batch (which started after *our* end) is dropped and
the partition re-read from the existing end. Deterministic rotation cannot shrink batches under
memory pressure, so size ``flush_bytes`` for the number of partitions one sink owns.

Rebalances, shutdown, crashes
-----------------------------
On revocation, uploads in flight get up to ``rebalance_timeout_ms / 2`` (capped at 10 s) to
finish and commit; then they are cancelled and unsent batches discarded: the next owner re-reads
them. A cancelled upload's thread may still complete its request later: harmless, by rule 2.
SIGTERM waits up to ``shutdown_deadline_s`` for uploads in flight (one that fails while stopping
is abandoned, not retried), discards partial batches and exits 0: what was not committed is
re-read at the next start. Set ``sink.instance_id`` (static membership) in production: a
restarted sink then takes its partitions back at once instead of after ``session_timeout_ms``.
A SIGKILL at any point is covered by rules 2-4 (tests/sinks/test_s3_sink.py kills the sink
mid-batch, mid-upload and between upload and commit).

Status and metrics
------------------
Every 10 s the sink logs a status line (records, objects, partitions, and whether Kafka and S3
answer: ``Kafka UNREACHABLE for 37 s``). Kafka is probed every 5 s with a metadata request; the
first failure and the recovery are logged once each. ``--metrics-port P`` serves the same on
``127.0.0.1:P/metrics`` (:class:`SinkMetrics`). aiokafka logs every failed connection (about 100
lines a second while Kafka is down): the worker's log handlers get :mod:`streams.logs`' filters,
which pass one line per message kind every 10 s with a count of those held back.

Test hook
---------
``KAFKAGEN_SINK_TEST_PAUSE=<point>[:<n>]`` makes the sink log ``KAFKAGEN_SINK_TEST_PAUSED`` and
sleep for an hour the n-th time (default 1st) it reaches ``<point>``, so a test can SIGKILL it
exactly there: ``mid_batch`` (a batch holds half of ``flush_records``, nothing uploaded),
``during_upload`` (after a multipart part was uploaded and before the conditional complete; for a
single ``PutObject``, just before it is sent) or ``after_upload`` (the object exists, its offsets
are not committed). Unset (the default), the hook does nothing. It exists for tests only.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import logging
import os
import random
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

import faust
import mode
import msgspec
import zstandard
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from botocore.exceptions import BotoCoreError, ClientError
from faust.app.base import BootStrategy
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sinks.layout import (
    LayoutError,
    Line,
    LineKind,
    ObjectMeta,
    decode_line,
    encode_line,
    iter_body_lines,
    object_key,
    parse_key,
    partition_prefix,
    single_line_json,
)
from streams import naming
from streams.config import Settings, load_settings
from streams.errors import ConfigError, KafkagenError, PermanentStorageError, StorageError
from streams.kafka import KafkaOutage, consumer_kwargs, unreachable_message
from streams.logs import RepeatFilter, RetriedCoordinatorLookupAsInfo
from streams.records import CompletionRecord, ErrorRecord, RecordDecodeError, SourceOffset, decode, encode
from streams.storage import s3_client
from streams.topics import ensure_topics, topic_specs

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

log = logging.getLogger("kafkagen.sink")

T = TypeVar("T")

PAUSE_ENV: Final = "KAFKAGEN_SINK_TEST_PAUSE"
PAUSE_MARKER: Final = "KAFKAGEN_SINK_TEST_PAUSED"
PAUSE_POINTS: Final = ("mid_batch", "during_upload", "after_upload")
MIN_PART_BYTES: Final = 5 * 1024 * 1024
"""S3's smallest multipart part (all parts but the last)."""


group_id = naming.sink_group
"""The sink's consumer group and faust app id: ``<sink.group>.<run_id>``
(:func:`streams.naming.sink_group`; see the module docstring)."""


# -- records → lines ---------------------------------------------------------------------------


def record_line(
    *,
    topic: str,
    partition: int,
    offset: int,
    timestamp_ms: int,
    key: bytes | None,
    value: bytes | None,
    record_type: type[CompletionRecord] | type[ErrorRecord],
    run_id: str,
) -> tuple[bytes, bool]:
    """The body line for one Kafka record, and whether its value decoded as ``record_type``.

    A valid value is kept verbatim (compacted to one line if needed) under ``value``. An
    undecodable one becomes an ``undecodable`` line holding an :class:`ErrorRecord` with the
    decoder's reason, its source offset and the bytes (see the module docstring). The error's id
    is the record key when there is one, else ``<topic>+<partition>+<offset>``; its ``at`` is the
    record's timestamp, so the line is the same whenever it is rebuilt. Never raises for bad input.
    """
    key_text = key.decode("utf-8", "replace") if key is not None else None
    kind: LineKind = "completion" if record_type is CompletionRecord else "error"
    try:
        if value is None:
            raise RecordDecodeError(f"not a valid {record_type.__name__}: the record value is null")
        if record_type is CompletionRecord:
            decode(value, CompletionRecord)
        else:
            decode(value, ErrorRecord)
        line = Line(
            topic=topic,
            partition=partition,
            offset=offset,
            timestamp_ms=timestamp_ms,
            key=key_text,
            kind=kind,
            value=msgspec.Raw(single_line_json(value)),
        )
        return encode_line(line), True
    except RecordDecodeError as exc:
        raw = value or b""
        error = ErrorRecord(
            id=key_text or f"{topic}+{partition}+{offset}",
            run_id=run_id,
            raw=raw.decode("utf-8", "replace"),
            stage="sink",
            error_type="RecordDecodeError",
            message=str(exc),
            source=SourceOffset(topic=topic, partition=partition, offset=offset),
            at=timestamp_ms / 1000.0,
        )
        line = Line(
            topic=topic,
            partition=partition,
            offset=offset,
            timestamp_ms=timestamp_ms,
            key=key_text,
            kind="undecodable",
            value=msgspec.Raw(encode(error)),
            raw_b64=base64.b64encode(raw).decode("ascii"),
        )
        return encode_line(line), False


class Batch:
    """The lines of one future object, compressed as they arrive (memory ~ the compressed size).

    Args:
        level: zstd compression level.
    """

    def __init__(self, level: int) -> None:
        # The chunker API costs less per call than compressobj() (measured on 6 KB lines).
        self._compressor = zstandard.ZstdCompressor(level=level).chunker(chunk_size=1 << 20)
        self._chunks: list[bytes] = []
        self._sha = hashlib.sha256()
        self.start = -1
        self.end = -1
        self.count = 0
        self.raw_bytes = 0

    def add(self, offset: int, line: bytes) -> None:
        """Append the line of the record at ``offset`` (offsets must increase)."""
        if self.count == 0:
            self.start = offset
        self.end = offset
        self.count += 1
        self.raw_bytes += len(line)
        self._sha.update(line)
        self._chunks.extend(self._compressor.compress(line))

    def seal(self) -> tuple[bytes, ObjectMeta]:
        """The compressed body and its metadata. The batch cannot be used afterwards."""
        body = b"".join([*self._chunks, *self._compressor.finish()])  # type: ignore[no-untyped-call]
        self._chunks = []
        return body, ObjectMeta(self.start, self.end, self.count, self._sha.hexdigest(), self.raw_bytes)


# -- test hook -----------------------------------------------------------------------------------


class TestPause:
    """The ``KAFKAGEN_SINK_TEST_PAUSE`` hook (module docstring): a no-op unless configured.

    Raises:
        ConfigError: an unknown point or a malformed count.
    """

    __test__ = False  # not a pytest class

    def __init__(self, spec: str | None) -> None:
        self.point: str | None = None
        self.nth = 1
        self._hits = 0
        self._lock = threading.Lock()
        if not spec:
            return
        point, _, nth = spec.partition(":")
        if point not in PAUSE_POINTS or (nth and not nth.isdigit()):
            raise ConfigError(f"{PAUSE_ENV}={spec!r}: expected one of {', '.join(PAUSE_POINTS)}[:<n>]")
        self.point, self.nth = point, int(nth or 1)

    def __call__(self, point: str, detail: str) -> None:
        """Sleep for an hour if this is the configured point's n-th hit (blocks the caller's thread)."""
        if point != self.point:
            return
        with self._lock:
            self._hits += 1
            hit = self._hits == self.nth
        if hit:
            log.warning("%s point=%s %s", PAUSE_MARKER, point, detail)
            for handler in logging.getLogger().handlers:
                handler.flush()
            time.sleep(3600)


# -- S3 ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PutOutcome:
    """What a conditional create did: ``created``, or found the key taken by ``meta``'s object."""

    created: bool
    meta: ObjectMeta


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


PERMANENT_S3_CODES: Final = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccountProblem",
        "NoSuchBucket",
        "InvalidBucketName",
        "InvalidArgument",
        "EntityTooLarge",
    }
)
"""S3 error codes (AWS S3 API reference, "Error responses") that mean the request cannot succeed
as it is: retrying them only repeats the failure."""


def permanent_error(exc: BaseException, what: str, bucket: str) -> PermanentStorageError | None:
    """``exc`` as a :class:`PermanentStorageError` naming the operation and what to do, or ``None``
    when it is transient (network errors, 5xx, throttling, 404 on a key, 409/412 races).

    Permanent: an error already marked non-retriable, an S3 error code in
    :data:`PERMANENT_S3_CODES`, or any 403.
    """
    if isinstance(exc, KafkagenError) and not exc.retriable:
        return exc if isinstance(exc, PermanentStorageError) else PermanentStorageError(str(exc))
    if not isinstance(exc, ClientError):
        return None
    code = str(exc.response.get("Error", {}).get("Code", ""))
    if code not in PERMANENT_S3_CODES and _status(exc) != 403:
        return None
    advice = {
        "NoSuchBucket": f"create bucket {bucket!r} or set KAFKAGEN_S3__BUCKET",
        "InvalidBucketName": "fix KAFKAGEN_S3__BUCKET",
        "EntityTooLarge": "lower sink.flush_bytes",
        "InvalidArgument": "check the S3 settings and the server's limits",
    }.get(code, f"check the S3 keys and their permissions on bucket {bucket!r}")
    return PermanentStorageError(f"S3 {what} failed permanently ({code or _status(exc)}: {exc}): {advice}")


class ObjectStore:
    """The sink's S3 operations: blocking boto3 calls, meant to run in worker threads.

    Args:
        client: from :func:`streams.storage.s3_client`.
        bucket: the bucket.
        multipart_threshold: bodies of at least this many bytes go as multipart uploads.
        pause: the test hook.
    """

    def __init__(
        self, client: S3Client, bucket: str, multipart_threshold: int, pause: TestPause | None = None
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.multipart_threshold = multipart_threshold
        self.part_bytes = max(MIN_PART_BYTES, multipart_threshold)
        self.pause = pause or TestPause(None)

    def put_once(self, key: str, body: bytes, meta: ObjectMeta) -> PutOutcome:
        """Create ``key`` unless it exists (``If-None-Match: *``); never overwrite.

        Returns:
            ``created=True`` with ``meta``, or ``created=False`` with the existing object's metadata.

        Raises:
            ClientError, BotoCoreError: S3 failed (retriable: the caller retries).
            StorageError: the key holds an object that is not this partition's sink object
                starting at ``meta.start_offset``; it is left alone.
        """
        try:
            if len(body) >= self.multipart_threshold:
                self._put_multipart(key, body, meta)
            else:
                self.pause("during_upload", f"key={key} single put")
                self.client.put_object(
                    Bucket=self.bucket, Key=key, Body=body, Metadata=meta.to_s3(), IfNoneMatch="*"
                )
            return PutOutcome(True, meta)
        except ClientError as exc:
            if _status(exc) != 412:
                raise
        return PutOutcome(False, self.existing_meta(key, meta.start_offset))

    def _put_multipart(self, key: str, body: bytes, meta: ObjectMeta) -> None:
        upload_id = self.client.create_multipart_upload(Bucket=self.bucket, Key=key, Metadata=meta.to_s3())[
            "UploadId"
        ]
        try:
            parts: list[CompletedPartTypeDef] = []
            for number, start in enumerate(range(0, len(body), self.part_bytes), start=1):
                resp = self.client.upload_part(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=body[start : start + self.part_bytes],
                )
                parts.append({"PartNumber": number, "ETag": resp["ETag"]})
                self.pause("during_upload", f"key={key} part={number} multipart")
            self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                IfNoneMatch="*",
            )
        except BaseException:
            with contextlib.suppress(Exception):
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise

    def existing_meta(self, key: str, start_offset: int) -> ObjectMeta:
        """Metadata of the existing object at ``key``; rebuilt from its body if its metadata is gone.

        Raises:
            StorageError: it is not a sink object starting at ``start_offset``.
            ClientError, BotoCoreError: S3 failed.
        """
        head = self.client.head_object(Bucket=self.bucket, Key=key)
        try:
            meta = ObjectMeta.from_s3(head.get("Metadata", {}))
        except LayoutError:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            try:
                meta = meta_from_body(body)
            except LayoutError as exc:
                raise PermanentStorageError(
                    f"s3://{self.bucket}/{key} exists but is not a sink object ({exc}); the sink will not "
                    "overwrite it: move it out of the run folder, then start the sink again"
                ) from None
        if meta.start_offset != start_offset:
            raise PermanentStorageError(
                f"s3://{self.bucket}/{key} claims offsets {meta.start_offset}..{meta.end_offset}, "
                f"but its key says {start_offset}; the sink will not overwrite it: move it out of the "
                "run folder, then start the sink again"
            )
        return meta

    def last_object(self, folder: str) -> tuple[str, ObjectMeta] | None:
        """The object with the highest start offset under ``folder`` and its metadata, or ``None``.

        Keys that do not follow the layout are ignored (logged).

        Raises:
            ClientError, BotoCoreError, StorageError: as :meth:`existing_meta`.
        """
        best: tuple[int, str] | None = None
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=folder):
            for obj in page.get("Contents", []):
                try:
                    start = parse_key(obj["Key"]).start_offset
                except LayoutError as exc:
                    log.warning("ignoring %s: %s", obj["Key"], exc)
                    continue
                if best is None or start > best[0]:
                    best = (start, obj["Key"])
        if best is None:
            return None
        return best[1], self.existing_meta(best[1], best[0])

    def abort_uploads(self, folder: str) -> int:
        """Abort the multipart uploads under ``folder`` (left by killed writers); returns how many.

        Raises:
            ClientError, BotoCoreError: S3 failed.
        """
        resp = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=folder)
        uploads = resp.get("Uploads", [])
        for upload in uploads:
            self.client.abort_multipart_upload(
                Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
            )
        return len(uploads)


def meta_from_body(body: bytes) -> ObjectMeta:
    """Rebuild an object's metadata from its compressed body (offsets, count, checksum).

    Raises:
        LayoutError: the body is not sink lines.
    """
    sha = hashlib.sha256()
    offsets: list[int] = []
    size = 0
    for raw in iter_body_lines(body):
        offsets.append(decode_line(raw).offset)
        sha.update(raw)
        size += len(raw)
    if not offsets:
        raise LayoutError("empty object")
    return ObjectMeta(min(offsets), max(offsets), len(offsets), sha.hexdigest(), size)


# -- the runner ----------------------------------------------------------------------------------


@dataclass(eq=False)
class _Partition:
    """One assigned partition's state (owned by the event loop; no locks needed)."""

    tp: TopicPartition
    record_type: type[CompletionRecord] | type[ErrorRecord]
    position: int | None = None
    """first offset not yet in S3; ``None`` until recovered."""
    next_offset: int = 0
    """records below this are already batched or in S3 and are dropped."""
    epoch: int = 0
    """incremented at every seek: records of a fetch issued before it are stale."""
    batch: Batch | None = None
    pending: deque[ConsumerRecord[bytes, bytes]] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None
    flushing: bool = False
    paused: bool = False
    frozen: bool = False
    """being revoked or shut down: no new batches; an upload in flight may still finish and commit."""
    closed: bool = False
    last_append: float = 0.0
    mid_batch_hooked: bool = False


@dataclass
class SinkStats:
    """Counters since start (records appended, undecodable ones, objects created, 412 skips, S3
    failures retried) and the state of the two services the sink depends on: whether each
    answers, and since when (``time.monotonic()``) it has not."""

    records: int = 0
    undecodable: int = 0
    objects: int = 0
    existing: int = 0
    uncompressed_bytes: int = 0
    compressed_bytes: int = 0
    s3_failures: int = 0
    partitions: int = 0
    kafka: KafkaOutage = field(default_factory=lambda: KafkaOutage("Kafka", log))
    s3_down_since: float | None = None

    def status(self, now: float) -> str:
        """The periodic status line."""

        def state(since: float | None) -> str:
            return "up" if since is None else f"UNREACHABLE for {now - since:.0f} s"

        return (
            f"status: {self.records} records, {self.objects} objects written "
            f"({self.existing} existing kept), {self.undecodable} undecodable, "
            f"{self.partitions} partitions, Kafka {self.kafka.describe()}, "
            f"S3 {state(self.s3_down_since)} ({self.s3_failures} S3 failures retried)"
        )


class SinkMetrics(Collector):
    """Prometheus metrics of one sink, read from its :class:`SinkStats` at each scrape (its own
    registry, served by ``--metrics-port``): ``kafkagen_sink_kafka_up`` and
    ``kafkagen_sink_s3_up`` (1 or 0), ``kafkagen_sink_kafka_down_seconds``, the counters
    ``kafkagen_sink_records``, ``_objects``, ``_undecodable``, ``_s3_failures``, and the gauge
    ``kafkagen_sink_partitions``."""

    def __init__(self, stats: SinkStats) -> None:
        self.stats = stats
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def collect(self) -> Iterable[Metric]:
        s, now = self.stats, time.monotonic()
        yield GaugeMetricFamily("kafkagen_sink_kafka_up", "1 when Kafka answers", value=s.kafka.up)
        yield GaugeMetricFamily(
            "kafkagen_sink_kafka_down_seconds",
            "seconds Kafka has not answered (0 when up)",
            value=s.kafka.down_for(now),
        )
        yield GaugeMetricFamily(
            "kafkagen_sink_s3_up", "1 unless S3 calls are failing", value=s.s3_down_since is None
        )
        yield GaugeMetricFamily("kafkagen_sink_partitions", "partitions assigned", value=s.partitions)
        for name, doc, value in (
            ("records", "records appended to batches", s.records),
            ("objects", "objects written to S3", s.objects),
            ("undecodable", "records written as undecodable lines", s.undecodable),
            ("s3_failures", "S3 calls that failed and were retried", s.s3_failures),
        ):
            yield CounterMetricFamily(f"kafkagen_sink_{name}", doc, value=value)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, runner: SinkRunner) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.runner.on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.runner.on_assigned(list(assigned))


class SinkRunner:
    """The sink's consume → batch → upload → commit loop for one process (see the module docstring).

    Args:
        settings: topics, S3 location, run id, sink settings.
        store: the S3 operations (default: built from ``settings.s3``).
        pause: the test hook (default: from ``KAFKAGEN_SINK_TEST_PAUSE``).
    """

    def __init__(
        self, settings: Settings, *, store: ObjectStore | None = None, pause: TestPause | None = None
    ) -> None:
        self.settings = settings
        self.group = group_id(settings)
        self.pause = pause or TestPause(os.environ.get(PAUSE_ENV))
        self.store = store or ObjectStore(
            s3_client(settings.s3, max_attempts=3),
            settings.s3.bucket,
            settings.sink.multipart_threshold_bytes,
            self.pause,
        )
        self.types: dict[str, type[CompletionRecord] | type[ErrorRecord]] = {
            settings.topics.completions: CompletionRecord,
            settings.topics.errors: ErrorRecord,
        }
        self.stats = SinkStats(kafka=KafkaOutage(settings.kafka.bootstrap_servers, log))
        self.done = asyncio.Event()
        self._parts: dict[TopicPartition, _Partition] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._stopping = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._fatal: BaseException | None = None
        self.metrics = SinkMetrics(self.stats)
        self.status_interval_s = 10.0
        self._log_every_s = 10.0
        self._s3_failure_logged = 0.0

    # -- lifecycle -----------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Ask :meth:`run` to stop: uploads in flight get ``shutdown_deadline_s``, batches are dropped."""
        self._stopping.set()
        self._wakeup.set()

    def _consumer_kwargs(self) -> dict[str, Any]:
        sink = self.settings.sink
        kwargs = consumer_kwargs(self.settings.kafka, group_id=self.group)
        kwargs.update(
            client_id=f"{self.settings.kafka.client_id}-sink",
            session_timeout_ms=sink.session_timeout_ms,
            rebalance_timeout_ms=sink.rebalance_timeout_ms,
            heartbeat_interval_ms=sink.heartbeat_interval_ms,
            group_instance_id=sink.instance_id,
        )
        return kwargs

    async def _check_bucket(self) -> None:
        def head() -> None:
            try:
                self.store.client.head_bucket(Bucket=self.store.bucket)
            except ClientError as exc:
                if _status(exc) in (403, 404):
                    raise ConfigError(
                        f"S3 bucket {self.store.bucket!r} at {self.settings.s3.endpoint_url}: "
                        f"{'access denied' if _status(exc) == 403 else 'no such bucket'} "
                        "(check KAFKAGEN_S3__BUCKET and the keys)"
                    ) from None
                raise

        await self._retry(f"HeadBucket {self.store.bucket}", head)

    async def run(self) -> None:
        """Consume until :meth:`request_stop`. Raises the first unexpected error (the process then
        exits non-zero and, restarted, resumes from S3).

        Raises:
            ConfigError: the bucket does not exist or is not accessible.
            aiokafka.errors.KafkaError: the consumer could not start.
        """
        try:
            await self._check_bucket()
            await _ensure_sink_topics(self.settings)
            consumer = AIOKafkaConsumer(**self._consumer_kwargs())
            self._consumer = consumer
            consumer.subscribe(list(self.types), listener=_Rebalance(self))
            await consumer.start()
            log.info("sink started: group %s, topics %s", self.group, ", ".join(self.types))
            watchers = [
                asyncio.create_task(self.stats.kafka.watch(consumer)),
                asyncio.create_task(self._report()),
            ]
            try:
                await self._loop(consumer)
            finally:
                for task in watchers:
                    task.cancel()
                await self._shutdown(consumer)
        finally:
            self.done.set()

    async def _report(self) -> None:
        """Log :meth:`SinkStats.status` every ``status_interval_s`` seconds."""
        while True:
            await asyncio.sleep(self.status_interval_s)
            self.stats.partitions = len(self._parts)
            log.info("%s", self.stats.status(time.monotonic()))

    async def _loop(self, consumer: AIOKafkaConsumer) -> None:
        fetch: asyncio.Task[dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]] | None = None
        issued: dict[TopicPartition, tuple[_Partition, int]] = {}
        try:
            while not self._stopping.is_set():
                if self._fatal is not None:
                    raise self._fatal
                if fetch is None:
                    issued = {tp: (p, p.epoch) for tp, p in self._parts.items()}
                    fetch = asyncio.create_task(
                        consumer.getmany(timeout_ms=1000, max_records=self.settings.sink.poll_records)
                    )
                self._wakeup.clear()
                wake = asyncio.create_task(self._wakeup.wait())
                await asyncio.wait(
                    {fetch, wake}, timeout=self._idle_wait_s(), return_when=asyncio.FIRST_COMPLETED
                )
                wake.cancel()
                if fetch.done():
                    data, fetch = fetch.result(), None
                    for tp, records in data.items():
                        part = self._parts.get(tp)
                        if part is None or part.closed:
                            continue
                        if issued.get(tp) != (part, part.epoch):
                            # Fetched before the partition's latest seek (or by its previous
                            # owner): may lie beyond the new position. Drop and seek again.
                            if part.position is not None:
                                self._seek(part, part.next_offset)
                            continue
                        part.pending.extend(records)
                self._step(time.monotonic())
        finally:
            if fetch is not None:
                fetch.cancel()
                with contextlib.suppress(BaseException):
                    await fetch

    def _idle_wait_s(self) -> float:
        deadlines = [
            p.last_append + self.settings.sink.idle_flush_s
            for p in self._parts.values()
            if p.batch is not None and p.task is None and not p.frozen
        ]
        if not deadlines:
            return 1.0
        return min(1.0, max(0.01, min(deadlines) - time.monotonic()))

    def _step(self, now: float) -> None:
        for part in list(self._parts.values()):
            if part.frozen:
                continue
            if part.task is not None and part.task.done():
                part.task, part.flushing = None, False
            if part.position is not None and (part.task is None or part.flushing):
                self._drain(part, now)
                if (
                    part.task is None
                    and part.batch is not None
                    and now - part.last_append >= self.settings.sink.idle_flush_s
                ):
                    self._start_flush(part)
            self._set_paused(part)

    def _set_paused(self, part: _Partition) -> None:
        """Paused while recovering, and while records wait because both batches are taken."""
        consumer = self._consumer
        want = (part.task is not None and not part.flushing) or bool(part.pending)
        if consumer is None or part.closed or want == part.paused:
            return
        if want:
            consumer.pause(part.tp)
        else:
            consumer.resume(part.tp)
        part.paused = want

    def _full(self, batch: Batch) -> bool:
        sink = self.settings.sink
        return batch.count >= sink.flush_records or batch.raw_bytes >= sink.flush_bytes

    def _drain(self, part: _Partition, now: float) -> None:
        """Move pending records into the filling batch; hand a full batch to the uploader as soon
        as the previous upload of the partition is done (one uploading, one filling)."""
        sink = self.settings.sink
        while True:
            if part.batch is not None and self._full(part.batch):
                if part.task is not None:
                    return  # the previous upload is still running: the records wait in pending
                self._start_flush(part)
                continue
            if not part.pending:
                return
            rec = part.pending.popleft()
            if rec.offset < part.next_offset:
                continue
            line, ok = record_line(
                topic=rec.topic,
                partition=rec.partition,
                offset=rec.offset,
                timestamp_ms=rec.timestamp,
                key=rec.key,
                value=rec.value,
                record_type=part.record_type,
                run_id=self.settings.run_id,
            )
            if not ok:
                self.stats.undecodable += 1
                log.warning(
                    "undecodable record %s-%d@%d: written as an error line",
                    rec.topic,
                    rec.partition,
                    rec.offset,
                )
            if part.batch is None:
                part.batch = Batch(sink.compression_level)
                part.mid_batch_hooked = False
            part.batch.add(rec.offset, line)
            part.next_offset = rec.offset + 1
            part.last_append = now
            self.stats.records += 1
            if not part.mid_batch_hooked and part.batch.count >= max(1, sink.flush_records // 2):
                part.mid_batch_hooked = True
                self.pause("mid_batch", f"tp={rec.topic}-{rec.partition} records={part.batch.count}")

    def _spawn(self, part: _Partition, coro: Coroutine[Any, Any, None], *, flushing: bool) -> None:
        task = asyncio.create_task(coro)
        part.task, part.flushing = task, flushing

        def done(t: asyncio.Task[None]) -> None:
            if not t.cancelled() and t.exception() is not None and self._fatal is None:
                self._fatal = t.exception()
            self._wakeup.set()

        task.add_done_callback(done)

    def _start_flush(self, part: _Partition) -> None:
        assert part.batch is not None
        body, meta = part.batch.seal()
        part.batch = None
        self._spawn(part, self._flush(part, body, meta), flushing=True)

    # -- partition tasks -----------------------------------------------------------------------
    async def _retry(self, what: str, fn: Callable[[], T]) -> T:
        """Run blocking ``fn`` in a thread until it succeeds; transient S3 failures are retried
        forever with capped exponential backoff and "equal jitter" (AWS Architecture Blog,
        "Exponential Backoff and Jitter"). Cancellation stops the waiting, not a request already in
        flight. Once a stop was requested, a failure ends the operation (cancelled): its records
        are re-read next start.

        Raises:
            PermanentStorageError: a failure retrying cannot fix (:func:`permanent_error`); the
                runner stops with it.
        """
        delay = self.settings.sink.retry_initial_s
        attempt = 1
        while True:
            try:
                result = await asyncio.to_thread(fn)
            except (BotoCoreError, ClientError, StorageError) as exc:
                permanent = permanent_error(exc, what, self.store.bucket)
                if permanent is not None:
                    raise permanent from None
                if self._stopping.is_set():
                    log.warning("S3 %s failed while stopping: %s; left for the next start", what, exc)
                    raise asyncio.CancelledError from exc
                wait = delay / 2 + random.uniform(0, delay / 2)
                now = time.monotonic()
                self.stats.s3_failures += 1
                if self.stats.s3_down_since is None:
                    self.stats.s3_down_since = now
                if attempt <= 3 or self._s3_failure_logged + self._log_every_s <= now:
                    self._s3_failure_logged = now
                    log.warning(
                        "S3 %s failed (attempt %d): %s; retrying in %.1f s (%d S3 failures so far)",
                        what,
                        attempt,
                        exc,
                        wait,
                        self.stats.s3_failures,
                    )
                await asyncio.sleep(wait)
                delay = min(delay * 2, self.settings.sink.retry_max_s)
                attempt += 1
                continue
            if self.stats.s3_down_since is not None:
                log.info("S3 answers again after %.0f s", time.monotonic() - self.stats.s3_down_since)
                self.stats.s3_down_since = None
            return result

    def _seek(self, part: _Partition, offset: int) -> None:
        """Seek the consumer (aiokafka drops what it fetched before) and invalidate any fetch
        already issued for the partition."""
        assert self._consumer is not None
        self._consumer.seek(part.tp, offset)
        part.epoch += 1

    async def _committed(self, tp: TopicPartition) -> int | None:
        assert self._consumer is not None
        delay = self.settings.sink.retry_initial_s
        while True:
            try:
                committed: int | None = await self._consumer.committed(tp)
                return committed
            except KafkaError as exc:
                log.warning("reading the committed offset of %s failed: %r; retrying", tp, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.sink.retry_max_s)

    async def _commit(self, part: _Partition, offset: int) -> None:
        if part.closed or self._consumer is None:
            return
        try:
            await self._consumer.commit({part.tp: offset})
        except (CommitFailedError, IllegalStateError) as exc:
            log.info(
                "commit of %s at %d skipped (%s): the partition moved; S3 stays authoritative",
                part.tp,
                offset,
                exc,
            )
        except KafkaError as exc:
            log.warning(
                "commit of %s at %d failed: %r; the next commit or recovery from S3 covers it",
                part.tp,
                offset,
                exc,
            )

    async def _log_start(self, tp: TopicPartition) -> int:
        """The partition's first offset still in Kafka (retried while Kafka is unreachable)."""
        assert self._consumer is not None
        delay = self.settings.sink.retry_initial_s
        while True:
            try:
                starts = await self._consumer.beginning_offsets([tp])
                return int(starts[tp])
            except KafkaError as exc:
                log.warning("reading the first offset of %s failed: %r; retrying", tp, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.sink.retry_max_s)

    async def _recover(self, part: _Partition) -> None:
        """Find where the partition's objects end in S3 and seek there: S3 wins over the group's
        committed offset in both directions (rule 4). A commit beyond S3 means the objects behind
        it are gone from this destination (folder deleted, bucket or prefix changed): they are
        written again from Kafka, with a warning; the commit is moved to the new position."""
        s3 = self.settings.s3
        folder = partition_prefix(s3.prefix, self.settings.run_id, part.tp.topic, part.tp.partition)
        last = await self._retry(f"list {folder}", lambda: self.store.last_object(folder))
        aborted = await self._retry(f"abort uploads under {folder}", lambda: self.store.abort_uploads(folder))
        committed = await self._committed(part.tp)
        log_start = await self._log_start(part.tp)
        if part.closed:
            return
        s3_next = last[1].end_offset + 1 if last else None
        position = max(s3_next if s3_next is not None else log_start, log_start)
        where = f"s3://{self.store.bucket}/{folder}"
        if committed is not None and committed > position:
            log.warning(
                "%s-%d: the group %s committed offset %d, but %s %s: the objects were deleted or the "
                "sink's destination (bucket, prefix, run id) changed since. S3 wins: offsets %d..%d "
                "are written again from Kafka",
                part.tp.topic,
                part.tp.partition,
                self.group,
                committed,
                where,
                f"ends at offset {s3_next - 1}" if s3_next is not None else "holds no object",
                position,
                committed - 1,
            )
        if s3_next is not None and s3_next < log_start:
            log.warning(
                "%s-%d: %s ends at offset %d but Kafka keeps offsets from %d on (retention): offsets "
                "%d..%d cannot be written; the export will report the gap",
                part.tp.topic,
                part.tp.partition,
                where,
                s3_next - 1,
                log_start,
                s3_next,
                log_start - 1,
            )
        assert self._consumer is not None
        self._seek(part, position)
        part.position = part.next_offset = position
        log.info(
            "recovered %s-%d at offset %d (S3 next %s, committed %s, aborted uploads %d)",
            part.tp.topic,
            part.tp.partition,
            position,
            s3_next,
            committed,
            aborted,
        )
        if committed != position and (committed is not None or position > 0):
            await self._commit(part, position)

    async def _flush(self, part: _Partition, body: bytes, meta: ObjectMeta) -> None:
        s3 = self.settings.s3
        key = object_key(s3.prefix, self.settings.run_id, part.tp.topic, part.tp.partition, meta.start_offset)
        outcome = await self._retry(f"upload {key}", lambda: self.store.put_once(key, body, meta))
        self.pause("after_upload", f"key={key} end={meta.end_offset}")
        if part.closed:
            return
        if outcome.created:
            new = meta.end_offset + 1
            self.stats.objects += 1
            self.stats.uncompressed_bytes += meta.uncompressed_bytes
            self.stats.compressed_bytes += len(body)
            log.info(
                "wrote %s offsets %d..%d (%d records, %d bytes)",
                key,
                meta.start_offset,
                meta.end_offset,
                meta.record_count,
                len(body),
            )
        else:
            new = outcome.meta.end_offset + 1
            self.stats.existing += 1
            log.warning(
                "%s already exists with offsets %d..%d (ours: ..%d): kept it, resuming at %d",
                key,
                outcome.meta.start_offset,
                outcome.meta.end_offset,
                meta.end_offset,
                new,
            )
            if new != meta.end_offset + 1:
                # The filling batch started at our end + 1: wrong now. Re-read from the existing end.
                part.batch = None
                part.pending.clear()
                self._seek(part, new)
                part.next_offset = new
        part.position = new
        await self._commit(part, new)

    # -- rebalance -----------------------------------------------------------------------------
    def on_assigned(self, assigned: list[TopicPartition]) -> None:
        """Rebalance listener: start recovering each new partition; it stays paused until then."""
        assert self._consumer is not None
        for tp in assigned:
            record_type = self.types.get(tp.topic)
            if record_type is None:
                continue
            part = _Partition(tp, record_type)
            self._parts[tp] = part
            self.stats.partitions = len(self._parts)
            self._consumer.pause(tp)
            part.paused = True
            self._spawn(part, self._recover(part), flushing=False)

    async def on_revoked(self, revoked: list[TopicPartition]) -> None:
        """Rebalance listener: give uploads in flight a bounded time, then drop the partitions."""
        parts = [p for tp in revoked if (p := self._parts.get(tp)) is not None]
        await self._close(parts, min(10.0, self.settings.sink.rebalance_timeout_ms / 2000))

    async def _close(self, parts: list[_Partition], wait_s: float) -> None:
        for part in parts:
            part.frozen = True
        flushing = [p.task for p in parts if p.task is not None and p.flushing and not p.task.done()]
        if flushing:
            await asyncio.wait(flushing, timeout=wait_s)
        for part in parts:
            part.closed = True
            if part.task is not None and not part.task.done():
                part.task.cancel()
            self._parts.pop(part.tp, None)
        self.stats.partitions = len(self._parts)

    async def _shutdown(self, consumer: AIOKafkaConsumer) -> None:
        parts = list(self._parts.values())
        await self._close(parts, self.settings.sink.shutdown_deadline_s)
        tasks = [p.task for p in parts if p.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        await consumer.stop()
        log.info(
            "sink stopped: %d records, %d objects written, %d existing kept, %d undecodable",
            self.stats.records,
            self.stats.objects,
            self.stats.existing,
            self.stats.undecodable,
        )


# -- the faust app -------------------------------------------------------------------------------


class _HostOnly(BootStrategy):
    """faust starts no Kafka client, web server or sensors: the sink's own consumer owns Kafka."""

    enable_kafka = False
    enable_web = False
    enable_sensors = False


class SinkApp(faust.App):
    """The faust app hosting the sink (worker lifecycle, signals, logging; module docstring)."""

    BootStrategy = _HostOnly

    def _create_directories(self) -> None:
        """No data directories: the sink keeps no local state (no tables); S3 and Kafka hold it all."""


class SinkService(mode.Service):
    """Runs a :class:`SinkRunner` for the app's worker: stopping the worker stops the runner
    gracefully. A non-retriable :class:`~streams.errors.KafkagenError` (a permanent S3 error, a
    missing bucket) is logged as one error line and stops the worker as SIGTERM does, then
    :class:`SinkWorker` exits with status 1; any other error crashes the worker (status 1, with
    its traceback)."""

    def __init__(self, runner: SinkRunner, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runner = runner
        self.exit_status = 0

    @mode.Service.task
    async def _run(self) -> None:
        try:
            await self.runner.run()
        except KafkagenError as exc:
            if exc.retriable:
                raise
            log.error("sink stopped: %s", exc)
            self.exit_status = 1
            os.kill(os.getpid(), signal.SIGTERM)  # the worker's own graceful stop

    async def on_start(self) -> None:
        """Rate-limit aiokafka's repeated lines (about 100 a second while Kafka is unreachable) on
        the handlers faust's worker installed, as every kafkagen process does (:mod:`streams.logs`)."""
        for handler in logging.getLogger().handlers:
            handler.addFilter(RetriedCoordinatorLookupAsInfo())
            handler.addFilter(RepeatFilter())

    async def on_stop(self) -> None:
        self.runner.request_stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self.runner.done.wait(), self.runner.settings.sink.shutdown_deadline_s + 15
            )


class SinkWorker(faust.Worker):
    """faust's worker, exiting with :attr:`SinkService.exit_status` after a graceful stop."""

    def __init__(self, app: faust.App, service: SinkService, **kwargs: Any) -> None:
        super().__init__(app, service, **kwargs)
        self.sink_service = service

    def stop_and_shutdown(self) -> None:
        super().stop_and_shutdown()
        if self.sink_service.exit_status:
            raise SystemExit(self.sink_service.exit_status)  # not caught by mode's exiting()


def create_app(settings: Settings) -> tuple[faust.App, SinkService]:
    """The faust app (id :func:`group_id`) and the service to start with its worker.

    The broker timeouts mirror the sink consumer's (``sink.session_timeout_ms`` ...) so the app's
    configuration tells the truth about the group even though faust's own consumer is off.
    """
    sink = settings.sink
    app_id = group_id(settings)
    first = settings.kafka.bootstrap_servers.split(",")[0].strip()
    app = SinkApp(
        app_id,
        broker=f"kafka://{first}",
        web_enabled=False,
        autodiscover=False,
        broker_session_timeout=sink.session_timeout_ms / 1000,
        broker_rebalance_timeout=sink.rebalance_timeout_ms / 1000,
        broker_heartbeat_interval=sink.heartbeat_interval_ms / 1000,
        worker_redirect_stdouts=False,
    )
    return app, SinkService(SinkRunner(settings))


async def _ensure_sink_topics(settings: Settings) -> None:
    """Create the completions and dead-letter topics when missing (raises ``KafkaError``)."""
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["completions"], specs["errors"]])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sinks.s3 [settings flags]``: run the sink until SIGTERM/SIGINT.

    Any setting is a flag or ``KAFKAGEN_*`` variable (``--run-id``, ``--topics.completions``,
    ``--s3.prefix``, ``--sink.flush-records``...). Exit status: 0 after a graceful stop, 1 on a
    fatal error (a permanent S3 error: one ``sink stopped: ...`` line says what to do), 2 on bad
    settings or ``--metrics-port``, 3 when Kafka is unreachable at start (later outages are
    waited out).
    """
    parser = argparse.ArgumentParser(
        prog="python -m sinks.s3",
        description="S3 sink: the completions and dead-letter topics to S3 as zstd JSON Lines, exactly once.",
        epilog="Any setting can also be given as a flag, e.g. --sink.flush-records 5000 "
        "(see `python -m sinks.s3 --settings-help`).",
    )
    parser.add_argument("--loglevel", default="info", help="faust worker log level (default info)")
    parser.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics on 127.0.0.1:PORT (see SinkMetrics)"
    )
    parser.add_argument("--settings-help", action="store_true", help="list every settings flag")
    args, rest = parser.parse_known_args(argv)
    try:
        settings = load_settings(Settings, ["--help"] if args.settings_help else rest, prog=parser.prog)
        app, service = create_app(settings)
    except KafkagenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:  # Kafka unreachable (or silent) at start: one clear line, not a faust crash report
        asyncio.run(_ensure_sink_topics(settings))
    except (KafkaError, TimeoutError) as exc:
        print(unreachable_message(settings.kafka, exc), file=sys.stderr)
        return 3
    if args.metrics_port is not None:
        try:
            start_http_server(args.metrics_port, addr="127.0.0.1", registry=service.runner.metrics.registry)
        except (OSError, OverflowError) as exc:
            print(f"error: --metrics-port {args.metrics_port}: {exc}", file=sys.stderr)
            return 2
    worker = SinkWorker(app, service, loglevel=args.loglevel, quiet=True)
    worker.execute_from_commandline()  # exits the process: 0 graceful, 1 crash
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
