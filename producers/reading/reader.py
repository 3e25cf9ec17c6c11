"""Reading one input ahead of the publisher, in a thread.

The reader thread streams the input's rows (:func:`streams.inputs.read_rows`) and parses them in
chunks of about 1 MiB (:data:`streams.inputs.CHUNK_BYTES`), at most :data:`CHUNKS_AHEAD` ahead of
the publisher; a row longer than the line limit (:func:`producers.reading.limits.line_limit`) is
skipped (reported bad) without being held. Memory: the chunks ahead with their encoded records
(about 12 MiB). Why a thread: ``docs/producer.md``, "Reading ahead".
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from producers.partitioning import input_salt
from producers.reading.maker import Parsed, RecordMaker, Rejected
from streams.errors import InputError, KafkagenError, StorageError
from streams.inputs import CHUNK_BYTES, Container, CountingRaw, InputSpec, Row, open_input, read_rows

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["CHUNKS_AHEAD", "Chunk", "InputReader", "Opened"]

CHUNKS_AHEAD: Final = 4
"""Chunks the reader thread may read and parse ahead of the publisher."""


@dataclass(slots=True)
class Chunk:
    """Rows read and parsed ahead by the reader thread.

    ``lines[i]`` is row ``i``'s raw bytes (:class:`streams.inputs.Row`: a JSON Lines line, a JSON
    array element with the separator before it, a Parquet row's JSON text), which the resume digest
    covers; ``parsed[i]`` is what it became: ``None`` for a blank line, a :class:`Rejected`, or
    ``(id, key, value, partition)``. ``long_lines`` maps an index in ``lines`` to the full length
    of a row over the limit, of which ``lines`` holds only the first ``line_limit`` bytes.
    ``raw_bytes`` counts bytes read from the source so far (compressed bytes for a compressed input).
    """

    lines: list[bytes]
    parsed: list[Parsed]
    long_lines: dict[int, int]
    raw_bytes: int
    eof: bool


@dataclass(frozen=True, slots=True)
class Opened:
    """The reader's first message: the input is open, has this identity and holds its rows so."""

    identity: str
    container: Container = "jsonl"


class InputReader:
    """Reads and parses one input in a daemon thread, at most :data:`CHUNKS_AHEAD` chunks ahead
    (why a daemon thread: ``docs/producer.md``, "Reading ahead"). Must be created in the event loop
    that reads it.

    Args:
        spec: the input.
        make: turns each non-blank line into a record; its ``salt`` is set from the input's identity.
        line_limit: bytes a line may have (:func:`producers.reading.limits.line_limit`).
        s3: returns the S3 client (called only for an ``s3://`` input).
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
        self._queue: asyncio.Queue[Chunk | Opened | BaseException] = asyncio.Queue()
        self._slots = threading.Semaphore(CHUNKS_AHEAD)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"read {spec.name}", daemon=True)
        self._thread.start()

    async def open(self) -> Opened:
        """Wait until the input is open; returns its identity and container
        (:class:`streams.inputs.OpenedInput`).

        Raises:
            InputError: the input cannot be opened or read.
            StorageError: S3 failed.
        """
        item = await self._queue.get()
        if isinstance(item, BaseException):
            raise self._error(item)
        assert isinstance(item, Opened)
        return item

    async def next_chunk(self) -> Chunk:
        """The next chunk of lines; ``eof`` is set on the last one.

        Raises:
            InputError: the input could not be read (I/O error, corrupt compressed data).
            StorageError: S3 failed.
        """
        item = await self._queue.get()
        self._slots.release()
        if isinstance(item, BaseException):
            raise self._error(item)
        assert isinstance(item, Chunk)
        return item

    def has_chunk(self) -> bool:
        """Whether a chunk is ready, so :meth:`next_chunk` will not wait."""
        return not self._queue.empty()

    def close(self) -> None:
        """Stop reading (the thread ends at its next chunk, or when a blocked read returns)."""
        self._stopped.set()
        self._slots.release()

    def _error(self, exc: BaseException) -> KafkagenError:
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, KafkagenError):
            return exc
        if isinstance(exc, BotoCoreError | ClientError):
            return StorageError(f"{self.spec.name}: reading from S3 failed: {exc}")
        return InputError(f"cannot read: {type(exc).__name__}: {exc}", source=self.spec.name)

    def _put(self, item: Chunk | Opened | BaseException) -> None:
        with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody is listening
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _run(self) -> None:
        try:
            with self._open_rows() as (rows, raw, noun):
                while not self._stopped.is_set():
                    self._slots.acquire()
                    if self._stopped.is_set():
                        return
                    chunk = self._read_chunk(rows, raw, noun)
                    self._put(chunk)
                    if chunk.eof:
                        return
        except BaseException as exc:
            self._put(exc)

    @contextlib.contextmanager
    def _open_rows(self) -> Iterator[tuple[Iterator[Row], CountingRaw, str]]:
        with open_input(self.spec, self._s3) as opened:
            # The round-robin starts where the input's identity says, not its spelling
            # (``a.jsonl`` and ``./a.jsonl`` are one input): set before any line is made.
            self._make.salt = input_salt(opened.identity)
            self._put(Opened(opened.identity, opened.container))
            rows = read_rows(opened, source=self.spec.name, limit=self._line_limit)
            yield rows, opened.raw, "line" if opened.container == "jsonl" else "record"

    def _read_chunk(self, rows: Iterator[Row], raw: CountingRaw, noun: str) -> Chunk:
        limit = self._line_limit
        make = self._make
        lines: list[bytes] = []
        parsed: list[Parsed] = []
        long_lines: dict[int, int] = {}
        size = 0
        started = time.monotonic()
        for line, total, text in rows:
            self._line += 1
            if text is not None:
                parsed.append(make(text, self._line))
            elif total > len(line):
                long_lines[len(lines)] = total
                parsed.append(Rejected(f"{noun} is {total} bytes, over the {limit}-byte limit"))
            else:
                parsed.append(None)
            lines.append(line)
            size += len(line)
            if size >= CHUNK_BYTES or time.monotonic() - started > 0.1:  # hand over what there is
                return Chunk(lines, parsed, long_lines, raw.count, eof=False)
        return Chunk(lines, parsed, long_lines, raw.count, eof=True)
