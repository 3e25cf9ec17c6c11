"""The rows of an opened input, whatever holds them: JSON Lines, a JSON array or Parquet.

One reader for the producer (:class:`producers.reading.reader.InputReader`) and the export's expected ids
(:func:`sinks.export.expected.prompt_ids_from_inputs`), so both see the same rows with the same
numbers: :func:`read_rows` yields an input's rows in order, each a :class:`streams.inputs.rows.Row`,
numbered from 1 by the caller (``metadata.line``, derived ids, the bad-lines report). One row per
line (a blank line: a row without text), per array element or per Parquet row (``docs/inputs.md``).
"""

from __future__ import annotations

from collections.abc import Iterator

from streams.inputs.jsonarray import array_rows
from streams.inputs.opening import CHUNK_BYTES, OpenedInput
from streams.inputs.parquet import parquet_rows
from streams.inputs.rows import Row, line_rows

__all__ = ["read_rows"]


def read_rows(opened: OpenedInput, *, source: str, limit: int | None) -> Iterator[Row]:
    """The rows of ``opened`` in order.

    Args:
        source: the input's name, for errors.
        limit: bytes a row may have (``None``: no limit).

    Raises:
        InputError: a JSON array whose structure is broken or truncated; a Parquet file that
            cannot be read (the message names the row).
        OSError, EOFError, zstandard.ZstdError: reading the input failed (corrupt compressed data).
    """
    if opened.container == "json_array":
        return array_rows(opened.lines.read, source, limit=limit, chunk=CHUNK_BYTES)
    if opened.container == "parquet":
        return parquet_rows(opened, source, limit=limit)
    return line_rows(opened.lines.readline, limit=limit)
