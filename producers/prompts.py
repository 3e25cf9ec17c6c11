"""``python -m producers.prompts FILE [FILE ...]``: publish prompt files to the prompts topic, exactly once.

Inputs
    Local ``.jsonl`` files (``.json`` files that hold JSON Lines too), gzip or zstandard compressed
    files (detected from their first bytes, whatever their name: ``.jsonl.gz``, ``.jsonl.zst``), ``-``
    for stdin, ``s3://bucket/key`` objects, and globs of either (``data/*.jsonl``,
    ``s3://bucket/prompts/*.jsonl.zst``). Every input is streamed line by line as bytes, never
    loaded whole: a reader thread reads and parses chunks of about 1 MiB, at most four ahead of the
    publisher (so parsing goes on while a transaction commits and while the event loop compresses
    batches); a line longer than ``4 * kafka.max_message_bytes`` is skipped (reported bad) without
    being held in memory. Memory is bounded: the chunks ahead with their encoded records (about
    12 MiB), aiokafka's batches (one of at most 1 MiB per partition queued, one request in flight)
    and the duplicate-id index below. Rows become :class:`streams.records.PromptRecord` through
    :func:`producers.formats.parse_line` (formats, ids and the MT-Bench/BFCL rules are documented
    there). Blank lines are skipped; a file that is a JSON array rather than JSON Lines is refused
    (exit 2).

Partitioning
    The Kafka key is always the record id (UTF-8); ``--key-by`` only chooses the partition.
    ``balanced`` (default) deals an input's lines round-robin over the partitions: line ``n`` of
    an input goes to partition ``(n - 1 + s) % partitions``, where ``s`` is a stable hash
    (BLAKE2b) of the input's identity (below: its resolved path, S3 URI or stdin digest), so
    several small inputs do not all start on partition 0. Each input is spread to within one
    record per partition, and the choice is a function of the line, so a re-run after a crash
    puts a line where the first run did. A consumer owns whole
    partitions and nothing moves work between them, so the busiest partition sets the run's
    makespan: hashing 20,000 ids put 5 % more prompts on the busiest partition than the mean
    (``BENCHMARKS.md``, generation fleet); dealing them evens the counts. ``--key-by id`` puts a
    record on partition ``murmur2(key) % partitions``, exactly what Kafka's Java default
    partitioner does (an id always lands on the same partition; the spread is even only on
    average). ``--key-by prefix`` hashes (BLAKE2b) the record's shared prefix: its leading system
    messages and its tools, as sorted-key JSON. Prompts sharing a prefix land on the same
    partition, hence the same consumer and server and its prefix cache; a record with neither
    system message nor tools has no shared prefix and is dealt as in ``balanced``. One prefix
    shared by every record puts everything on one partition: use ``prefix`` only when there are
    several distinct prefixes.

    The topic is created when missing with ``topics.partitions`` partitions and
    ``retention.ms=-1`` (kept for replays, see :mod:`streams.topics`); an existing topic keeps its
    partition count.

Runs
    The prompts topic is ``<run id>.prompts`` unless ``--topics.prompts`` names another
    (:mod:`streams.naming`), and every record carries the run id. A prompts topic belongs to one
    run (``docs/runs.md``): publishing into a topic whose records carry another run id is refused
    with exit 2 before anything is sent (to generate run A's prompts again under a new run id, start
    the consumers with ``--replay-of A`` instead). Publishing again under the same run id resumes.

Exactly once, across crashes
    Each input is published by a *transactional* producer (``transactional_id`` =
    ``kafkagen-prompts-<hash of the progress key>``, so stable per input). Records are sent in
    transactions of at most ``producer.checkpoint_every`` records or ``checkpoint_interval_s``
    seconds, whichever comes first: the age of the open transaction is checked after every record,
    while waiting for a slow input and while the rate limiter (``max_records_per_s``) sleeps, and
    ``checkpoint_interval_s`` must be below a third of ``producer.transaction_timeout_ms`` (60 s),
    so the broker never aborts a transaction of a live producer however slowly it publishes. Every
    transaction also writes one record to the compacted
    ``topics.producer_progress`` topic: key = the progress key, value = :class:`ProgressRecord`
    (the last input line handled, the byte offset after it, a SHA-256 of the input bytes up to
    there, the count of records published). Records and resume point are committed atomically.
    A SIGKILL leaves the open transaction uncommitted: readers with ``isolation_level=
    read_committed`` (as :func:`streams.kafka.consumer_kwargs` sets) never see its records, and the
    re-run's producer, with the same transactional id, fences the dead one and makes the broker
    abort that transaction (without a re-run the broker aborts it after the transaction timeout,
    ``producer.transaction_timeout_ms``; until then read_committed consumers of the touched
    partitions wait). The re-run then
    reads the progress topic up to its high watermark (waiting for any open transaction of another
    producer to end) and skips every line at or before the committed line. So each record is
    committed exactly once, however often the producer is killed; records of aborted transactions
    stay in the log, invisible to read_committed readers.

    The progress key is ``["<prompts topic>", "<run id>", "<input identity>"]`` (JSON): the
    identity is the resolved absolute path of a local file, the ``s3://bucket/key`` URI of an
    object, or ``stdin:<SHA-256 of its first 64 KiB>`` for stdin (which has no name; a stdin
    input shorter than 64 KiB that later grows is therefore a new input, published again in full:
    give input that grows as a file). A new run id
    therefore publishes the file again, under that run; the same run id resumes or skips it
    (``skipped`` in the summary). Moving or renaming a file gives it a new identity: it is
    published again (``--run-id`` unchanged means its ids would then appear twice: keep paths
    stable). The input's content is checked, not its size or mtime: on resume the skipped lines
    must hash to the stored SHA-256 at the stored offset. A file that grew (lines appended) resumes
    and publishes the new lines; a file whose already-published part changed, or that got shorter,
    is refused with exit 2 (restore it, or ``--from-scratch``, which ignores the stored progress
    and publishes everything again). Resuming with other mapping options (format, fields, system
    prompt, tags) is refused the same way.

    Skipped lines are still parsed (not published), so a resumed run reports the same bad lines and
    the same duplicate ids as an uninterrupted one; that costs the CPU of parsing them (about 10 µs
    per 1.7 KB line). Two producers on the same input fence each other: the older one stops with
    exit 3.

Bad lines and duplicate ids
    Invalid JSON, bytes that are not UTF-8, missing or mistyped fields, empty messages, a record
    whose encoding exceeds the prompts topic's ``max.message.bytes`` (the smaller of the topic's
    config and ``kafka.max_message_bytes``), and a record id already seen in this invocation (over
    all its inputs) are not published. Each is printed on stderr (the first 20, then a count) and
    written to the bad-lines report (``--bad-lines``, default ``./bad-lines.jsonl``, created, and
    truncated, only when a line is bad) as ``{"file", "line", "id"?, "reason"}``. Duplicate ids are
    found with an in-memory index of 64-bit hashes of the ids (:class:`IdIndex`: 16 bytes a slot,
    at most half full: 32 MiB for 900K ids, 48 MiB while it doubles, against ~120 MiB for a dict
    of the id strings). This is the only memory that grows with the input (32 to 64 bytes an id).
    Ids are not compared across separate invocations.

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
import hashlib
import io
import logging
import os
import signal
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, NamedTuple, cast, get_args

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import IllegalOperation, KafkaError, ProducerFenced
from aiokafka.partitioner import murmur2
from pydantic import BaseModel
from tqdm import tqdm

from producers.formats import FormatName, MappingOptions, parse_line
from streams import naming
from streams.config import KeyBy, Settings, load_settings
from streams.errors import ConfigError, ForeignRunError, InputError, KafkagenError, StorageError
from streams.inputs import CHUNK_BYTES, CountingRaw, InputSpec, open_input, resolve_inputs
from streams.kafka import client_kwargs, consumer_kwargs, producer_kwargs, unreachable_message
from streams.records import ProgressRecord, PromptRecord, RecordDecodeError, decode, encode, key_of
from streams.runs import describe_owners, foreign_owners, topic_owners
from streams.topics import ensure_topics, topic_specs

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

PROG: Final = "python -m producers.prompts"

EXIT_OK: Final = 0
EXIT_BAD_LINES: Final = 1
EXIT_USAGE: Final = 2
EXIT_SERVICE: Final = 3
EXIT_INTERRUPTED: Final = 130

RECORD_OVERHEAD_BYTES: Final = 128
"""Bytes a record adds to its key and value inside a batch (headers, varints, batch header), rounded up."""
CHUNKS_AHEAD: Final = 4
"""Chunks the reader thread may read and parse ahead of the publisher."""
LINGER_S: Final = 0.2
"""Seconds a partition's partly filled batch may wait in this process before it is sent anyway."""
SHOWN_BAD_LINES: Final = 20


