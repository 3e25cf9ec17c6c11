"""The sink's S3 object format in one place: keys, object metadata and the line format. Pure.

Keys (Kafka Connect S3 sink layout, under a run folder; the start offset zero-padded to
:data:`OFFSET_WIDTH` digits, :data:`WIDE_OFFSET_WIDTH` from 10^10 on)::

    <prefix>/<run_id>/<topic>/partition=<p>/<topic>+<p>+<start offset>.jsonl.zst

Metadata: :class:`ObjectMeta` (S3 user metadata). Body: zstd JSON Lines, one :class:`Line` per Kafka
record, in offset order. Why no end offset or time is in the key, and why keys parse unambiguously:
docs/sink.md, "Objects".
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal

import msgspec
import zstandard

from streams.errors import LayoutError
from streams.runs import naming

__all__ = [
    "FORMAT",
    "KEY_SUFFIX",
    "META_END_OFFSET",
    "META_FORMAT",
    "META_RECORD_COUNT",
    "META_SHA256",
    "META_START_OFFSET",
    "META_UNCOMPRESSED_BYTES",
    "OFFSET_WIDTH",
    "WIDE_OFFSET_WIDTH",
    "Line",
    "LineKind",
    "ObjectKey",
    "ObjectMeta",
    "decode_line",
    "encode_line",
    "format_offset",
    "iter_body_lines",
    "object_key",
    "parse_key",
    "partition_prefix",
    "run_prefix",
    "single_line_json",
    "topic_prefix",
]

KEY_SUFFIX: Final = ".jsonl.zst"
OFFSET_WIDTH: Final = 10
"""Zero-padding of start offsets below 10^10 (Kafka Connect's default width)."""
WIDE_OFFSET_WIDTH: Final = 19
"""Zero-padding of start offsets from 10^10 on: the digits of the largest Kafka offset (2^63 - 1)."""
FORMAT: Final = "kafkagen-jsonl-v1"

META_FORMAT: Final = "kafkagen-format"
META_START_OFFSET: Final = "kafkagen-start-offset"
META_END_OFFSET: Final = "kafkagen-end-offset"
META_RECORD_COUNT: Final = "kafkagen-record-count"
META_SHA256: Final = "kafkagen-sha256"
META_UNCOMPRESSED_BYTES: Final = "kafkagen-uncompressed-bytes"

_TOPIC_RE: Final = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_FILE_RE: Final = re.compile(r"^(?P<topic>[A-Za-z0-9._-]+)\+(?P<partition>\d+)\+(?P<offset>\d+)\.jsonl\.zst$")

LineKind = Literal["completion", "error", "undecodable"]
"""``completion``: a CompletionRecord from the completions topic; ``error``: an ErrorRecord from
the dead-letter topic; ``undecodable``: bytes that were not a valid record of the topic's type,
``value`` is then an ErrorRecord written by the sink (``stage="sink"``) and ``raw_b64`` the bytes."""


def format_offset(offset: int) -> str:
    """A start offset as it appears in keys: 10 digits below 10^10, otherwise 19.

    Raises:
        LayoutError: a negative offset.
    """
    if offset < 0:
        raise LayoutError(f"offsets are never negative, got {offset}")
    return f"{offset:0{OFFSET_WIDTH if offset < 10**OFFSET_WIDTH else WIDE_OFFSET_WIDTH}d}"


def _check_run_id(run_id: str) -> None:
    try:
        naming.check_run_id(run_id, what="run id")
    except ValueError as exc:
        raise LayoutError(str(exc)) from None


def _check_topic(topic: str) -> None:
    if not _TOPIC_RE.match(topic):
        raise LayoutError(f"topic {topic!r} is not a Kafka topic name ([a-zA-Z0-9._-], 1-249 characters)")


def run_prefix(prefix: str, run_id: str) -> str:
    """``<prefix>/<run_id>/`` (``<run_id>/`` for an empty prefix): every object of one run.

    Raises:
        LayoutError: a run id with ``/``, ``+`` or whitespace.
    """
    _check_run_id(run_id)
    return naming.run_folder(prefix, run_id)


def topic_prefix(prefix: str, run_id: str, topic: str) -> str:
    """``<prefix>/<run_id>/<topic>/``: one topic's objects of one run.

    Raises:
        LayoutError: a malformed run id or topic name.
    """
    _check_topic(topic)
    return f"{run_prefix(prefix, run_id)}{topic}/"


def partition_prefix(prefix: str, run_id: str, topic: str, partition: int) -> str:
    """``<prefix>/<run_id>/<topic>/partition=<p>/``: the folder the sink lists to recover a
    partition's position.

    Raises:
        LayoutError: a malformed run id, topic name or a negative partition.
    """
    if partition < 0:
        raise LayoutError(f"partitions are never negative, got {partition}")
    return f"{topic_prefix(prefix, run_id, topic)}partition={partition}/"


@dataclass(frozen=True, slots=True)
class ObjectKey:
    """The parts of one object key."""

    prefix: str
    run_id: str
    topic: str
    partition: int
    start_offset: int

    @property
    def key(self) -> str:
        """The S3 key these parts name."""
        return object_key(self.prefix, self.run_id, self.topic, self.partition, self.start_offset)


def object_key(prefix: str, run_id: str, topic: str, partition: int, start_offset: int) -> str:
    """The key of the object whose first record is ``topic``/``partition`` at ``start_offset``.

    Raises:
        LayoutError: a malformed run id or topic name, a negative partition or offset.
    """
    folder = partition_prefix(prefix, run_id, topic, partition)
    return f"{folder}{topic}+{partition}+{format_offset(start_offset)}{KEY_SUFFIX}"


def parse_key(key: str) -> ObjectKey:
    """Split an object key back into its parts (the inverse of :func:`object_key`).

    Raises:
        LayoutError: the key does not follow the layout, or its folder and file name disagree
            on topic or partition.
    """
    parts = key.split("/")
    if len(parts) < 4:
        raise LayoutError(f"{key!r}: expected <prefix>/<run_id>/<topic>/partition=<p>/<file>")
    run_id, topic_dir, partition_dir, name = parts[-4:]
    match = _FILE_RE.match(name)
    if match is None:
        raise LayoutError(f"{key!r}: file name is not <topic>+<partition>+<offset>{KEY_SUFFIX}")
    topic, partition, offset = match["topic"], int(match["partition"]), int(match["offset"])
    if topic_dir != topic or partition_dir != f"partition={partition}":
        raise LayoutError(f"{key!r}: folder {topic_dir}/{partition_dir} does not match file name {name}")
    try:
        _check_run_id(run_id)
    except LayoutError as exc:
        raise LayoutError(f"{key!r}: {exc}") from None
    return ObjectKey("/".join(parts[:-4]), run_id, topic, partition, offset)


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What an object holds, stored as its S3 user metadata.

    Attributes:
        start_offset / end_offset: Kafka offsets of its first and last record (inclusive).
        record_count: lines in the body; ``end - start + 1`` unless the partition has offsets
            without records (transaction markers, compaction).
        sha256: hex SHA-256 of the uncompressed body.
        uncompressed_bytes: length of the uncompressed body.
    """

    start_offset: int
    end_offset: int
    record_count: int
    sha256: str
    uncompressed_bytes: int

    def to_s3(self) -> dict[str, str]:
        """The ``Metadata`` argument of ``PutObject`` / ``CreateMultipartUpload``."""
        return {
            META_FORMAT: FORMAT,
            META_START_OFFSET: str(self.start_offset),
            META_END_OFFSET: str(self.end_offset),
            META_RECORD_COUNT: str(self.record_count),
            META_SHA256: self.sha256,
            META_UNCOMPRESSED_BYTES: str(self.uncompressed_bytes),
        }

    @classmethod
    def from_s3(cls, metadata: Mapping[str, str]) -> ObjectMeta:
        """Read the metadata ``HeadObject``/``GetObject`` returned (keys are case-insensitive).

        Raises:
            LayoutError: a field is missing or malformed, or the offsets are inconsistent.
        """
        meta = {k.lower(): v for k, v in metadata.items()}
        try:
            start = int(meta[META_START_OFFSET])
            end = int(meta[META_END_OFFSET])
            count = int(meta[META_RECORD_COUNT])
            size = int(meta[META_UNCOMPRESSED_BYTES])
            digest = meta[META_SHA256]
        except KeyError as exc:
            raise LayoutError(
                f"object metadata lacks {exc.args[0]!r}: not written by the kafkagen sink"
            ) from None
        except ValueError as exc:
            raise LayoutError(f"malformed object metadata: {exc}") from None
        if not (0 <= start <= end) or not (0 < count <= end - start + 1) or len(digest) != 64:
            raise LayoutError(f"inconsistent object metadata: {meta}")
        return cls(start, end, count, digest, size)


class Line(msgspec.Struct, frozen=True, kw_only=True):
    """One line of an object body: a Kafka record and where it came from.

    ``timestamp_ms`` is the Kafka record timestamp (ms since the epoch); ``key`` the record key
    as UTF-8 (``None`` when absent, replacement characters when not UTF-8); ``value`` the record
    value JSON (see :data:`LineKind`); ``raw_b64`` the base64 of undecodable value bytes.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: str | None
    kind: LineKind
    value: msgspec.Raw
    raw_b64: str | None = None


_line_encoder: Final = msgspec.json.Encoder()
_line_decoder: Final = msgspec.json.Decoder(Line)


def encode_line(line: Line) -> bytes:
    """One line of a body: compact JSON and a trailing ``\\n``."""
    return _line_encoder.encode(line) + b"\n"


def decode_line(data: bytes) -> Line:
    """Parse one body line.

    Raises:
        LayoutError: not a :class:`Line`.
    """
    try:
        return _line_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise LayoutError(f"not a sink line: {exc}") from None


def single_line_json(raw: bytes) -> bytes:
    """``raw`` (valid JSON) without newlines: JSON strings cannot hold a raw newline, so any
    newline is whitespace between tokens and compacting the document removes it."""
    if b"\n" in raw or b"\r" in raw:
        return msgspec.json.format(raw, indent=-1)
    return raw


def iter_body_lines(compressed: bytes) -> Iterator[bytes]:
    """The lines (with their ``\\n``) of a zstd-compressed object body, decompressed as a stream.

    Raises:
        LayoutError: the body is not zstd or is truncated.
    """
    reader = zstandard.ZstdDecompressor().stream_reader(compressed, read_across_frames=True)
    rest = b""
    try:
        while chunk := reader.read(1 << 20):
            rest += chunk
            *lines, rest = rest.split(b"\n")
            for line in lines:
                yield line + b"\n"
    except zstandard.ZstdError as exc:
        raise LayoutError(f"object body is not valid zstd: {exc}") from None
    if rest:
        raise LayoutError("object body does not end with a newline: truncated")
