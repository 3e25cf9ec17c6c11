"""Reading a Parquet file's rows as JSON objects, batch by batch (Hugging Face datasets' files).

Read with pyarrow (``pyarrow.parquet.ParquetFile.iter_batches``, Apache Arrow's Python docs), in
record batches of :data:`BATCH_ROWS` rows, never the whole file; each row becomes the JSON object
of its columns (``RecordBatch.to_pylist``, encoded by msgspec), which is also its ``raw`` bytes.
Local files only (the footer holds the schema). The column conversions and how a Parquet input
resumes: ``docs/inputs.md``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from streams.errors import InputError
from streams.inputs.opening import OpenedInput
from streams.inputs.rows import Row

__all__ = ["BATCH_ROWS", "parquet_rows"]

BATCH_ROWS: Final = 1024
"""Rows per record batch read from a Parquet file."""


def _json_fallback(value: Any) -> Any:
    """What msgspec cannot encode itself (e.g. pyarrow's month-day-nano intervals): its text."""
    return str(value)


def parquet_rows(opened: OpenedInput, source: str, *, limit: int | None) -> Iterator[Row]:
    """The rows of the local Parquet file ``opened`` (``opened.path``), in order, as JSON rows.

    ``opened.raw.count`` follows the rows read (the file's size times the share of rows done), for
    the progress bar.

    Raises:
        InputError: not a local file, not a readable Parquet file, or a row group that cannot be
            decoded (the message names the first row of the batch).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if opened.path is None:
        raise InputError(
            "is a Parquet file, which is read from a local path only (its schema is at its end): "
            "copy it to a local file, uncompressed",
            source=source,
        )
    encode = msgspec.json.Encoder(enc_hook=_json_fallback).encode
    done = 0
    try:
        parquet = pq.ParquetFile(opened.path)
        total = parquet.metadata.num_rows
        size = os.path.getsize(opened.path)
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
            for row in batch.to_pylist():
                text = encode(row)
                if limit is not None and len(text) > limit:
                    yield Row(text[:limit], len(text), None)
                else:
                    yield Row(text, len(text), text)
            done += batch.num_rows
            opened.raw.count = size * done // max(total, 1)
    except (pa.ArrowException, OSError) as exc:
        where = f"at row {done + 1}" if done else "at its start"
        raise InputError(f"cannot be read as Parquet {where}: {exc}", source=source) from None
