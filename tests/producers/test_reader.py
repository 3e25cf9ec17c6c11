"""The reader thread over a local file: identity first, then chunks of parsed lines; blank lines,
over-long lines (skipped without being held) and read errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from producers.partitioning import input_salt
from producers.reading.maker import Parsed, RecordMaker, Rejected
from producers.reading.reader import Chunk, InputReader
from streams.errors import InputError
from streams.inputs import InputSpec, MappingOptions

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def no_s3() -> S3Client:
    raise AssertionError("S3 must not be asked for a local file")


def spec_of(path: Path) -> InputSpec:
    return InputSpec(path.name, "file", str(path.resolve()), path.stat().st_size)


async def read_all(reader: InputReader) -> list[Chunk]:
    chunks = [await reader.next_chunk()]
    while not chunks[-1].eof:
        chunks.append(await reader.next_chunk())
    return chunks


async def test_lines_arrive_parsed_in_order_with_the_identity_first(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    long_row = json.dumps({"id": "long", "prompt": "y" * 5000}).encode()
    lines = [
        json.dumps({"id": "q-1", "prompt": "one"}).encode() + b"\n",
        b"   \n",
        long_row + b"\n",
        json.dumps({"id": "q-2", "prompt": "two"}).encode() + b"\n",
    ]
    path.write_bytes(b"".join(lines))
    make = RecordMaker(path.name, MappingOptions(), partitions=3, key_by="balanced", record_limit=1 << 20)
    reader = InputReader(spec_of(path), make, line_limit=1000, s3=no_s3)
    try:
        opened = await reader.open()
        assert (opened.identity, opened.container) == (str(path.resolve()), "jsonl")
        assert make.salt == input_salt(str(path.resolve()))
        chunks = await read_all(reader)
    finally:
        reader.close()
    got_lines = [line for c in chunks for line in c.lines]
    parsed: list[Parsed] = [p for c in chunks for p in c.parsed]
    assert len(got_lines) == len(parsed) == 4
    assert got_lines[0] == lines[0] and got_lines[3] == lines[3]
    assert len(got_lines[2]) == 1000  # only the first line_limit bytes are kept
    long_at = [i for c in chunks for i in c.long_lines]
    assert long_at == [2]
    assert [c.long_lines for c in chunks if c.long_lines] == [{2: len(long_row) + 1}]
    assert parsed[1] is None
    assert parsed[2] == Rejected(f"line is {len(long_row) + 1} bytes, over the 1000-byte limit")
    assert [p[0] for p in parsed if isinstance(p, tuple) and not isinstance(p, Rejected)] == ["q-1", "q-2"]
    assert chunks[-1].raw_bytes == path.stat().st_size


async def test_an_unreadable_input_raises_input_error_on_open(tmp_path: Path) -> None:
    missing = InputSpec("gone.jsonl", "file", str(tmp_path / "gone.jsonl"), 0)
    make = RecordMaker("gone.jsonl", MappingOptions(), partitions=1, key_by="balanced", record_limit=1 << 20)
    reader = InputReader(missing, make, line_limit=1000, s3=no_s3)
    try:
        with pytest.raises(InputError, match=r"gone\.jsonl: cannot read: FileNotFoundError"):
            await reader.open()
    finally:
        reader.close()
