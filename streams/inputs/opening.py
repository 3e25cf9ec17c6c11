"""Opening one resolved input for streaming: local file, stdin or S3 object, plain, gzip or
zstandard (detected from the first bytes, whatever the name), never loaded whole; the bytes read
from the source are counted (progress bars) and the input gets its identity (the resume key).

The container is told by content too (:data:`Container`): Parquet by its magic ``PAR1``, a JSON
array by ``[`` as the first character of the decompressed text, anything else is JSON Lines
(``docs/inputs.md``, "Files").
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import zstandard

from streams.inputs.resolve import InputSpec, split_s3
from streams.inputs.sniff import GZIP_MAGIC, PARQUET_MAGIC, UTF8_BOM, ZSTD_MAGIC

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["CHUNK_BYTES", "STDIN_IDENTITY_BYTES", "Container", "CountingRaw", "OpenedInput", "open_input"]

CHUNK_BYTES: Final = 1024 * 1024
"""Buffer size of an opened input (bytes)."""
STDIN_IDENTITY_BYTES: Final = 64 * 1024
"""Bytes of stdin hashed into its identity."""

Container = Literal["jsonl", "json_array", "parquet"]
"""How an input holds its rows: JSON Lines, one JSON array, or a Parquet file."""


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
    resolved path, the ``s3://`` URI or ``stdin:<SHA-256 of its first 64 KiB>``; ``container``
    says how it holds its rows, ``path`` is the local file's path (``None`` for S3, stdin and a
    compressed file; Parquet is read from it)."""

    lines: io.BufferedIOBase
    raw: CountingRaw
    identity: str
    container: Container = "jsonl"
    path: str | None = None


def _decompressed_container(lines: io.BufferedIOBase) -> Container:
    """``json_array`` when the decompressed text starts with ``[`` (after a BOM and white space),
    ``parquet`` for a compressed Parquet file (which cannot be read: it has no local path)."""
    peek = getattr(lines, "peek", None)
    head = peek(CHUNK_BYTES) if peek is not None else b""
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    return "json_array" if head.removeprefix(UTF8_BOM).lstrip().startswith(b"[") else "jsonl"


@contextlib.contextmanager
def open_input(spec: InputSpec, s3: Callable[[], S3Client]) -> Iterator[OpenedInput]:
    """Open ``spec`` for streaming, decompressing gzip or zstandard by their magic bytes, and tell
    its container (:data:`Container`, ``docs/inputs.md``).

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
        path = spec.location if spec.kind == "file" else None
        lines: io.BufferedIOBase
        if magic == PARQUET_MAGIC:
            yield OpenedInput(buffered, raw, identity, "parquet", path)
            return
        if magic.startswith(GZIP_MAGIC):
            lines = gzip.GzipFile(fileobj=buffered, mode="rb")
            path = None
        elif magic == ZSTD_MAGIC:
            reader = zstandard.ZstdDecompressor().stream_reader(buffered, read_across_frames=True)
            lines = io.BufferedReader(reader, CHUNK_BYTES)
            path = None
        else:
            lines = buffered
        yield OpenedInput(lines, raw, identity, _decompressed_container(lines), path)