# --- the progress topic's records --------------------------------------------------------------


def options_fingerprint(options: MappingOptions) -> dict[str, Any]:
    """The mapping options that shape a record's content, as stored in :class:`ProgressRecord`."""
    return {
        "format": options.format.value,
        "prompt_field": options.prompt_field,
        "id_field": options.id_field,
        "system": options.system,
        "keep_fields": list(options.keep_fields),
        "tags": list(options.tags),
    }


def progress_key(topic: str, run_id: str, identity: str) -> bytes:
    """The progress topic key of one input: JSON ``[topic, run_id, identity]`` (UTF-8)."""
    return msgspec.json.encode([topic, run_id, identity])


def transactional_id(key: bytes) -> str:
    """The Kafka ``transactional_id`` of the producer publishing the input with progress ``key``."""
    return "kafkagen-prompts-" + hashlib.blake2b(key, digest_size=12).hexdigest()


# --- partitioning ------------------------------------------------------------------------------


def _stable_hash(data: bytes) -> int:
    """A 64-bit hash of ``data`` (BLAKE2b) that, unlike ``hash()``, is the same in every process."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def input_salt(identity: str) -> int:
    """The stable offset (>= 0) an input's round-robin starts from: a hash of its identity."""
    return _stable_hash(identity.encode())


def partition_for(
    record: PromptRecord, key: bytes, partitions: int, key_by: KeyBy, *, line: int, salt: int
) -> int:
    """The prompts-topic partition of ``record`` (see "Partitioning" in the module docstring).

    Args:
        key: the record's Kafka key (:func:`streams.records.key_of` of its id).
        partitions: the topic's partition count (> 0).
        line: the record's 1-based line number in its input.
        salt: :func:`input_salt` of the input's identity.
    """
    if key_by == "id":
        return (int(murmur2(key)) & 0x7FFFFFFF) % partitions
    if key_by == "prefix":
        system: list[dict[str, Any]] = []
        for message in record.messages:
            if message.get("role") != "system":
                break
            system.append(message)
        if system or record.tools:
            prefix = msgspec.json.encode([system, record.tools or []], order="sorted")
            return _stable_hash(prefix) % partitions
    return (line - 1 + salt) % partitions


# --- duplicate ids -----------------------------------------------------------------------------


