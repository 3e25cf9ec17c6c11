"""Duplicate record ids within one invocation of the producer, over all its inputs.

:class:`IdIndex` keeps a 64-bit hash of each id with where it was first seen: 32 to 64 bytes an
id, the only producer memory that grows with the input (sizes: ``docs/producer.md``, "Duplicate
ids"). "Where" is an input's index and a line packed in 64 bits (:func:`pack_where`,
:func:`unpack_where`).
"""

from __future__ import annotations

from array import array
from typing import Final

__all__ = ["LINE_BITS", "IdIndex", "pack_where", "unpack_where"]

LINE_BITS: Final = 40
"""Low bits of a "where" holding the line (lines < 2**40); the input's index is above them."""


def pack_where(input_index: int, line: int) -> int:
    """``(input_index, line)`` packed for :meth:`IdIndex.add` (``0 <= line < 2**40``,
    ``0 <= input_index < 2**24``)."""
    return input_index << LINE_BITS | line


def unpack_where(packed: int) -> tuple[int, int]:
    """The ``(input_index, line)`` that :func:`pack_where` packed."""
    return packed >> LINE_BITS, packed & ((1 << LINE_BITS) - 1)


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
        """Double the table, re-placing every hash."""
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
