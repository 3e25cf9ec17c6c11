"""Every dead letter the generation consumer writes: the :class:`ErrorRecord` of a prompt that
could not be generated, built in one place (:func:`error_record`) for each way a prompt fails.

Its id is the prompt's, else the record's key, else ``<topic>+<partition>+<offset>``; an
undecodable record's dead letter is :func:`streams.deadletter.undecodable`'s, the same as the
sink's. Design: docs/consumer.md, "Dead letters".
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiokafka import ConsumerRecord

from streams import deadletter
from streams.errors import ServerError
from streams.records import ErrorRecord, PromptRecord, SourceOffset

__all__ = ["FOREIGN_RUN_PROMPT", "DeadLetters", "error_record", "source_of"]

FOREIGN_RUN_PROMPT = "ForeignRunPrompt"
"""``error_type`` of a prompt of another run (``docs/runs.md``)."""


def source_of(record: ConsumerRecord[bytes, bytes]) -> SourceOffset:
    """The Kafka position of ``record``, as completion and error records cite it."""
    return SourceOffset(topic=record.topic, partition=record.partition, offset=record.offset)


def error_record(
    record: ConsumerRecord[bytes, bytes],
    *,
    run_id: str | None,
    server: str,
    error_type: str,
    message: str,
    attempts: int = 0,
    prompt: PromptRecord | None = None,
    status: int | None = None,
    retriable: bool = False,
) -> ErrorRecord:
    """The dead letter of the prompt in ``record``, stage ``generate``, dated now (Unix seconds).
    Every dead letter of the consumer but an undecodable record's is built here.

    Args:
        record: the prompts-topic record (its position is the dead letter's ``source``).
        run_id: the run writing it; server: the inference server's base URL.
        error_type: the exception class name or error kind; message: what went wrong.
        attempts: requests sent for it (0: none).
        prompt: the decoded prompt (gives the id and ``attempt``); None: the id is the record's
            key, else ``<topic>+<partition>+<offset>`` (:func:`streams.deadletter.source_id`).
        status: the server's HTTP status; retriable: whether the last failure was retriable.
    """
    if prompt is None:
        key = (record.key or b"").decode("utf-8", "replace")
        record_id = key or deadletter.source_id(record.topic, record.partition, record.offset)
        attempt = 0
    else:
        record_id, attempt = prompt.id, prompt.attempt
    return ErrorRecord(
        id=record_id,
        run_id=run_id,
        attempt=attempt,
        prompt=prompt,
        stage="generate",
        error_type=error_type,
        message=message,
        status=status,
        retriable=retriable,
        attempts=attempts,
        server=server,
        source=source_of(record),
        at=time.time(),
    )


@dataclass(frozen=True)
class DeadLetters:
    """The dead letters of one consumer: run ``run_id``, server ``server`` (its base URL)."""

    run_id: str | None
    server: str

    def undecodable(self, record: ConsumerRecord[bytes, bytes], exc: Exception) -> ErrorRecord:
        """``record``'s value is not a :class:`PromptRecord` (``exc`` says why): the raw bytes are
        kept as text (:func:`streams.deadletter.undecodable`)."""
        return deadletter.undecodable(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=record.value,
            reason=str(exc),
            stage="generate",
            run_id=self.run_id,
            at=time.time(),
            server=self.server,
        )

    def foreign(self, record: ConsumerRecord[bytes, bytes], prompt: PromptRecord, reason: str) -> ErrorRecord:
        """``prompt`` belongs to another run (``reason`` says which and what to do): not generated."""
        return error_record(
            record,
            run_id=self.run_id,
            server=self.server,
            prompt=prompt,
            error_type=FOREIGN_RUN_PROMPT,
            message=reason,
        )

    def failed(
        self, record: ConsumerRecord[bytes, bytes], prompt: PromptRecord, exc: Exception, attempts: int
    ) -> ErrorRecord:
        """``prompt`` failed for good with ``exc`` after ``attempts`` sends: a fatal answer,
        retries exhausted, or a result too large for a Kafka record. The message is cut to
        2,000 characters; a server error's status and ``exc.retriable`` are kept."""
        return error_record(
            record,
            run_id=self.run_id,
            server=self.server,
            prompt=prompt,
            error_type=type(exc).__name__,
            message=str(exc)[:2000],
            status=exc.status if isinstance(exc, ServerError) else None,
            retriable=bool(getattr(exc, "retriable", False)),
            attempts=attempts,
        )

    def unexpected(self, record: ConsumerRecord[bytes, bytes], exc: Exception) -> ErrorRecord:
        """Something escaped a prompt's processing (a bug): the prompt still ends in a dead
        letter, or its partition's commits would stop at it."""
        return error_record(
            record,
            run_id=self.run_id,
            server=self.server,
            error_type=type(exc).__name__,
            message=f"unexpected failure in the consumer: {exc}",
        )
