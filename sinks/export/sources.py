"""The export's source objects: listing a run folder and reading each object, checked.

An object is read whole and checked against its metadata (SHA-256 of the body, record count,
line offsets) and its key (each line's topic and partition); a bad object is never an exception:
it is marked with its problem and contributes no line. Each line comes with the few fields of its
record the export needs (:class:`RecordHead`), and the order in which records of one id win
(:func:`rank`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from sinks.layout import Line, ObjectKey, ObjectMeta, decode_line, iter_body_lines, parse_key
from streams.errors import LayoutError, StorageError
from streams.records import PromptRecord
from streams.retry import Backoff, retry_sync
from streams.storage import storage_error

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "KEEPS",
    "Keep",
    "Rank",
    "RecordHead",
    "Source",
    "attempt_of",
    "is_foreign",
    "list_sources",
    "rank",
    "read_object",
    "where",
]

log = logging.getLogger("kafkagen.export")

READ_ATTEMPTS: Final = 6
"""Reads of one object before it counts as unreadable (each one a botocore call with its retries)."""
READ_BACKOFF: Final = Backoff(initial_s=0.5, max_s=8.0)


class RecordHead(msgspec.Struct):
    """The fields of a completion or error record the export needs."""

    id: str
    attempt: int = 0
    prompt: PromptRecord | None = None
    run_id: str | None = None
    quality: list[str] = []
    """a completion's quality flags (``keep="best"`` ranks by them)."""


_head_decoder: Final = msgspec.json.Decoder(RecordHead)


def is_foreign(head: RecordHead, run_id: str) -> bool:
    """Whether the record belongs to another run than ``run_id`` (its ``run_id`` is set and differs)."""
    return head.run_id is not None and head.run_id != run_id


Keep = Literal["latest", "best"]
"""Which record of an id the export keeps: ``latest``, the latest attempt (a regeneration replaces
what it regenerated); ``best``, the best by quality (a completion with no quality flag, then one
with flags, then a dead letter), the latest attempt among equals."""

KEEPS: Final[tuple[Keep, ...]] = ("latest", "best")

Rank = tuple[int, int, int, int, str, int]
"""(quality class, -attempt, 0 completion | 1 error, offset, topic, partition): the smallest wins.
The quality class is 0 for every line when keeping the latest attempt."""


def rank(
    kind: str,
    attempt: int,
    offset: int,
    topic: str,
    partition: int,
    *,
    quality: Sequence[str] = (),
    keep: Keep = "latest",
) -> Rank:
    """The :data:`Rank` of a line: for ``keep="latest"`` the latest attempt, then a completion, then
    the earliest offset; for ``keep="best"`` first the quality class (:data:`Keep`)."""
    error = kind != "completion"
    cls = 0 if keep == "latest" else 2 if error else 1 if quality else 0
    return (cls, -attempt, 1 if error else 0, offset, topic, partition)


def attempt_of(ranked: Rank) -> int:
    """The attempt a :data:`Rank` was made from."""
    return -ranked[1]


def where(topic: str, partition: int, offset: int, attempt: int) -> dict[str, Any]:
    """A record's source as the manifest lists it."""
    return {"topic": topic, "partition": partition, "offset": offset, "attempt": attempt}


@dataclass
class Source:
    """One object of the run folder: its key, parsed, its metadata once read, and its problem
    (``None`` while it reads well)."""

    key: str
    parsed: ObjectKey
    meta: ObjectMeta | None
    problem: str | None = None


def list_sources(client: S3Client, bucket: str, prefix: str) -> Iterator[Source]:
    """Every object under ``prefix`` whose key follows :mod:`sinks.layout` (others are logged and
    skipped).

    Raises:
        botocore.exceptions.ClientError, BotoCoreError: S3 failed (after botocore's retries).
    """
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            try:
                parsed = parse_key(obj["Key"])
            except LayoutError as exc:
                log.warning("skipping %s: %s", obj["Key"], exc)
                continue
            yield Source(obj["Key"], parsed, None)


def read_object(client: S3Client, bucket: str, source: Source) -> list[tuple[Line, RecordHead]]:
    """The object's lines with the head of each record, after checking the body against the
    metadata (SHA-256, count), each line's topic, partition and offset against the key and the
    metadata, and that every record has an id. A transient S3 failure (throttling, 5xx, a body
    read cut off: :func:`streams.storage.permanent_error` says which are not) is retried
    (:data:`READ_ATTEMPTS`, on top of botocore's own retries of the request). Never raises for a
    bad object: it sets ``source.problem`` and returns no lines (a corrupt or unreadable object
    contributes nothing)."""

    def fetch() -> tuple[Any, bytes]:
        from botocore.exceptions import BotoCoreError, ClientError  # here: a --help imports this module

        try:
            resp = client.get_object(Bucket=bucket, Key=source.key)
            return resp, resp["Body"].read()
        except (ClientError, BotoCoreError) as exc:  # a body read that broke off included
            raise storage_error(exc, f"reading {source.key}", bucket) from exc

    try:
        resp, body = retry_sync(
            f"reading s3://{bucket}/{source.key}",
            fetch,
            backoff=READ_BACKOFF,
            attempts=READ_ATTEMPTS,
            log=log,
        )
    except StorageError as exc:
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
        out: list[tuple[Line, RecordHead]] = []
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
