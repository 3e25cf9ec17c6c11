"""Resolving command-line inputs and opening them (local files, globs, stdin; plain, gzip and
zstandard): no Kafka, no S3."""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import zstandard

from streams.errors import InputError
from streams.inputs import STDIN_IDENTITY_BYTES, InputSpec, open_input, resolve_inputs, split_s3

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

ROWS = b"".join(b'{"prompt": "question %d"}\n' % i for i in range(1000))


def no_s3() -> S3Client:
    raise AssertionError("S3 must not be asked for local inputs")


def read_back(spec: InputSpec) -> tuple[bytes, int, str]:
    """(decompressed bytes, bytes read from the source, identity) of ``spec``."""
    with open_input(spec, no_s3) as opened:
        data = b"".join(iter(opened.lines.readline, b""))
        return data, opened.raw.count, opened.identity


def test_files_and_globs_resolve_in_order_each_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("b.jsonl", "a.jsonl", "c.txt"):
        Path(name).write_bytes(ROWS)
    specs = resolve_inputs(["b.jsonl", "*.jsonl", "-"], no_s3)
    assert [(s.name, s.kind) for s in specs] == [("b.jsonl", "file"), ("a.jsonl", "file"), ("-", "stdin")]
    assert specs[0].location == str((tmp_path / "b.jsonl").resolve())
    assert specs[0].size == len(ROWS)
    assert specs[2].size is None


@pytest.mark.parametrize(
    ("items", "reason"),
    [
        (["missing.jsonl"], "no such file"),
        (["none-*.jsonl"], "no file matches this pattern"),
        (["."], "is a folder without prompt files"),
        (["-", "-"], "stdin ('-') can be read only once"),
    ],
)
def test_inputs_that_cannot_be_resolved(
    items: list[str], reason: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=re.escape(reason)):
        resolve_inputs(items, no_s3)


def test_split_s3() -> None:
    assert split_s3("s3://bucket/prompts/a.jsonl") == ("bucket", "prompts/a.jsonl")
    for bad in ("s3://bucket", "s3:///key", "s3://bucket/"):
        with pytest.raises(InputError, match="s3://BUCKET/KEY"):
            split_s3(bad)


@pytest.mark.parametrize(
    ("name", "encode"),
    [
        ("plain.jsonl", lambda b: b),
        ("rows.jsonl.gz", gzip.compress),
        ("rows.jsonl.zst", lambda b: zstandard.ZstdCompressor().compress(b)),
        ("misnamed.jsonl", gzip.compress),  # detected from the magic bytes, not the name
    ],
)
def test_open_decompresses_by_magic_and_counts_source_bytes(
    name: str, encode: Callable[[bytes], bytes], tmp_path: Path
) -> None:
    path = tmp_path / name
    path.write_bytes(encode(ROWS))
    spec = InputSpec(name, "file", str(path.resolve()), path.stat().st_size)
    data, raw_count, identity = read_back(spec)
    assert data == ROWS
    assert raw_count == path.stat().st_size
    assert identity == str(path.resolve())


def test_stdin_identity_is_a_digest_of_its_first_64_kib(monkeypatch: pytest.MonkeyPatch) -> None:
    data = ROWS * 4
    assert len(data) > STDIN_IDENTITY_BYTES
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    read, raw_count, identity = read_back(InputSpec("-", "stdin", "-", None))
    assert read == data
    assert raw_count == len(data)
    assert identity == "stdin:" + hashlib.sha256(data[:STDIN_IDENTITY_BYTES]).hexdigest()
