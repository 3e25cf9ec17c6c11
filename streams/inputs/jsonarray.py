"""Splitting a JSON array file into its elements as a stream, in bounded memory.

:class:`ArraySplitter` reads the bytes in chunks and finds where each element ends by tracking
brackets, braces and strings; each element is one :class:`streams.inputs.rows.Row` whose ``raw``
runs from the end of the previous element (the ``[`` or ``,``) to the end of this one, decoded on
its own (a malformed element is one bad row), while a broken structure stops the input with
:class:`streams.errors.InputError`. The rules and why: ``docs/inputs.md``, "Files".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Final

from streams.errors import InputError
from streams.inputs.rows import Row

__all__ = ["ArraySplitter", "array_rows"]

_NON_SPACE: Final = re.compile(rb"[^ \t\r\n]")
# the rest of a string: runs of plain bytes and escapes; stops at its closing '"', at a '\' that
# ends the chunk, or at the chunk's end
_STRING_REST: Final = re.compile(rb'(?:[^"\\]++|\\.)*+', re.DOTALL)
# inside brackets: everything but brackets, and whole strings; stops at a bracket, at a string the
# chunk cuts, or at the chunk's end. Possessive (Python 3.11): a string the chunk cuts fails in
# linear time instead of backtracking through every split of its runs.
_STRUCT_SKIP: Final = re.compile(rb'(?:[^\[\]{}"]++|"(?:[^"\\]++|\\.)*+")*+', re.DOTALL)
_SCALAR_END: Final = re.compile(rb"[ \t\r\n,\]]")
_BOM: Final = b"\xef\xbb\xbf"
_CLOSER: Final = {ord("["): ord("]"), ord("{"): ord("}")}

# where the splitter is
_START, _FIRST, _NEXT, _ELEMENT, _AFTER, _END = range(6)
# inside an element
_STRUCT, _STRING, _SCALAR = range(3)


class ArraySplitter:
    """Feeds on the bytes of a JSON array and returns its elements as :class:`Row` objects.

    Args:
        source: the input's name, for errors.
        limit: bytes a row's span may have (``None``: no limit); a longer one keeps its first
            ``limit`` bytes in ``raw`` and gets ``text=None``.
    """

    def __init__(self, source: str, limit: int | None) -> None:
        self._source = source
        self._limit = limit
        self._state = _START
        self._mode = _STRUCT
        self._stack = bytearray()
        self._escape = False
        self._span = bytearray()
        self._span_size = 0
        self._element_at = 0
        self._offset = 0  # bytes of the file before the current chunk
        self.rows = 0
        """elements returned so far."""

    def _take(self, data: bytes, start: int, end: int) -> None:
        """Add ``data[start:end]`` to the current row's span (kept up to the limit)."""
        if end <= start:
            return
        keep = end - start if self._limit is None else min(end - start, self._limit - len(self._span))
        if keep > 0:
            self._span += data[start : start + keep]
        self._span_size += end - start

    def _row(self) -> Row:
        size = self._span_size
        raw = bytes(self._span)
        text = raw[self._element_at :] if len(raw) == size else None
        self._span = bytearray()
        self._span_size = 0
        self.rows += 1
        return Row(raw, size, text)

    def _broken(self, what: str, at: int) -> InputError:
        return InputError(
            f"not a valid JSON array: {what} at byte {self._offset + at} (after record {self.rows}); "
            "the records after it cannot be read",
            source=self._source,
        )

    def feed(self, data: bytes) -> list[Row]:
        """The elements that end in ``data`` (the next bytes of the file).

        Raises:
            InputError: the bytes break the array's structure (the message names the byte offset
                and the last good record).
        """
        out: list[Row] = []
        i, n = 0, len(data)
        while i < n:
            state = self._state
            if state == _ELEMENT:
                mode = self._mode
                if mode == _STRING:
                    if self._escape:
                        self._escape = False
                        self._take(data, i, i + 1)
                        i += 1
                        continue
                    j = _STRING_REST.match(data, i).end()  # type: ignore[union-attr] # matches ""
                    if j == n:
                        self._take(data, i, n)
                        break
                    if data[j] == 0x5C:  # a backslash ending the chunk: the next byte is escaped
                        self._take(data, i, n)
                        self._escape = True
                        break
                    self._take(data, i, j + 1)
                    i = j + 1
                    if self._stack:
                        self._mode = _STRUCT
                    else:
                        self._state = _AFTER
                        out.append(self._row())
                elif mode == _STRUCT:
                    j = _STRUCT_SKIP.match(data, i).end()  # type: ignore[union-attr] # matches ""
                    if j == n:
                        self._take(data, i, n)
                        break
                    c = data[j]
                    self._take(data, i, j + 1)
                    i = j + 1
                    if c == 0x22:  # '"'
                        self._mode = _STRING
                    elif c in _CLOSER:
                        self._stack.append(c)
                    else:
                        if _CLOSER[self._stack[-1]] != c:
                            raise self._broken(f"{chr(c)!r} closes {chr(self._stack[-1])!r}", j)
                        self._stack.pop()
                        if not self._stack:
                            self._state = _AFTER
                            out.append(self._row())
                else:  # a number, true, false or null: ends at white space, ',' or ']'
                    m = _SCALAR_END.search(data, i)
                    if m is None:
                        self._take(data, i, n)
                        break
                    self._take(data, i, m.start())
                    i = m.start()
                    self._state = _AFTER
                    out.append(self._row())
                continue
            m = _NON_SPACE.search(data, i)
            if m is None:
                self._take(data, i, n)
                break
            j = m.start()
            c = data[j]
            if state == _START:
                at = self._offset + j
                if at == i + self._offset and at < len(_BOM) and c == _BOM[at]:  # a byte-order mark
                    self._take(data, i, j + 1)
                    i = j + 1
                    continue
                if c != 0x5B:  # '['
                    raise self._broken(f"expected '[', found {chr(c)!r}", j)
                self._take(data, i, j + 1)
                self._state = _FIRST
                i = j + 1
            elif state in (_FIRST, _NEXT):
                self._take(data, i, j)
                if c == 0x5D:  # ']'
                    if state == _NEXT:
                        raise self._broken("a ',' before ']' (no record after it)", j)
                    self._state = _END
                    i = j + 1
                    continue
                if c == 0x2C:  # ','
                    raise self._broken("a record is missing before ','", j)
                self._element_at = len(self._span)
                self._state = _ELEMENT
                self._take(data, j, j + 1)
                i = j + 1
                if c in _CLOSER:
                    self._stack.append(c)
                    self._mode = _STRUCT
                elif c == 0x22:
                    self._mode = _STRING
                else:
                    self._mode = _SCALAR
            elif state == _AFTER:
                if c == 0x2C:
                    self._take(data, i, j + 1)
                    self._state = _NEXT
                elif c == 0x5D:
                    self._state = _END
                else:
                    raise self._broken(f"expected ',' or ']' after a record, found {chr(c)!r}", j)
                i = j + 1
            else:  # _END
                raise self._broken(f"{chr(c)!r} after the array's closing ']'", j)
        self._offset += n
        return out

    def close(self) -> None:
        """The end of the file.

        Raises:
            InputError: the array is not closed (a truncated file).
        """
        if self._state == _ELEMENT and self._mode == _SCALAR and not self._stack:
            self._state = _AFTER  # a last scalar without ']': still a truncated array
        if self._state != _END:
            raise InputError(
                f"not a valid JSON array: it ends without its closing ']' (after record {self.rows}, "
                f"{self._offset} bytes): is the file truncated?",
                source=self._source,
            )


def array_rows(read: Callable[[int], bytes], source: str, *, limit: int | None, chunk: int) -> Iterator[Row]:
    """The elements of the JSON array that ``read(n)`` returns, in order, as rows.

    Raises:
        InputError: the array's structure is broken or it is truncated
            (:meth:`ArraySplitter.feed`, :meth:`ArraySplitter.close`).
    """
    splitter = ArraySplitter(source, limit)
    while data := read(chunk):
        yield from splitter.feed(data)
    splitter.close()