class IdIndex:
    """A set of record ids remembering where each was first seen, in bounded bytes per id.

    Open addressing with linear probing over two ``array('Q')``: the id's 64-bit hash (Python's
    keyed SipHash of the string; 0 marks an empty slot) and an opaque 64-bit "where". The table
    doubles when half full: 16 bytes per slot, so 32 to 64 bytes per id. Two distinct ids share a
    hash with probability about ``n**2 / 2**65`` (2e-8 for 900K ids): the later one would be
    reported as a duplicate.
    """

    def __init__(self, capacity: int = 1 << 16) -> None:
        size = 1 << max(4, (capacity - 1).bit_length())
        self._hashes = array("Q", [0]) * size
        self._where = array("Q", [0]) * size
        self._mask = size - 1
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, record_id: str, where: int) -> int | None:
        """Remember ``record_id`` as seen at ``where`` (0 ≤ where < 2**64).

        Returns:
            ``None`` when the id is new, else the ``where`` it was first added with.
        """
        h = (hash(record_id) & 0xFFFFFFFFFFFFFFFF) or 1
        hashes, mask = self._hashes, self._mask
        i = h & mask
        while True:
            current = hashes[i]
            if current == 0:
                break
            if current == h:
                return self._where[i]
            i = (i + 1) & mask
        hashes[i] = h
        self._where[i] = where
        self._count += 1
        if self._count * 2 > mask:
            self._grow()
        return None

    def _grow(self) -> None:
        old_hashes, old_where = self._hashes, self._where
        size = (self._mask + 1) * 2
        hashes = array("Q", [0]) * size
        where = array("Q", [0]) * size
        mask = size - 1
        for h, w in zip(old_hashes, old_where, strict=True):
            if h:
                i = h & mask
                while hashes[i]:
                    i = (i + 1) & mask
                hashes[i] = h
                where[i] = w
        self._hashes, self._where, self._mask = hashes, where, mask


_LINE_BITS: Final = 40
"""Low bits of an :class:`IdIndex` "where" holding the line; the input's index is above them."""


# --- inputs ------------------------------------------------------------------------------------


class Rejected(NamedTuple):
    """A line that cannot be published: why, and its record id when that is known."""

    reason: str
    record_id: str | None = None


Parsed = tuple[str, bytes, bytes, int] | Rejected | None
"""One input line made ready to publish: ``(id, key, value, partition)``; see :class:`_Chunk`."""


class RecordMaker:
    """Turns input lines into ``(id, key, value, partition)`` (or :class:`Rejected`): parsing,
    encoding, the size check and the partition. Pure, so it runs in the reader thread.

    Args:
        record_limit: bytes a record may take in a batch (the topic's ``max.message.bytes``).
    """

    def __init__(
        self,
        source: str,
        options: MappingOptions,
        *,
        partitions: int,
        key_by: KeyBy,
        record_limit: int,
    ) -> None:
        self.source = source
        self.options = options
        self.partitions = partitions
        self.key_by: KeyBy = key_by
        self.salt = input_salt(source)  # the reader sets the input's identity once it is open
        self.record_limit = record_limit

    def __call__(self, raw: bytes, line: int) -> tuple[str, bytes, bytes, int] | Rejected:
        try:
            record = parse_line(raw, source=self.source, line=line, options=self.options)
        except InputError as exc:
            return Rejected(exc.reason, _id_of_bad_row(raw, self.options))
        value = encode(record)
        key = key_of(record.id)
        size = len(value) + len(key) + RECORD_OVERHEAD_BYTES
        if size > self.record_limit:
            return Rejected(
                f"record is {size} bytes encoded, over the prompts topic's limit of {self.record_limit} "
                "bytes (max.message.bytes)",
                record.id,
            )
        partition = partition_for(record, key, self.partitions, self.key_by, line=line, salt=self.salt)
        return record.id, key, value, partition


@dataclass(slots=True)
class _Chunk:
    """Lines read and parsed ahead by the reader thread.

    ``parsed[i]`` is what ``lines[i]`` became: ``None`` for a blank line, a :class:`Rejected`, or
    ``(id, key, value, partition)``. ``long_lines`` maps an index in ``lines`` to the full length
    of a line over the limit, of which ``lines`` holds only the first ``line_limit`` bytes.
    ``raw_bytes`` counts bytes read from the source so far (compressed bytes for a compressed input).
    """

    lines: list[bytes]
    parsed: list[Parsed]
    long_lines: dict[int, int]
    raw_bytes: int
    eof: bool


@dataclass(frozen=True, slots=True)
class _Opened:
    identity: str


