"""Writing a prompt's result: its :class:`CompletionRecord` on the completions topic or its
:class:`ErrorRecord` on the dead-letter topic, through the consumer's idempotent producer.

Each write waits for the broker's acknowledgement (acks=all) and is retried through Kafka outages
for as long as they last; only then may the prompt's offset be committed. A result too large for a
Kafka record becomes a dead letter, trimmed to fit. Design: docs/consumer.md, "Writing a result".
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError
from aiokafka.structs import RecordMetadata

from consumers.dead_letters import DeadLetters, source_of
from consumers.metrics import ConsumerMetrics, ConsumerStats
from consumers.positions.jobs import Job
from consumers.quality.flags import answer_flags
from consumers.reuse import ReuseDeclined, reused
from consumers.servers.answers import ChatResult
from consumers.servers.requests import record_params
from streams.audit_trace import audit_trace
from streams.config import Settings
from streams.kafka import KafkaOutage
from streams.records import (
    MAX_ERROR_ID_CHARS,
    CompletionRecord,
    ErrorRecord,
    PromptRecord,
    SourceOffset,
    Timings,
    Usage,
    encode,
    fit_error,
    key_of,
)
from streams.retry import Backoff, kafka_outage, retry

__all__ = ["Emitter", "completion_record"]

log = logging.getLogger("kafkagen.generate")


def completion_record(
    job: Job,
    prompt: PromptRecord,
    body: dict[str, Any],
    result: ChatResult,
    sent_at: float,
    *,
    run_id: str,
    server: str,
    consumer: str,
    invalid_retries: int = 0,
) -> CompletionRecord:
    """The completion of ``prompt`` (``job``'s record): the server's ``result`` for the request
    ``body`` sent at ``sent_at`` (Unix seconds), with its quality flags (:mod:`consumers.quality.flags`)
    and timings in seconds; ``consumer`` is the writer's instance id; ``invalid_retries`` the
    answers refused before this one (``consumer.retry_invalid``)."""
    flags = answer_flags(prompt, body, result)
    return CompletionRecord(
        id=prompt.id,
        run_id=run_id,
        attempt=prompt.attempt,
        prompt=prompt,
        content=result.content,
        reasoning_content=result.reasoning_content,
        tool_calls=result.tool_calls,
        logprobs=result.logprobs,
        finish_reason=result.finish_reason,
        usage=result.usage,
        timings=Timings(
            queued_s=max(0.0, sent_at - job.fetched_at),
            latency_s=result.latency_s,
            started_at=sent_at,
            finished_at=sent_at + result.latency_s,
        ),
        server=server,
        model=result.model,
        params=record_params(body),
        quality=flags,
        source=source_of(job.record),
        consumer=consumer,
        invalid_retries=invalid_retries,
    )


class Emitter:
    """Writes one consumer's completions and dead letters, then calls ``finish(job)``.

    Args:
        settings: ``run_id``, ``kafka.max_message_bytes`` (bytes).
        completions_topic, errors_topic: where results go.
        server_url, instance_id: recorded in each completion (``server``, ``consumer``).
        dead_letters: builds the dead letters.
        kafka: the outage tracker (one warning and a reminder every 30 s, not a line per record).
        backoff, rng: the waits between produce attempts (seconds).
        metrics, stats: counted after each write.
        finish: called once a job's result is acknowledged (its offset may be committed).
        counted: called with each acknowledged result before ``finish``: a completion's quality
            flags and usage, or ``(None, None)`` for a dead letter (the fleet's quality gate,
            :meth:`consumers.quality.fleet_gate.FleetGate.count`).

    ``producer`` is set by the consumer once started.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        completions_topic: str,
        errors_topic: str,
        server_url: str,
        instance_id: str,
        dead_letters: DeadLetters,
        kafka: KafkaOutage,
        backoff: Backoff,
        rng: random.Random,
        metrics: ConsumerMetrics,
        stats: ConsumerStats,
        finish: Callable[[Job], None],
        counted: Callable[[list[str] | None, Usage | None, dict[str, Any] | None], None] | None = None,
    ) -> None:
        self.settings = settings
        self.completions_topic = completions_topic
        self.errors_topic = errors_topic
        self.server_url = server_url
        self.instance_id = instance_id
        self.dead_letters = dead_letters
        self.kafka = kafka
        self.backoff = backoff
        self.rng = rng
        self.metrics = metrics
        self.stats = stats
        self.finish = finish
        self.counted = counted
        self.producer: AIOKafkaProducer | None = None
        self.trace = audit_trace("generate")
        self._finished_early: set[tuple[int, int]] = set()

    async def completion(
        self,
        job: Job,
        prompt: PromptRecord,
        body: dict[str, Any],
        result: ChatResult,
        sent_at: float,
        *,
        invalid_retries: int = 0,
        server: str | None = None,
    ) -> None:
        """Write ``prompt``'s completion (:func:`completion_record`), or its dead letter when the
        completion does not fit a Kafka record. ``server``: the server that answered, when not
        this consumer's (a lent prompt: :mod:`consumers.lending`)."""
        completion = completion_record(
            job,
            prompt,
            body,
            result,
            sent_at,
            run_id=self.settings.run_id,
            server=server or self.server_url,
            consumer=self.instance_id,
            invalid_retries=invalid_retries,
        )
        value = encode(completion)
        if len(value) > self.value_budget(prompt.id):
            too_large = MessageSizeTooLargeError(
                f"the completion is {len(value)} bytes, over kafka.max_message_bytes "
                f"({self.settings.kafka.max_message_bytes}); raise it (KAFKAGEN_KAFKA__MAX_MESSAGE_BYTES) "
                "and re-generate this prompt"
            )
            await self.failure(job, prompt, too_large, 1)
            return
        try:
            await self.write(job, self.completions_topic, prompt.id, value)
        except MessageSizeTooLargeError as exc:
            await self.failure(job, prompt, exc, 1)
            return
        self.stats.completions += 1
        self.metrics.completed(
            result.finish_reason,
            completion_tokens=result.usage.completion_tokens,
            reasoning_tokens=result.usage.reasoning_tokens,
            latency_s=result.latency_s,
            flags=completion.quality,
        )
        if self.counted is not None:
            self.counted(list(completion.quality), result.usage, completion.params)
        self._done(job)

    async def reused(
        self, job: Job, prompt: PromptRecord, original: CompletionRecord, where: SourceOffset
    ) -> None:
        """Write a copy of ``original`` (found at ``where``, :mod:`consumers.reuse`) as ``prompt``'s
        completion in this run. It counts as a completion, not as this server's output: no token,
        latency or quality metrics, and the gate, which judges the servers, does not see it."""
        completion = reused(
            original,
            where,
            id=prompt.id,
            run_id=self.settings.run_id,
            attempt=prompt.attempt,
            prompt=prompt,
            source=source_of(job.record),
            consumer=self.instance_id,
        )
        value = encode(completion)
        if len(value) > self.value_budget(prompt.id):  # this run's limit may be lower than the other's
            log.warning(
                "reuse: the copy of %s does not fit this run's records; generating it", prompt.id[:200]
            )
            raise ReuseDeclined(prompt.id)
        await self.write(job, self.completions_topic, prompt.id, value)
        self.stats.completions += 1
        self.stats.reused += 1
        self._done(job)

    async def failure(self, job: Job, prompt: PromptRecord, exc: Exception, attempts: int) -> None:
        """Dead-letter ``prompt``, failed for good with ``exc`` after ``attempts`` sends."""
        await self.error(job, self.dead_letters.failed(job.record, prompt, exc, attempts))

    async def error(self, job: Job, error: ErrorRecord) -> None:
        """Write ``error`` (trimmed to fit a Kafka record, :func:`streams.records.fit_error`) to the
        dead-letter topic, then let the offset be committed."""
        error = fit_error(error, self.value_budget(error.id))
        await self.write(job, self.errors_topic, error.id, encode(error))
        self.stats.errors += 1
        self.metrics.dead_lettered(error.error_type)
        log.warning(
            "dead-lettered %s (partition %s offset %s): %s",
            error.id[:200],
            job.record.partition,
            job.record.offset,
            error.message[:200],
        )
        if self.counted is not None:
            self.counted(None, None, None)
        self._done(job)

    async def write(self, job: Job, topic: str, record_id: str, value: bytes) -> None:
        """:meth:`produce` ``job``'s result, traced for the fault audit (:mod:`streams.audit_trace`:
        ``send`` before, ``ack`` with the record's place after) and, only when planted there, broken
        on purpose (the offset let go before the write, or the result written twice).

        Raises:
            MessageSizeTooLargeError: the record is over the producer's or the broker's limit.
        """
        source = [job.record.partition, job.record.offset]
        self.trace.event("send", src=source)
        if self.trace.planted("commit_before_ack"):
            self._finished_early.add(job.key)
            self.finish(job)
            await asyncio.sleep(self.settings.consumer.commit_interval_s + 1.0)
        copies = 2 if self.trace.planted("resend") and job.record.offset % 10 == 0 else 1
        for _ in range(copies):
            meta = await self.produce(topic, record_id, value, source=source)
            self.trace.event("ack", src=source, to=[meta.topic, meta.partition, meta.offset])

    def _done(self, job: Job) -> None:
        """Let ``job``'s offset be committed (once: a planted early finish already did)."""
        if job.key in self._finished_early:
            self._finished_early.discard(job.key)
            return
        self.finish(job)

    def value_budget(self, record_id: str) -> int:
        """Bytes a record value may have: the record limit less its key and framing (an error
        record's id, its key, is cut to :data:`streams.records.MAX_ERROR_ID_CHARS` first)."""
        key = key_of(record_id[:MAX_ERROR_ID_CHARS])
        return self.settings.kafka.max_message_bytes - 4 * len(key) - 1024

    async def produce(
        self, topic: str, record_id: str, value: bytes, *, source: list[int] | None = None
    ) -> RecordMetadata:
        """Send and wait for the broker's acknowledgement (acks=all); returns where the record is.
        Waits out Kafka outages (:func:`streams.retry.kafka_outage`) forever with backoff; an outage
        is one warning, a reminder every 30 s, the ``kafkagen_generate_kafka_up`` gauge and the
        status line (:class:`streams.kafka.KafkaOutage`), not a line per record.

        Raises:
            MessageSizeTooLargeError: the record is over the producer's or the broker's limit.
        """
        producer = self.producer
        assert producer is not None

        async def send() -> RecordMetadata:
            return await producer.send_and_wait(topic, value=value, key=key_of(record_id))

        def failed(exc: BaseException, attempt: int, wait_s: float) -> None:
            self.kafka.failed(f"producing to {topic} failed: {exc}")
            self.trace.event("retry", src=source)  # the failed send may still have been written

        meta = await retry(
            f"producing to {topic}",
            send,
            backoff=self.backoff,
            log=None,
            is_retriable=kafka_outage,
            on_failure=failed,
            rng=self.rng,
        )
        self.kafka.ok()
        return meta
