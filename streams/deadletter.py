"""The one builder of the dead letter for a Kafka record whose value cannot be decoded.

The generation consumer (a prompt that is not a PromptRecord) and the sink (a completion or error
that is not one) both keep such a record as an :class:`~streams.records.ErrorRecord` holding the
bytes, never dropping it; they build it here so its id, its source and its text agree.
"""

from __future__ import annotations

from typing import Final

from streams.records import ErrorRecord, ErrorStage, SourceOffset

__all__ = ["UNDECODABLE", "source_id", "undecodable"]

UNDECODABLE: Final = "RecordDecodeError"
"""The ``error_type`` of every undecodable-record dead letter."""


def source_id(topic: str, partition: int, offset: int) -> str:
    """The id given to a record that carries no key: ``<topic>+<partition>+<offset>``."""
    return f"{topic}+{partition}+{offset}"


def undecodable(
    *,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    reason: str,
    stage: ErrorStage,
    run_id: str | None,
    at: float,
    server: str | None = None,
) -> ErrorRecord:
    """The ErrorRecord for the record at ``topic``/``partition``/``offset`` whose ``value`` is not
    a valid record (``reason``: the decoder's message).

    Its id is the record key (UTF-8, bad bytes replaced) when there is one, else
    :func:`source_id`; ``raw`` holds the value as text; ``at`` is Unix epoch seconds (the caller
    passes the record's timestamp when the dead letter must be the same whenever it is rebuilt).
    ``attempts`` is 0: nothing was sent anywhere.
    """
    key_text = key.decode("utf-8", "replace") if key else ""
    return ErrorRecord(
        id=key_text or source_id(topic, partition, offset),
        run_id=run_id,
        raw=(value or b"").decode("utf-8", "replace"),
        stage=stage,
        error_type=UNDECODABLE,
        message=reason,
        attempts=0,
        server=server,
        source=SourceOffset(topic=topic, partition=partition, offset=offset),
        at=at,
    )