class _InputReader:
    """Reads and parses one input in a daemon thread, at most :data:`CHUNKS_AHEAD` chunks ahead.

    Parsing here, off the event loop, lets it run while the event loop thread compresses batches
    (aiokafka's zstd releases the GIL). A daemon thread (rather than an executor) so that a read
    blocked on stdin never keeps the process from exiting.
    """

    def __init__(
        self, spec: InputSpec, make: RecordMaker, *, line_limit: int, s3: Callable[[], S3Client]
    ) -> None:
        self.spec = spec
        self._make = make
        self._line = 0
        self._line_limit = line_limit
        self._s3 = s3
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[_Chunk | _Opened | BaseException] = asyncio.Queue()
        self._slots = threading.Semaphore(CHUNKS_AHEAD)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"read {spec.name}", daemon=True)
        self._thread.start()

    async def open(self) -> str:
        """Wait until the input is open; returns its identity (see the module docstring).

        Raises:
            InputError: the input cannot be opened or read.
            StorageError: S3 failed.
        """
        item = await self._queue.get()
        if isinstance(item, BaseException):
            raise self._error(item)
        assert isinstance(item, _Opened)
        return item.identity

    async def next_chunk(self) -> _Chunk:
        """The next chunk of lines; ``eof`` is set on the last one.

        Raises:
            InputError: the input could not be read (I/O error, corrupt compressed data).
            StorageError: S3 failed.
        """
        item = await self._queue.get()
        self._slots.release()
        if isinstance(item, BaseException):
            raise self._error(item)
        assert isinstance(item, _Chunk)
        return item

    def has_chunk(self) -> bool:
        """Whether a chunk is ready, so :meth:`next_chunk` will not wait."""
        return not self._queue.empty()

    def close(self) -> None:
        self._stopped.set()
        self._slots.release()

    def _error(self, exc: BaseException) -> KafkagenError:
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, KafkagenError):
            return exc
        if isinstance(exc, BotoCoreError | ClientError):
            return StorageError(f"{self.spec.name}: reading from S3 failed: {exc}")
        return InputError(f"cannot read: {type(exc).__name__}: {exc}", source=self.spec.name)

    def _put(self, item: _Chunk | _Opened | BaseException) -> None:
        with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody is listening
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _run(self) -> None:
        try:
            with self._open_lines() as (lines, raw):
                while not self._stopped.is_set():
                    self._slots.acquire()
                    if self._stopped.is_set():
                        return
                    chunk = self._read_chunk(lines, raw)
                    self._put(chunk)
                    if chunk.eof:
                        return
        except BaseException as exc:
            self._put(exc)

    @contextlib.contextmanager
    def _open_lines(self) -> Iterator[tuple[io.BufferedIOBase, CountingRaw]]:
        with open_input(self.spec, self._s3) as opened:
            # The round-robin starts where the input's identity says, not its spelling
            # (``a.jsonl`` and ``./a.jsonl`` are one input): set before any line is made.
            self._make.salt = input_salt(opened.identity)
            self._put(_Opened(opened.identity))
            yield opened.lines, opened.raw

    def _read_chunk(self, stream: io.BufferedIOBase, raw: CountingRaw) -> _Chunk:
        limit = self._line_limit
        make = self._make
        lines: list[bytes] = []
        parsed: list[Parsed] = []
        long_lines: dict[int, int] = {}
        size = 0
        started = time.monotonic()
        readline = stream.readline
        while size < CHUNK_BYTES:
            line = readline(limit)
            if not line:
                return _Chunk(lines, parsed, long_lines, raw.count, eof=True)
            self._line += 1
            if len(line) == limit and not line.endswith(b"\n"):
                total = len(line)
                while True:  # drop the rest of an over-long line without holding it
                    rest = readline(limit)
                    total += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
                long_lines[len(lines)] = total
                parsed.append(Rejected(f"line is {total} bytes, over the {limit}-byte limit"))
            elif line.isspace():
                parsed.append(None)
            else:
                parsed.append(make(line, self._line))
            lines.append(line)
            size += len(line)
            if time.monotonic() - started > 0.1:  # a slow input: hand over what there is
                break
        return _Chunk(lines, parsed, long_lines, raw.count, eof=False)


# --- bad lines ---------------------------------------------------------------------------------


class _ReportRow(msgspec.Struct, omit_defaults=True):
    file: str
    line: int
    reason: str
    id: str | None = None


