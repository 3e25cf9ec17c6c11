"""The S3 object format (keys, metadata, lines): milliseconds, no services."""

from __future__ import annotations

import msgspec
import pytest
import zstandard

from sinks.layout import (
    Line,
    ObjectKey,
    ObjectMeta,
    decode_line,
    encode_line,
    format_offset,
    iter_body_lines,
    object_key,
    parse_key,
    partition_prefix,
    run_prefix,
    single_line_json,
)
from streams.errors import LayoutError


def test_key_has_the_connect_layout_under_the_run_folder() -> None:
    key = object_key("runs/exp", "run-1", "completions", 3, 1234)
    assert key == "runs/exp/run-1/completions/partition=3/completions+3+0000001234.jsonl.zst"
    assert key.startswith(partition_prefix("runs/exp", "run-1", "completions", 3))
    assert key.startswith(run_prefix("/runs/exp/", "run-1"))
    assert object_key("", "r", "t", 0, 0) == "r/t/partition=0/t+0+0000000000.jsonl.zst"


@pytest.mark.parametrize(
    ("offset", "text"),
    [
        (0, "0000000000"),
        (9_999_999_999, "9999999999"),
        (10**10, "0000000010000000000"),
        (2**63 - 1, str(2**63 - 1)),
    ],
)
def test_offsets_are_padded_to_10_then_19_digits(offset: int, text: str) -> None:
    assert format_offset(offset) == text
    assert parse_key(object_key("p", "r", "t", 0, offset)).start_offset == offset


@pytest.mark.parametrize("prefix", ["", "a", "a/b/c"])
def test_parse_is_the_inverse_of_build(prefix: str) -> None:
    parts = ObjectKey(prefix, "run-x.1", "errors_v2", 12, 77)
    assert parse_key(parts.key) == parts


@pytest.mark.parametrize(
    "key",
    [
        "r/t/partition=0/t+0+0000000001.jsonl",  # wrong suffix
        "r/t/partition=1/t+0+0000000001.jsonl.zst",  # folder and file disagree on partition
        "r/u/partition=0/t+0+0000000001.jsonl.zst",  # ... and on topic
        "t/partition=0/t+0+0000000001.jsonl.zst",  # no run folder
        "r/t/part=0/t+0+0000000001.jsonl.zst",
        "r/t/partition=0/t+0+-1.jsonl.zst",
    ],
)
def test_malformed_keys_are_rejected(key: str) -> None:
    with pytest.raises(LayoutError):
        parse_key(key)


@pytest.mark.parametrize(
    ("run_id", "topic", "partition", "offset"),
    [
        ("a/b", "t", 0, 0),
        ("r+1", "t", 0, 0),
        ("", "t", 0, 0),
        ("r", "bad+topic", 0, 0),
        ("r", "t", -1, 0),
        ("r", "t", 0, -5),
    ],
)
def test_unsafe_parts_are_refused(run_id: str, topic: str, partition: int, offset: int) -> None:
    with pytest.raises(LayoutError):
        object_key("p", run_id, topic, partition, offset)


def test_metadata_round_trip_and_validation() -> None:
    meta = ObjectMeta(100, 199, 100, "ab" * 32, 654321)
    s3 = meta.to_s3()
    assert ObjectMeta.from_s3(s3) == meta
    assert (
        ObjectMeta.from_s3({k.upper(): v for k, v in s3.items()}) == meta
    )  # S3 metadata is case-insensitive
    with pytest.raises(LayoutError, match="lacks"):
        ObjectMeta.from_s3({k: v for k, v in s3.items() if "end" not in k})
    with pytest.raises(LayoutError, match="inconsistent"):
        ObjectMeta.from_s3({**s3, "kafkagen-record-count": "101"})  # more records than offsets
    with pytest.raises(LayoutError, match="malformed"):
        ObjectMeta.from_s3({**s3, "kafkagen-start-offset": "x"})


def test_lines_round_trip_and_json_is_made_single_line() -> None:
    pretty = b'{\n  "id": "a",\n  "text": "two\\nlines"\n}\n'
    flat = single_line_json(pretty)
    assert b"\n" not in flat and msgspec.json.decode(flat) == msgspec.json.decode(pretty)
    line = Line(
        topic="t", partition=1, offset=5, timestamp_ms=7, key="a", kind="completion", value=msgspec.Raw(flat)
    )
    raw = encode_line(line)
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    assert decode_line(raw) == line
    with pytest.raises(LayoutError):
        decode_line(b'{"topic": "t"}')


def test_body_lines_stream_across_frames_and_truncation_is_detected() -> None:
    lines = [f'{{"n":{i}}}\n'.encode() for i in range(5000)]
    cctx = zstandard.ZstdCompressor()
    body = cctx.compress(b"".join(lines[:2500])) + cctx.compress(b"".join(lines[2500:]))  # two frames
    assert list(iter_body_lines(body)) == lines
    with pytest.raises(LayoutError):
        list(iter_body_lines(cctx.compress(b'{"n":1}\n{"n":2}')))  # no final newline
    with pytest.raises(LayoutError):
        list(iter_body_lines(b"not zstd at all"))
