"""Reusing identical requests (``consumer.reuse_from``): a prompt whose request asks exactly what
a completion of another run answered (messages, tools, every sampling parameter, the model:
:func:`consumers.servers.requests.request_digest`) gets a copy of that completion instead of a
generation. docs/runs.md, "Reusing identical requests".

At start the consumer reads the other run's completions topic to its end once and keeps, per
request digest, the position of the latest usable completion (not ``degenerate``); a hit is read
back from Kafka when its prompt comes, so memory holds 16 bytes and a position per completion.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition

from consumers.servers.requests import completion_digest
from streams.config import Settings
from streams.kafka import consumer_kwargs, read_to_end
from streams.quality import degenerate
from streams.records import CompletionRecord, RecordDecodeError, SourceOffset, decode
from streams.runs import naming

__all__ = ["FETCH_TIMEOUT_S", "ReuseDeclined", "ReuseIndex", "reused"]

FETCH_TIMEOUT_S = 10.0
"""Seconds to read a reused completion back before generating instead (deleted by retention?)."""

log = logging.getLogger("kafkagen.generate")


class ReuseDeclined(Exception):
    """A hit that cannot be copied into this run (its copy does not fit a record): generate instead."""


@dataclass
class ReuseIndex:
    """Request digest → the position of a completion of run ``run_id`` that answered it.

    Attributes:
        run_id: the run reused from; topic: its completions topic.
        positions: digest (16 bytes) → (partition, offset).
    """

    run_id: str
    topic: str
    positions: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    _reader: AIOKafkaConsumer | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """one read at a time: the reader's assignment and position are shared by every prompt."""

    @classmethod
    async def load(cls, settings: Settings, run_id: str) -> ReuseIndex:
        """The index of run ``run_id``'s completions topic, read to its end now (a missing topic:
        an empty index).

        Raises:
            TimeoutError, aiokafka.errors.KafkaError: the topic could not be read.
        """
        index = cls(run_id, naming.completions_topic(run_id))
        read = skipped = 0
        async for records in read_to_end(settings.kafka, index.topic):
            for rec in records:
                read += 1
                try:
                    completion = decode(rec.value or b"", CompletionRecord)
                except RecordDecodeError:
                    skipped += 1
                    continue
                if degenerate(completion.quality):
                    skipped += 1
                    continue
                digest = completion_digest(completion.prompt, completion.params)
                index.positions[digest] = (rec.partition, rec.offset)
        log.info(
            "reuse: %d completions of run %s answer distinct requests (%d read, %d unusable or unreadable)",
            len(index.positions),
            run_id,
            read,
            skipped,
        )
        return index

    async def fetch(self, settings: Settings, digest: bytes) -> tuple[CompletionRecord, SourceOffset] | None:
        """The completion indexed under ``digest`` and where it lies, read back from Kafka; None
        when there is none, or it can no longer be read (then the prompt is generated)."""
        position = self.positions.get(digest)
        if position is None:
            return None
        partition, offset = position
        tp = TopicPartition(self.topic, partition)
        try:
            async with self._lock:
                if self._reader is None:
                    self._reader = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
                    await self._reader.start()
                self._reader.assign([tp])
                self._reader.seek(tp, offset)
                rec = await asyncio.wait_for(self._reader.getone(tp), FETCH_TIMEOUT_S)
            completion = decode(rec.value or b"", CompletionRecord)
        except Exception as exc:  # a reuse that fails is a generation, never a lost prompt
            log.warning(
                "reuse: %s-%d offset %d unreadable (%s); generating instead",
                self.topic,
                partition,
                offset,
                exc,
            )
            return None
        if rec.offset != offset or completion_digest(completion.prompt, completion.params) != digest:
            return None
        return completion, SourceOffset(topic=self.topic, partition=partition, offset=offset)

    async def close(self) -> None:
        """Stop the reader (idempotent)."""
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None


def reused(original: CompletionRecord, where: SourceOffset, **changes: object) -> CompletionRecord:
    """A copy of ``original`` for the current run: ``changes`` (id, run id, attempt, prompt, source,
    consumer) applied, ``reused_from`` set to ``where``, no structured-output retries of its own."""
    return msgspec.structs.replace(original, reused_from=where, invalid_retries=0, **changes)