class BadLineReport:
    """Reports bad lines: on stderr (the first ``shown`` of them) and as JSONL rows in ``path``.

    The report file is created (truncated) at the first bad line only.
    """

    def __init__(self, path: Path, *, echo: Callable[[str], None], shown: int = SHOWN_BAD_LINES) -> None:
        self.path = path
        self.count = 0
        self._echo = echo
        self._shown = shown
        self._file: IO[bytes] | None = None
        self._encoder = msgspec.json.Encoder()

    def add(self, source: str, line: int, reason: str, record_id: str | None = None) -> None:
        """Report ``source:line`` as bad for ``reason`` (``record_id`` when it is known)."""
        self.count += 1
        if self.count <= self._shown:
            self._echo(f"bad line {source}:{line}: {reason}")
        if self._file is None:
            self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self._file.write(self._encoder.encode(_ReportRow(source, line, reason, record_id)) + b"\n")

    def close(self) -> None:
        """Flush and close the report; print how many bad lines were not shown."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.count > self._shown:
            self._echo(f"... and {self.count - self._shown} more bad lines")
        if self.count:
            self._echo(f"bad-lines report: {self.path} ({self.count} rows)")


def _id_of_bad_row(raw: bytes, options: MappingOptions) -> str | None:
    """The id of a row that failed to normalise, when its JSON names one (for the report)."""
    try:
        row = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(row, dict):
        return None
    for name in (options.id_field, "custom_id", "question_id", "id"):
        value = row.get(name) if name else None
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
    return None


# --- the progress topic ------------------------------------------------------------------------


class ProgressStore:
    """The latest :class:`ProgressRecord` of every input published to this prompts topic under this
    run id, read from the progress topic (other keys are skipped, not kept).

    Reads with ``read_committed``, so only resume points of committed transactions count.
    """

    def __init__(self, settings: Settings) -> None:
        self._tp = TopicPartition(settings.topics.producer_progress, 0)
        # Keys are JSON [topic, run_id, identity]: ours start with '["<topic>","<run id>",'.
        self._prefix = msgspec.json.encode([settings.topics.prompts, settings.run_id])[:-1] + b","
        base = consumer_kwargs(settings.kafka, group_id=None)
        self._consumer = AIOKafkaConsumer(**base, fetch_max_wait_ms=100)
        # The high watermark (end of the log, committed or not) comes from a read_uncommitted probe.
        self._probe = AIOKafkaConsumer(**{**base, "isolation_level": "read_uncommitted"})
        self._latest: dict[bytes, ProgressRecord] = {}

    async def start(self) -> None:
        await self._consumer.start()
        await self._probe.start()
        self._consumer.assign([self._tp])
        await self._consumer.seek_to_beginning(self._tp)

    async def stop(self) -> None:
        await self._consumer.stop()
        await self._probe.stop()

    def get(self, key: bytes) -> ProgressRecord | None:
        """The latest committed progress of ``key`` read so far, if any."""
        return self._latest.get(key)

    async def refresh(self, *, timeout_s: float = 120.0, echo: Callable[[str], None] = print) -> None:
        """Read every progress record committed before this call.

        Reads up to the high watermark found now; records of a transaction still open (another
        producer's, or one killed less than the 60 s transaction timeout ago) become readable only
        when it commits or aborts, so this may wait for that.

        Raises:
            KafkaError: the broker could not be asked, or the wait exceeded ``timeout_s`` seconds.
        """
        end = (await self._probe.end_offsets([self._tp]))[self._tp]
        started = time.monotonic()
        warned = False
        while await self._consumer.position(self._tp) < end:
            batch = await self._consumer.getmany(self._tp, timeout_ms=200, max_records=10000)
            for message in batch.get(self._tp, []):
                if message.key is None or not message.key.startswith(self._prefix):
                    continue
                if message.value is None:
                    self._latest.pop(message.key, None)
                    continue
                # Not ours or from a future schema: the previous resume point stays in force.
                with contextlib.suppress(RecordDecodeError):
                    self._latest[message.key] = decode(message.value, ProgressRecord)
            waited = time.monotonic() - started
            if waited > 5 and not warned:
                warned = True
                echo(
                    f"waiting for an open transaction on {self._tp.topic} to end (another producer, or one "
                    "killed less than a minute ago)"
                )
            if waited > timeout_s:
                raise KafkaError(
                    f"the progress topic {self._tp.topic} did not become readable in {timeout_s} s"
                )


# --- publishing --------------------------------------------------------------------------------


@dataclass
class InputStats:
    """What happened to one input (counts of lines; bytes of the decompressed input)."""

    name: str
    published: int = 0
    skipped: int = 0
    """good lines already published by an earlier run."""
    bad: int = 0
    blank: int = 0
    lines: int = 0
    bytes: int = 0
    seconds: float = 0.0


@dataclass
class RunResult:
    """The totals of one invocation, over all its inputs."""

    inputs: list[InputStats] = field(default_factory=list)
    seconds: float = 0.0

    def total(self, name: str) -> int:
        return sum(int(getattr(s, name)) for s in self.inputs)

    def summary(self) -> str:
        """The final summary line."""
        rate = self.total("bytes") / self.seconds if self.seconds > 0 else 0.0
        shown = f"{rate / 1e6:.1f} MB/s" if rate >= 1e6 else f"{rate / 1e3:.1f} kB/s"
        return (
            f"summary: published {self.total('published')}, skipped {self.total('skipped')} (already "
            f"published by an earlier run), bad {self.total('bad')}, {self.total('bytes')} bytes in "
            f"{self.seconds:.2f} s ({shown})"
        )


@dataclass
class _Context:
    """Everything the inputs of one invocation share."""

    settings: Settings
    options: MappingOptions
    partitions: int
    record_limit: int
    line_limit: int
    store: ProgressStore
    index: IdIndex
    report: BadLineReport
    echo: Callable[[str], None]
    s3: Callable[[], S3Client]
    from_scratch: bool
    progress_bar: bool
    inputs: list[InputSpec]


class InputChangedError(InputError):
    """An input differs from what an earlier run of the same run id published from it."""


class _InputPublisher:
    """Publishes one input in transactions; see the module docstring for the protocol."""

    def __init__(self, ctx: _Context, spec: InputSpec, file_index: int) -> None:
        self.ctx = ctx
        self.spec = spec
        self.file_index = file_index
        self.stats = InputStats(spec.name)
        settings = ctx.settings
        self.topic = settings.topics.prompts
        self.progress_topic = settings.topics.producer_progress
        self.key_by = settings.producer.key_by
        self.checkpoint_every = settings.producer.checkpoint_every
        self.checkpoint_interval_s = settings.producer.checkpoint_interval_s
        self.max_rate = settings.producer.max_records_per_s
        self.hasher = hashlib.sha256()
        self.line = 0
        self.offset = 0
        self.builders: dict[int, Any] = {}
        self.unsent_since: float | None = None
        self.txn_futures: list[asyncio.Future[Any]] = []
        self.txn_open = False
        self.txn_started = 0.0
        self.txn_records = 0
        self.committed_line = 0
        self.producer: Any = None
        self.pkey = b""
        self.identity = ""
        self.prior: ProgressRecord | None = None

    async def run(self) -> InputStats:
        ctx = self.ctx
        started = time.monotonic()
        make = RecordMaker(
            self.spec.name,
            ctx.options,
            partitions=ctx.partitions,
            key_by=self.key_by,
            record_limit=ctx.record_limit,
        )
        reader = _InputReader(self.spec, make, line_limit=ctx.line_limit, s3=ctx.s3)
        bar: tqdm[Any] | None = None
        try:
            self.identity = await reader.open()
            self.pkey = progress_key(self.topic, ctx.settings.run_id, self.identity)
            kwargs = producer_kwargs(ctx.settings.kafka)
            self.producer = AIOKafkaProducer(
                **{
                    **kwargs,
                    "transactional_id": transactional_id(self.pkey),
                    "transaction_timeout_ms": ctx.settings.producer.transaction_timeout_ms,
                    "max_batch_size": min(kwargs["max_batch_size"], ctx.record_limit),
                }
            )
            # Starting the producer (InitProducerId) fences any earlier producer of this input and
            # aborts its open transaction; only then is the stored progress final.
            await self.producer.start()
            await ctx.store.refresh(echo=ctx.echo)
            self.prior = None if ctx.from_scratch else ctx.store.get(self.pkey)
            self._check_prior()
            bar = tqdm(
                total=self.spec.size,
                desc=self.spec.name if len(self.spec.name) <= 40 else "..." + self.spec.name[-37:],
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                file=sys.stderr,
                disable=None if ctx.progress_bar else True,
                dynamic_ncols=True,
            )
            await self._publish(reader, bar)
        finally:
            reader.close()
            if bar is not None:
                bar.close()
            if self.producer is not None:
                if self.txn_open:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(self.producer.abort_transaction(), 10)
                await self.producer.stop()
            self.stats.seconds = time.monotonic() - started
        return self.stats

    def _check_prior(self) -> None:
        prior = self.prior
        if prior is None:
            return
        name = self.spec.name
        options = options_fingerprint(self.ctx.options)
        if prior.options != options:
            changed = ", ".join(
                f"{k}: {prior.options.get(k)!r} then, {v!r} now"
                for k, v in options.items()
                if prior.options.get(k) != v
            )
            raise InputChangedError(
                f"an earlier run published lines 1-{prior.line} with other mapping options ({changed}): "
                "repeat them to resume, or pass --from-scratch or another --run-id",
                source=name,
            )
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(prior.at))
        done = f"{prior.published} records, at {when}"
        if prior.done:
            self.ctx.echo(
                f"{name}: an earlier run published all its {prior.line} lines ({done}); lines added since "
                "are published, the others only checked"
            )
        else:
            self.ctx.echo(
                f"{name}: an earlier run published lines 1-{prior.line} ({done}); continuing after line "
                f"{prior.line} (lines up to it are only checked)"
            )

    def _changed(self, what: str) -> InputChangedError:
        assert self.prior is not None
        return InputChangedError(
            f"changed since an earlier run of this run id published its lines 1-{self.prior.line}: "
            f"{what}. Restore it, or pass --from-scratch to publish it all again "
            "(the records published earlier stay on the topic, so their ids would appear twice), "
            "or use another --run-id",
            source=self.spec.name,
        )

    async def _publish(self, reader: _InputReader, bar: tqdm[Any]) -> None:
        ctx = self.ctx
        stats = self.stats
        name = self.spec.name
        index = ctx.index
        report = ctx.report
        hasher_update = self.hasher.update
        resume_line = self.prior.line if self.prior is not None else 0
        file_base = self.file_index << _LINE_BITS
        raw_seen = 0
        rate_started = time.monotonic()
        content_seen = False
        while True:
            chunk = await self._next_chunk(reader)
            long_lines = chunk.long_lines
            for i, (raw, parsed) in enumerate(zip(chunk.lines, chunk.parsed, strict=True)):
                self.line += 1
                line = self.line
                hasher_update(raw)
                self.offset += long_lines[i] if long_lines and i in long_lines else len(raw)
                if line == resume_line:
                    self._verify_resume_point()
                if parsed is None:
                    stats.blank += 1
                    continue
                if not content_seen:
                    content_seen = True
                    if raw.lstrip().startswith(b"["):
                        raise InputError(
                            "this is a JSON array, not JSON Lines (one JSON object per line): convert it, "
                            "e.g. with jq -c '.[]'",
                            source=name,
                        )
                if type(parsed) is Rejected:
                    report.add(name, line, parsed.reason, parsed.record_id)
                    stats.bad += 1
                    continue
                record_id, key, value, partition = cast(tuple[str, bytes, bytes, int], parsed)
                first = index.add(record_id, file_base | line)
                if first is not None:
                    first_file, first_line = first >> _LINE_BITS, first & ((1 << _LINE_BITS) - 1)
                    where = f"line {first_line}"
                    if first_file != self.file_index:
                        where = f"{ctx.inputs[first_file].name}:{first_line}"
                    report.add(name, line, f"duplicate id, first seen at {where}", record_id)
                    stats.bad += 1
                    continue
                if line <= resume_line:
                    stats.skipped += 1
                    continue
                await self._append(partition, key, value)
                stats.published += 1
                self.txn_records += 1
                if self.txn_records >= self.checkpoint_every or self._txn_due():
                    await self._checkpoint(done=False)
                if self.max_rate is not None:
                    ahead = rate_started + stats.published / self.max_rate - time.monotonic()
                    if ahead > 0.05:  # sleep in steps of at least 50 ms, with what is buffered sent
                        await self._submit_all()
                        await self._rate_sleep(ahead)
            stats.lines = self.line
            stats.bytes = self.offset
            bar.update(chunk.raw_bytes - raw_seen)
            raw_seen = chunk.raw_bytes
            if chunk.eof:
                break
            if self.unsent_since is not None and time.monotonic() - self.unsent_since > LINGER_S:
                await self._submit_all()
            if self.txn_open and time.monotonic() - self.txn_started > self.checkpoint_interval_s:
                await self._checkpoint(done=False)
        if self.line < resume_line:
            raise self._changed(f"it now has {self.line} lines")
        if self.line > resume_line:  # also when the last line was committed mid-chunk: mark it done
            await self._checkpoint(done=True)

    def _txn_due(self) -> bool:
        """Whether the open transaction has been open ``checkpoint_interval_s``: commit it now."""
        return self.txn_open and time.monotonic() - self.txn_started >= self.checkpoint_interval_s

    async def _rate_sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` for the rate limit, committing the open transaction meanwhile when it
        reaches ``checkpoint_interval_s``: however slow the rate, no transaction stays open past it
        (below a third of ``transaction_timeout_ms``, so the broker never aborts one). Records
        up to the current line are all sent (:meth:`_submit_all`), so the resume point is exact."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            if self.txn_open:
                due = self.txn_started + self.checkpoint_interval_s - time.monotonic()
                if due <= left:
                    await asyncio.sleep(max(due, 0.0))
                    await self._checkpoint(done=False)
                    continue
            await asyncio.sleep(left)

    def _verify_resume_point(self) -> None:
        assert self.prior is not None
        if self.offset != self.prior.offset or self.hasher.hexdigest() != self.prior.digest:
            raise self._changed(f"its first {self.line} lines differ from the ones published")

    async def _next_chunk(self, reader: _InputReader) -> _Chunk:
        """The next chunk. While waiting for it, buffered records are sent once they are
        :data:`LINGER_S` old, and an open transaction is committed at ``checkpoint_interval_s``."""
        pending = asyncio.ensure_future(reader.next_chunk())
        try:
            while True:
                linger_end = None if self.unsent_since is None else self.unsent_since + LINGER_S
                txn_end = self.txn_started + self.checkpoint_interval_s if self.txn_open else None
                deadlines = [t for t in (linger_end, txn_end) if t is not None]
                timeout = max(min(deadlines) - time.monotonic(), 0) if deadlines else None
                done, _ = await asyncio.wait({pending}, timeout=timeout)
                if done:
                    return pending.result()
                if txn_end is not None and time.monotonic() >= txn_end:
                    await self._checkpoint(done=False)
                else:
                    await self._submit_all()
        finally:
            if not pending.done():
                pending.cancel()

    async def _begin(self) -> None:
        failed = _failed_transaction(self.producer)
        if failed is not None:
            raise failed
        await self.producer.begin_transaction()
        self.txn_open = True
        self.txn_started = time.monotonic()

    async def _append(self, partition: int, key: bytes, value: bytes) -> None:
        builder = self.builders.get(partition)
        if builder is None:
            builder = self.builders[partition] = self.producer.create_batch()
            if self.unsent_since is None:
                self.unsent_since = time.monotonic()
        if builder.append(timestamp=None, key=key, value=value) is None:
            await self._submit(partition, builder)
            builder = self.builders[partition] = self.producer.create_batch()
            builder.append(timestamp=None, key=key, value=value)

    async def _submit(self, partition: int, builder: Any) -> None:
        if not self.txn_open:
            await self._begin()
        builder.close()
        try:
            self.txn_futures.append(await self.producer.send_batch(builder, self.topic, partition=partition))
        except IllegalOperation:
            raise _transaction_failure(self.producer) from None

    async def _submit_all(self) -> None:
        builders, self.builders = self.builders, {}
        self.unsent_since = None
        for partition, builder in builders.items():
            await self._submit(partition, builder)

    async def _checkpoint(self, *, done: bool) -> None:
        """Send what is buffered and the resume point, wait for every ack, then commit.

        Raises:
            KafkaError: a record batch or the progress record was refused (the transaction is
                aborted first, so nothing of it becomes visible).
        """
        await self._submit_all()
        if not self.txn_open:
            await self._begin()
        progress = ProgressRecord(
            input=self.identity,
            source=self.spec.name,
            topic=self.topic,
            run_id=self.ctx.settings.run_id,
            line=self.line,
            offset=self.offset,
            digest=self.hasher.hexdigest(),
            published=self.stats.skipped + self.stats.published,
            done=done,
            options=options_fingerprint(self.ctx.options),
            at=time.time(),
        )
        try:
            value = encode(progress)
            ack = await self.producer.send(self.progress_topic, value=value, key=self.pkey, partition=0)
        except IllegalOperation:
            raise _transaction_failure(self.producer) from None
        self.txn_futures.append(ack)
        futures, self.txn_futures = self.txn_futures, []
        results = await asyncio.gather(*futures, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            # aiokafka would commit a transaction with a failed batch in it: abort instead.
            with contextlib.suppress(Exception):
                await self.producer.abort_transaction()
            self.txn_open = False
            raise failed[0]
        late = _failed_transaction(self.producer)  # failed after the last ack arrived
        if late is not None:
            self.txn_open = False
            raise late
        await self.producer.commit_transaction()
        self.txn_open = False
        self.txn_records = 0
        self.committed_line = self.line


def _failed_transaction(producer: Any) -> BaseException | None:
    """The error that failed the producer's open transaction (for example ``ProducerFenced`` once
    a newer producer with the same transactional id started), or ``None``.

    aiokafka then refuses sends with ``IllegalOperation`` and a commit or a new transaction with
    an ``AssertionError``, and keeps the cause only in its transaction manager's private
    ``_transaction_waiter`` future (aiokafka 0.14, ``producer/transaction_manager.py``): checked
    here so the cause is what gets raised.
    """
    waiter = getattr(getattr(producer, "_txn_manager", None), "_transaction_waiter", None)
    if isinstance(waiter, asyncio.Future) and waiter.done() and not waiter.cancelled():
        error: BaseException | None = waiter.exception()
        return error
    return None


def _transaction_failure(producer: Any) -> BaseException:
    """:func:`_failed_transaction`, or a generic ``KafkaError`` when aiokafka did not keep one."""
    return _failed_transaction(producer) or cast(
        BaseException, KafkaError("the open transaction failed; run the same command again to continue")
    )


def _quiet_abandoned_kafka_futures(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Event-loop exception handler: drop asyncio's "Future exception was never retrieved" report
    for a Kafka error, pass everything else to the default handler.

    When a transaction fails (fenced by a newer producer, broker gone), aiokafka sets the error on
    futures of its own that nobody awaits any more; asyncio would print each with a traceback. The
    error has already been raised to :func:`main`, which prints it as one line, and the transaction
    was not committed, so these reports carry no information.
    """
    if isinstance(context.get("exception"), KafkaError) and "never retrieved" in context.get("message", ""):
        return
    loop.default_exception_handler(context)


