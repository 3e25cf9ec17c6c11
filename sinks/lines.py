"""One Kafka record of the completions or dead-letter topic → one body line of a sink object. Pure.

A value that decodes as the topic's record type is kept verbatim (:mod:`sinks.layout`'s
:class:`~sinks.layout.Line` under ``value``). One that does not (not JSON, wrong schema, null)
becomes an ``undecodable`` line *in its place*: an :class:`~streams.records.ErrorRecord` built
by :func:`streams.deadletter.undecodable` (``stage="sink"``, ``source`` = topic/partition/offset,
``message`` = the decoder's reason, ``raw`` = the bytes as UTF-8 with replacement characters)
plus ``raw_b64``, the exact bytes. It is written and committed like any record: never a crash
loop, never a silent skip.
"""

from __future__ import annotations

import base64

import msgspec

from sinks.layout import Line, LineKind, encode_line, single_line_json
from streams.deadletter import undecodable
from streams.records import CompletionRecord, ErrorRecord, RecordDecodeError, decode, encode

__all__ = ["SinkRecordType", "record_line"]

SinkRecordType = type[CompletionRecord] | type[ErrorRecord]
"""The record type of a topic the sink reads."""


def record_line(
    *,
    topic: str,
    partition: int,
    offset: int,
    timestamp_ms: int,
    key: bytes | None,
    value: bytes | None,
    record_type: SinkRecordType,
    run_id: str,
) -> tuple[bytes, bool]:
    """The body line for one Kafka record, and whether its value decoded as ``record_type``.

    Args:
        timestamp_ms: the Kafka record's timestamp, milliseconds since the Unix epoch.
        key, value: the record's raw bytes (``None`` when absent).
        run_id: the sink's run, for the error record of an undecodable value.

    Returns:
        the line (UTF-8 JSON ending in one ``\\n``) and ``True`` for a valid value, ``False`` for
        an ``undecodable`` line, whose error record is :func:`streams.deadletter.undecodable`'s (id:
        the record key when there is one, else :func:`streams.deadletter.source_id`), with the
        record's timestamp (seconds) as ``at``, so the line is the same whenever it is rebuilt.
        Never raises for bad input.
    """
    key_text = key.decode("utf-8", "replace") if key is not None else None
    kind: LineKind = "completion" if record_type is CompletionRecord else "error"
    try:
        if value is None:
            raise RecordDecodeError(f"not a valid {record_type.__name__}: the record value is null")
        if record_type is CompletionRecord:
            decode(value, CompletionRecord)
        else:
            decode(value, ErrorRecord)
        line = Line(
            topic=topic,
            partition=partition,
            offset=offset,
            timestamp_ms=timestamp_ms,
            key=key_text,
            kind=kind,
            value=msgspec.Raw(single_line_json(value)),
        )
        return encode_line(line), True
    except RecordDecodeError as exc:
        raw = value or b""
        error = undecodable(
            topic=topic,
            partition=partition,
            offset=offset,
            key=key,
            value=value,
            reason=str(exc),
            stage="sink",
            run_id=run_id,
            at=timestamp_ms / 1000.0,
        )
        line = Line(
            topic=topic,
            partition=partition,
            offset=offset,
            timestamp_ms=timestamp_ms,
            key=key_text,
            kind="undecodable",
            value=msgspec.Raw(encode(error)),
            raw_b64=base64.b64encode(raw).decode("ascii"),
        )
        return encode_line(line), False
