"""A row of an input (:class:`Row`), and the rows of a JSON Lines stream (:func:`line_rows`).

A row's ``raw`` bytes are what the producer's resume point hashes (:mod:`producers.progress`), and
``size`` is how far the row moves its byte offset: for JSON Lines and JSON arrays the file's own
(decompressed) bytes, for Parquet each row's JSON text. A row over the byte limit keeps only its
first ``limit`` bytes and no ``text`` (the producer reports it bad), so memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

__all__ = ["Row", "line_rows"]


class Row(NamedTuple):
    """One row of an input.

    Attributes:
        raw: the bytes the resume digest covers for this row (at most ``limit`` of them).
        size: the bytes the row moves the input's offset by (``len(raw)`` unless cut at the limit).
        text: the row's JSON text (UTF-8); ``None`` for a blank line, or for a row over the limit
            (then ``size > len(raw)``).
    """

    raw: bytes
    size: int
    text: bytes | None

    @property
    def too_long(self) -> bool:
        """The row is over the byte limit (only its first ``limit`` bytes are in ``raw``)."""
        return self.size > len(self.raw)


def line_rows(readline: Callable[[int], bytes], *, limit: int | None) -> Iterator[Row]:
    """One row per line that ``readline(n)`` returns (a blank line: a row without text); a line
    over ``limit`` bytes is read to its end without being held (``None``: no limit).

    Raises:
        OSError, EOFError, zstandard.ZstdError: as ``readline`` (corrupt compressed data).
    """
    step = -1 if limit is None else limit
    while line := readline(step):
        if limit is not None and len(line) == limit and not line.endswith(b"\n"):
            total = len(line)
            while True:  # drop the rest of an over-long line without holding it
                rest = readline(limit)
                total += len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
            yield Row(line, total, None)
        elif line.isspace():
            yield Row(line, len(line), None)
        else:
            yield Row(line, len(line), line)
