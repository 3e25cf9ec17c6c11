"""Prompt inputs as the producer reads them: resolving command-line inputs and opening one.

Shared by ``producers.prompts`` (which publishes them) and ``sinks.export --input`` (which reads
their ids to check a run for gaps), so both accept the same inputs: local files, globs, ``-`` for
stdin, ``s3://bucket/key`` objects and S3 globs, each plain, gzip or zstandard compressed
(detected from the first bytes, whatever the name). Inputs are streamed, never loaded whole.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import gzip
import hashlib
import io
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import zstandard

from streams.errors import InputError, StorageError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

CHUNK_BYTES: Final = 1024 * 1024
"""Buffer size of an opened input (bytes)."""
STDIN_IDENTITY_BYTES: Final = 64 * 1024
"""Bytes of stdin hashed into its identity."""
GLOB_CHARS: Final = frozenset("*?[")
GZIP_MAGIC: Final = b"\x1f\x8b"
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"


@dataclass(frozen=True)
class InputSpec:
    """One input (of the producer, or of the export's ``--input``), resolved from a command line.

    Attributes:
        name: as given (a glob's match: its path as globbed); ``metadata.source`` and derived ids
            use it.
        kind: ``file``, ``s3`` or ``stdin``.
        location: the absolute resolved path, the ``s3://bucket/key`` URI, or ``-``.
        size: bytes on disk or in S3 (compressed size for compressed inputs); ``None`` for stdin.
    """

    name: str
    kind: Literal["file", "s3", "stdin"]
    location: str
    size: int | None


def split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket or not key:
        raise InputError("an S3 input must be s3://BUCKET/KEY", source=uri)
    return bucket, key


def resolve_inputs(items: Sequence[str], s3: Callable[[], S3Client]) -> list[InputSpec]:
    """Expand the command line's inputs (files, globs, ``-``, ``s3://`` URIs and globs) in order.

    An input reached twice (a file named and globbed) is kept once, at its first place.

    Args:
        s3: returns the S3 client; called only when an ``s3://`` input is given.

    Raises:
        InputError: a file or S3 object that does not exist, a directory, a glob matching nothing,
            ``-`` given twice.
        StorageError: S3 could not be asked.
    """
    specs: list[InputSpec] = []
    seen: set[str] = set()

    def add(spec: InputSpec) -> None:
        if spec.location not in seen:
            seen.add(spec.location)
            specs.append(spec)

    for item in items:
        if item == "-":
            if "-" in seen:
                raise InputError("stdin ('-') can be read only once")
            add(InputSpec("-", "stdin", "-", None))
        elif item.startswith("s3://"):
            for spec in _resolve_s3(item, s3):
                add(spec)
        else:
            path = Path(item)
            if path.is_dir():
                raise InputError("is a directory: give the files in it, e.g. with a glob", source=item)
            if path.exists():
                add(InputSpec(item, "file", str(path.resolve()), path.stat().st_size))
                continue
            if not GLOB_CHARS & set(item):
                raise InputError("no such file", source=item)
            matches = sorted(m for m in glob.glob(item, recursive=True) if Path(m).is_file())
            if not matches:
                raise InputError("no file matches this pattern", source=item)
            for match in matches:
                add(InputSpec(match, "file", str(Path(match).resolve()), Path(match).stat().st_size))
    return specs


def _resolve_s3(uri: str, s3: Callable[[], S3Client]) -> list[InputSpec]:
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = split_s3(uri)
    try:
        client = s3()
        glob_at = min((key.index(c) for c in GLOB_CHARS if c in key), default=-1)
        if glob_at < 0:
            head = client.head_object(Bucket=bucket, Key=key)
            return [InputSpec(uri, "s3", uri, head["ContentLength"])]
        found: list[InputSpec] = []
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key[:glob_at])
        for page in pages:
            for obj in page.get("Contents", []):
                if fnmatch.fnmatchcase(obj["Key"], key):
                    name = f"s3://{bucket}/{obj['Key']}"
                    found.append(InputSpec(name, "s3", name, obj["Size"]))
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchKey", "NoSuchBucket", "NotFound"):
            raise InputError("no such S3 object (or bucket)", source=uri) from None
        raise StorageError(f"{uri}: S3 error: {exc}") from None
    except BotoCoreError as exc:
        raise StorageError(f"{uri}: S3 unreachable: {exc}") from None
    if not found:
        raise InputError("no S3 object matches this pattern", source=uri)
    return sorted(found, key=lambda s: s.name)


class CountingRaw(io.RawIOBase):
    """A raw stream over a ``read(n)`` function (file, stdin, S3 body), optionally replaying
    ``head`` first, counting the bytes it delivers (for the progress bar)."""

    def __init__(self, read: Callable[[int], bytes], close: Callable[[], object], head: bytes = b"") -> None:
        super().__init__()
        self._read = read
        self._close = close
        self._head = head
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            data, self._head = self._head[: len(view)], self._head[len(view) :]
        else:
            data = self._read(len(view))
        n = len(data)
        view[:n] = data
        self.count += n
        return n

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(Exception):
                self._close()
        super().close()


@dataclass(frozen=True)
class OpenedInput:
    """An open input: ``lines`` yields its decompressed bytes (``readline``), ``raw`` counts the
    bytes read from the source (compressed bytes for a compressed input), ``identity`` is the
    resolved path, the ``s3://`` URI or ``stdin:<SHA-256 of its first 64 KiB>``."""

    lines: io.BufferedIOBase
    raw: CountingRaw
    identity: str


@contextlib.contextmanager
def open_input(spec: InputSpec, s3: Callable[[], S3Client]) -> Iterator[OpenedInput]:
    """Open ``spec`` for streaming, decompressing gzip or zstandard by their magic bytes.

    Raises:
        OSError: a local file cannot be opened.
        botocore.exceptions.ClientError, BotoCoreError: an S3 object cannot be opened.
        (Corrupt compressed data raises from ``readline``: ``OSError``/``EOFError`` for gzip,
        ``zstandard.ZstdError`` for zstandard.)
    """
    head = b""
    if spec.kind == "file":
        handle = open(spec.location, "rb", buffering=0)  # noqa: SIM115 (closed by CountingRaw)
        raw = CountingRaw(handle.read, handle.close)
        identity = spec.location
    elif spec.kind == "s3":
        bucket, key = split_s3(spec.location)
        body = s3().get_object(Bucket=bucket, Key=key)["Body"]
        raw = CountingRaw(body.read, body.close)
        identity = spec.location
    else:
        stdin = cast(io.BufferedReader, sys.stdin.buffer)
        while len(head) < STDIN_IDENTITY_BYTES:
            data = stdin.read1(STDIN_IDENTITY_BYTES - len(head))
            if not data:
                break
            head += data
        raw = CountingRaw(stdin.read1, lambda: None, head)
        identity = "stdin:" + hashlib.sha256(head).hexdigest()
    with raw:
        buffered = io.BufferedReader(raw, CHUNK_BYTES)
        magic = buffered.peek(4)[:4]
        lines: io.BufferedIOBase
        if magic.startswith(GZIP_MAGIC):
            lines = gzip.GzipFile(fileobj=buffered, mode="rb")
        elif magic == ZSTD_MAGIC:
            reader = zstandard.ZstdDecompressor().stream_reader(buffered, read_across_frames=True)
            lines = io.BufferedReader(reader, CHUNK_BYTES)
        else:
            lines = buffered
        yield OpenedInput(lines, raw, identity)
