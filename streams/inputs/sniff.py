"""Telling a prompt file by its first bytes: the magic numbers of the compressions and of Parquet,
and whether a file in a folder input is one the producer can read (:func:`is_prompt_file`).

Magic numbers: gzip RFC 1952 section 2.3.1 (``1f 8b``), Zstandard RFC 8878 section 3.1.1
(``28 b5 2f fd``), Apache Parquet's file format spec (``PAR1`` at both ends of the file).
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Final

import zstandard

__all__ = [
    "COMPRESSED_SUFFIXES",
    "GZIP_MAGIC",
    "PARQUET_MAGIC",
    "PROMPT_SUFFIXES",
    "UTF8_BOM",
    "ZSTD_MAGIC",
    "is_prompt_file",
]

GZIP_MAGIC: Final = b"\x1f\x8b"
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
PARQUET_MAGIC: Final = b"PAR1"
UTF8_BOM: Final = b"\xef\xbb\xbf"
PROMPT_SUFFIXES: Final = (".jsonl", ".ndjson", ".json", ".parquet")
"""Names of the files a folder input reads without looking inside (before a compression suffix)."""
COMPRESSED_SUFFIXES: Final = (".gz", ".zst", ".zstd")
SNIFF_BYTES: Final = 4096
"""Bytes of (decompressed) content read to tell a file whose name says nothing."""


def is_prompt_file(path: Path) -> bool:
    """Whether the producer can read ``path`` as a prompt input: its name ends in a
    :data:`PROMPT_SUFFIXES` entry (optionally followed by a :data:`COMPRESSED_SUFFIXES` entry), or
    its content says so: Parquet's magic, an empty file, or text (plain, gzip or zstandard) whose
    first character after a byte-order mark and white space is ``{`` (JSON Lines) or ``[`` (a JSON
    array). A ``notes.txt``, a ``README.md`` or a picture is not.

    Raises:
        OSError: the file cannot be opened or read.
    """
    name = path.name.lower()
    for suffix in COMPRESSED_SUFFIXES:
        name = name.removesuffix(suffix)
    if name.endswith(PROMPT_SUFFIXES):
        return True
    with path.open("rb") as f:
        head = f.read(SNIFF_BYTES)
    if not head or head.startswith(PARQUET_MAGIC):
        return True
    try:
        if head.startswith(GZIP_MAGIC):
            with gzip.open(path, "rb") as g:
                head = g.read(SNIFF_BYTES)
        elif head.startswith(ZSTD_MAGIC):
            with path.open("rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as z:
                head = z.read(SNIFF_BYTES)
    except (EOFError, zlib.error, gzip.BadGzipFile, zstandard.ZstdError):
        return False  # corrupt from its first bytes: not a file the producer could read
    if not head:
        return True  # compressed nothing: no rows
    return head.removeprefix(UTF8_BOM).lstrip()[:1] in (b"{", b"[")
