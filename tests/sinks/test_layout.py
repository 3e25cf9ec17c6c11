"""The S3 object format (keys, metadata, lines) and the sink's pure parts: milliseconds, no services."""

from __future__ import annotations

import base64
import hashlib

import msgspec
import pytest
import zstandard
from botocore.exceptions import ClientError

from sinks.export import _holes
from sinks.layout import (
    KEY_SUFFIX,
    LayoutError,
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
from sinks.s3 import Batch, TestPause, permanent_error, record_line
from streams.errors import ConfigError, PermanentStorageError, StorageError
from streams.records import CompletionRecord, ErrorRecord, decode, encode
from tests.sinks.support import completion


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


def _line(
    value: bytes | None, record_type: type[CompletionRecord] | type[ErrorRecord] = CompletionRecord
) -> tuple[Line, bool]:
    raw, ok = record_line(
        topic="completions",
        partition=2,
        offset=41,
        timestamp_ms=1_700_000_000_123,
        key=b"id-000001",
        value=value,
        record_type=record_type,
        run_id="run-1",
    )
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    return decode_line(raw), ok


def test_a_valid_record_is_kept_verbatim() -> None:
    value = encode(completion(1, "run-1"))
    line, ok = _line(value)
    assert ok and line.kind == "completion" and bytes(line.value) == value
    assert (line.topic, line.partition, line.offset, line.key, line.raw_b64) == (
        "completions",
        2,
        41,
        "id-000001",
        None,
    )
    unknown_field = value[:-1] + b',"field_from_the_future":1}'
    assert bytes(_line(unknown_field)[0].value) == unknown_field  # forward compatible: nothing dropped


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\xff\xfe garbage {", "not a valid CompletionRecord"),
        (b'{"id": "x"}', "missing required field"),
        (None, "null"),
    ],
)
def test_an_undecodable_record_becomes_an_error_line_in_place(value: bytes | None, reason: str) -> None:
    line, ok = _line(value)
    assert not ok and line.kind == "undecodable"
    error = decode(bytes(line.value), ErrorRecord)
    assert error.stage == "sink" and error.error_type == "RecordDecodeError" and reason in error.message
    assert error.source is not None and (error.source.topic, error.source.partition, error.source.offset) == (
        "completions",
        2,
        41,
    )
    assert error.id == "id-000001" and error.run_id == "run-1" and error.at == 1_700_000_000.123
    assert base64.b64decode(line.raw_b64 or "") == (value or b"")
    assert _line(value) == (line, ok)  # rebuilt identically (deterministic objects)


def test_an_error_record_on_the_dead_letter_topic_is_a_valid_error_line() -> None:
    value = encode(ErrorRecord(id="id-9", stage="generate", error_type="FatalRequestError", message="400"))
    line, ok = _line(value, ErrorRecord)
    assert ok and line.kind == "error" and bytes(line.value) == value
    assert _line(encode(completion(1, "r")), ErrorRecord)[0].kind == "undecodable"  # wrong type for the topic


def test_batch_metadata_describes_its_body() -> None:
    batch = Batch(level=3)
    lines = [f'{{"offset":{o}}}\n'.encode() for o in range(10, 20)]
    for offset, line in zip(range(10, 20), lines, strict=True):
        batch.add(offset, line)
    assert (batch.start, batch.end, batch.count, batch.raw_bytes) == (10, 19, 10, sum(map(len, lines)))
    body, meta = batch.seal()
    assert meta == ObjectMeta(10, 19, 10, hashlib.sha256(b"".join(lines)).hexdigest(), sum(map(len, lines)))
    assert list(iter_body_lines(body)) == lines
    assert KEY_SUFFIX == ".jsonl.zst"


def test_pause_hook_is_inert_unless_configured() -> None:
    pause = TestPause(None)
    pause("after_upload", "x")  # returns at once
    assert TestPause("after_upload:3").nth == 3
    for bad in ("after-upload", "mid_batch:x", "nowhere:1"):
        with pytest.raises(ConfigError):
            TestPause(bad)


def _client_error(code: str, status: int) -> ClientError:
    """The exception botocore raises for an S3 error response of this code and HTTP status."""
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},  # type: ignore[typeddict-item]
        "PutObject",
    )


@pytest.mark.parametrize(
    ("code", "status", "permanent"),
    [
        ("AccessDenied", 403, True),
        ("403", 403, True),  # HeadObject/HeadBucket: no body, the code is the status
        ("SignatureDoesNotMatch", 403, True),
        ("NoSuchBucket", 404, True),
        ("NoSuchKey", 404, False),  # a key deleted between calls: the put is retried
        ("SlowDown", 503, False),
        ("InternalError", 500, False),
        ("ConditionalRequestConflict", 409, False),
    ],
)
def test_s3_errors_are_classified_permanent_or_transient(code: str, status: int, permanent: bool) -> None:
    found = permanent_error(_client_error(code, status), "upload runs/k", "bucket-x")
    assert (found is not None) == permanent
    if found is not None:
        assert not found.retriable and "upload runs/k" in str(found) and "bucket-x" in str(found)
    assert permanent_error(StorageError("transient"), "list", "b") is None
    foreign = PermanentStorageError("s3://b/k exists but is not a sink object")
    assert permanent_error(foreign, "upload", "b") is foreign


@pytest.mark.parametrize(
    ("spans", "start", "end", "holes"),
    [
        ([], 0, 0, []),
        ([], 3, 7, [(3, 6, "no object")]),
        ([(0, 9)], 0, 10, []),
        ([(0, 9)], 5, 10, []),  # objects older than Kafka's retention: fine
        ([(5, 9)], 0, 12, [(0, 4, "before the first object"), (10, 11, "after the last object")]),
        ([(0, 4), (3, 9), (12, 14)], 0, 15, [(10, 11, "between objects")]),  # overlaps are not holes
        ([(0, 4), (8, 9)], None, None, [(5, 7, "between objects")]),  # without Kafka
    ],
)
def test_holes_before_between_and_after_objects(
    spans: list[tuple[int, int]], start: int | None, end: int | None, holes: list[tuple[int, int, str]]
) -> None:
    assert _holes(spans, start, end) == holes
