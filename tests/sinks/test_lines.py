"""A Kafka record → its body line (:mod:`sinks.lines`): milliseconds, no services."""

from __future__ import annotations

import base64

import pytest

from sinks.layout import Line, decode_line
from sinks.lines import record_line
from streams.deadletter import source_id
from streams.records import CompletionRecord, ErrorRecord, decode, encode
from tests.sinks.support import completion


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


def test_an_undecodable_record_without_a_key_is_named_by_its_source() -> None:
    raw, ok = record_line(
        topic="completions",
        partition=2,
        offset=41,
        timestamp_ms=5,
        key=None,
        value=b"{",
        record_type=CompletionRecord,
        run_id="run-1",
    )
    error = decode(bytes(decode_line(raw).value), ErrorRecord)
    assert not ok and error.id == source_id("completions", 2, 41)