async def _topic_max_message_bytes(settings: Settings, topic: str) -> int | None:
    """The topic's effective ``max.message.bytes``, or ``None`` when it cannot be described."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="admin"))
    await admin.start()
    try:
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    for response in responses:
        for _err, _msg, _type, _name, entries in response.resources:
            for entry in entries:
                if entry[0] == "max.message.bytes" and entry[1]:
                    return int(entry[1])
    return None


async def check_topic_owner(settings: Settings) -> None:
    """Refuse to publish into a prompts topic that belongs to another run (``docs/runs.md``):
    its first records carry another ``run_id`` (:func:`streams.runs.topic_owners`). A topic of
    this run id (a re-run: exactly-once resume), an empty one and one without run ids are fine.

    Raises:
        ForeignRunError: the topic belongs to another run; the message names it and the fix.
        KafkaError, TimeoutError: Kafka could not be asked.
    """
    topic, run = settings.topics.prompts, settings.run_id
    foreign = foreign_owners(await topic_owners(settings, topic), [run])
    if not foreign:
        return
    other = foreign[0]
    if settings.replay_of is not None:
        raise ForeignRunError(
            f"prompts topic {topic} belongs to {describe_owners(foreign)}, and run {run} is declared a "
            f"replay of run {settings.replay_of} (replay_of): a replay publishes nothing, it regenerates the "
            f"prompts already on {topic}: start the consumers with --replay-of {settings.replay_of}; to "
            f"publish new prompts for run {run}, unset KAFKAGEN_REPLAY_OF (they go to "
            f"{naming.prompts_topic(run)})"
        )
    raise ForeignRunError(
        f"prompts topic {topic} belongs to {describe_owners(foreign)}, not run {run}: nothing was published. "
        f"Publish to {naming.prompts_topic(run)} (the default: drop --topics.prompts / "
        f"KAFKAGEN_TOPICS__PROMPTS) or regenerate run {other} with `--replay-of {other}` on the consumers "
        "(docs/runs.md)"
    )


async def publish(
    settings: Settings,
    options: MappingOptions,
    inputs: list[InputSpec],
    *,
    report: BadLineReport,
    from_scratch: bool = False,
    progress_bar: bool = True,
    echo: Callable[[str], None],
    s3: Callable[[], S3Client],
) -> RunResult:
    """Publish ``inputs`` in order to ``settings.topics.prompts``, exactly once per run id.

    Creates the prompts and progress topics when missing. Bad lines go to ``report``. The prompts
    topic must not belong to another run (:func:`check_topic_owner`).

    Raises:
        ForeignRunError: the prompts topic belongs to another run; nothing is published.
        InputError: an input cannot be read, is a JSON array, or changed since an earlier run.
        KafkaError, asyncio.TimeoutError: Kafka is unreachable or refused the records; the open
            transaction is aborted (its records never become visible).
        ProducerFenced: another producer started publishing the same input.
    """
    result = RunResult()
    started = time.monotonic()
    specs = topic_specs(settings)
    counts = await ensure_topics(settings, [specs["prompts"], specs["producer_progress"]])
    partitions = counts[settings.topics.prompts]
    if partitions != settings.topics.partitions:
        echo(
            f"note: topic {settings.topics.prompts} exists with {partitions} partitions "
            f"(topics.partitions is {settings.topics.partitions}): using {partitions}"
        )
    await check_topic_owner(settings)
    topic_limit = await _topic_max_message_bytes(settings, settings.topics.prompts)
    record_limit = min(settings.kafka.max_message_bytes, topic_limit or settings.kafka.max_message_bytes)
    store = ProgressStore(settings)
    await store.start()
    ctx = _Context(
        settings=settings,
        options=options,
        partitions=partitions,
        record_limit=record_limit,
        line_limit=4 * settings.kafka.max_message_bytes,
        store=store,
        index=IdIndex(),
        report=report,
        echo=echo,
        s3=s3,
        from_scratch=from_scratch,
        progress_bar=progress_bar,
        inputs=inputs,
    )
    try:
        for file_index, spec in enumerate(inputs):
            stats = await _InputPublisher(ctx, spec, file_index).run()
            result.inputs.append(stats)
            if len(inputs) > 1:
                echo(
                    f"{spec.name}: published {stats.published}, skipped {stats.skipped}, bad {stats.bad}, "
                    f"{stats.lines} lines in {stats.seconds:.2f} s"
                )
    finally:
        await store.stop()
        result.seconds = time.monotonic() - started
    return result


# --- command line ------------------------------------------------------------------------------

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
    mapping = parser.add_argument_group("how rows become prompts (see producers/formats.py)")
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
    argv: list[str] = []
    for flag, _text in _settings_flags():
        dest = flag[2:].replace("-", "_")
        if hasattr(args, dest):
            argv += [flag, str(getattr(args, dest))]
    if args.key_by is not None:
        argv += ["--producer.key-by", args.key_by]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """Run the producer; returns the exit status (see the module docstring)."""
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
        loop.set_exception_handler(_quiet_abandoned_kafka_futures)
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


if __name__ == "__main__":
    # The reader thread parses without ever blocking; a short GIL switch interval (default 5 ms)
    # keeps the event loop's acks and commits prompt (measured: ~7% more throughput).
    sys.setswitchinterval(0.0005)
    sys.exit(main())
