"""One prompt's processing, from its started record to its completion or dead letter.

The record is decoded, checked to belong to this run (:mod:`consumers.group.ownership`), then sent
to the server until it answers, at most ``max_attempts`` times: a retriable failure is sent again
after a backoff, a fatal one is dead-lettered at once (SGLang's "Duplicate request ID" aside).
Every prompt ends in a completion or a dead letter.

Design: docs/consumer.md, "One prompt".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import zlib
from collections.abc import Callable
from typing import Any

from consumers.dead_letters import DeadLetters
from consumers.emit import Emitter
from consumers.group.ownership import foreign_prompt_reason
from consumers.metrics import ConsumerMetrics, ConsumerStats
from consumers.positions.jobs import Job
from consumers.quality.structured import structured_flags
from consumers.reuse import ReuseDeclined, ReuseIndex
from consumers.server_watch import ServerWatch
from consumers.servers import ServerClient
from consumers.servers.answers import ChatResult
from consumers.servers.requests import request_digest, request_id
from consumers.window import WindowPolicy
from streams.config import Settings
from streams.errors import RecordDecodeError, RetriableServerError, ServerError
from streams.records import PromptRecord, decode
from streams.retry import Backoff, retriable

__all__ = ["DUPLICATE_RID", "PromptRunner"]

log = logging.getLogger("kafkagen.generate")

DUPLICATE_RID = "Duplicate request ID"
"""SGLang's 400 message for a ``rid`` already in flight (docs/sglang.md, "Errors and overload")."""


class PromptRunner:
    """Processes the prompts one consumer starts (:meth:`run`: one task per prompt).

    Args:
        settings: ``run_id``, ``replay_of`` and ``consumer.max_attempts``.
        prompts_topic: the topic the prompts come from (for a foreign prompt's message).
        client, server: the server's client and the consumer's view of its state.
        window: the consumer's current in-flight window (fed with latencies and overloads).
        emitter, dead_letters: write and build the results.
        backoff, rng: the waits between sends (seconds).
        metrics, stats: retries are counted here.
        answered: called when the server's answer is in (the job holds no server slot).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        prompts_topic: str,
        client: ServerClient,
        server: ServerWatch,
        window: Callable[[], WindowPolicy],
        emitter: Emitter,
        dead_letters: DeadLetters,
        backoff: Backoff,
        rng: random.Random,
        metrics: ConsumerMetrics,
        stats: ConsumerStats,
        answered: Callable[[Job], None],
    ) -> None:
        self.settings = settings
        self.prompts_topic = prompts_topic
        self.client = client
        self.server = server
        self.window = window
        self.emitter = emitter
        self.dead_letters = dead_letters
        self.backoff = backoff
        self.rng = rng
        self.metrics = metrics
        self.stats = stats
        self.answered = answered
        self.reuse: ReuseIndex | None = None
        """set by the consumer at start when ``consumer.reuse_from`` names a run."""

    async def run(self, job: Job) -> None:
        """Process ``job``, and if anything escapes the processing, a dead letter saying what: a
        prompt's task never ends without a completion or error record, or its partition would
        be pinned. Cancellation (a revoke, a leave, the shutdown) is let through."""
        try:
            await self._process(job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("prompt at partition %s offset %s failed unexpectedly", *job.key)
            await self.emitter.error(job, self.dead_letters.unexpected(job.record, exc))

    async def _process(self, job: Job) -> None:
        record = job.record
        try:
            prompt = decode(record.value or b"", PromptRecord)
        except RecordDecodeError as exc:
            await self.emitter.error(job, self.dead_letters.undecodable(record, exc))
            return
        foreign = foreign_prompt_reason(self.settings, prompt, self.prompts_topic)
        if foreign is not None:
            await self.emitter.error(job, self.dead_letters.foreign(record, prompt, foreign))
            return
        # a regenerated prompt (attempt > 0) asks for a new generation: never a copy
        if self.reuse is not None and prompt.attempt == 0 and await self._reused(job, prompt):
            return
        sends = failures = invalid = 0
        # the last answer in hand, one that broke its structured output: kept if a re-ask fails
        kept: tuple[dict[str, Any], ChatResult, float] | None = None
        while True:
            await self.server.ok.wait()
            sends += 1
            rid = request_id(self.settings.run_id, prompt.id, prompt.attempt, sends)
            body = self.client.request_body(prompt, rid)
            if invalid:  # asked again for a valid answer: another seed, or the same answer comes back
                body["seed"] = zlib.crc32(rid.encode()) % 2**31
            sent_at = time.time()
            sent_mono = time.monotonic()
            try:
                result = await self._send(body)
            except ServerError as exc:
                if retriable(exc):
                    last = exc
                elif DUPLICATE_RID in str(exc):  # our earlier send of this rid still runs there
                    last = RetriableServerError(str(exc), status=exc.status)
                else:
                    self.server.record_success(time.monotonic())
                    self.answered(job)
                    if kept is not None:  # the answer in hand, flagged, beats a dead letter
                        await self.emitter.completion(job, prompt, *kept, invalid_retries=invalid - 1)
                        return
                    await self.emitter.failure(job, prompt, exc, sends)
                    return
            else:
                self.server.record_success(time.monotonic())
                self.window().observe_completion(result.latency_s, time.monotonic())
                # the server's output rate counts at the answer: a Kafka stall is not a collapse
                self.server.observe_output(time.monotonic(), result.usage.completion_tokens)
                if invalid < self.settings.consumer.retry_invalid and structured_flags(body, result.content):
                    invalid += 1
                    failures = 0  # a re-ask has the whole max_attempts for its failures
                    kept = (body, result, sent_at)
                    self.stats.invalid_retries += 1
                    continue
                self.answered(job)
                await self.emitter.completion(job, prompt, body, result, sent_at, invalid_retries=invalid)
                return
            # a retriable failure
            failures += 1
            now = time.monotonic()
            if last.status in (429, 503):
                self.window().observe_overload(now)
            self.server.record_failure(now, str(last), sent_at=sent_mono)
            if failures >= self.settings.consumer.max_attempts:
                if kept is not None:
                    self.answered(job)
                    await self.emitter.completion(job, prompt, *kept, invalid_retries=invalid - 1)
                    return
                await self.emitter.failure(job, prompt, last, sends)
                return
            self.stats.retries += 1
            self.metrics.retries.inc()
            await asyncio.sleep(self.backoff.delay(min(failures, 30), self.rng))

    async def _reused(self, job: Job, prompt: PromptRecord) -> bool:
        """Whether ``prompt`` got a copy of a completion answering the same request
        (:mod:`consumers.reuse`) instead of a generation."""
        assert self.reuse is not None
        await self.server.ok.wait()  # the request names the served model: discovery must be done
        body = self.client.request_body(
            prompt, request_id(self.settings.run_id, prompt.id, prompt.attempt, 0)
        )
        hit = await self.reuse.fetch(self.settings, request_digest(body))
        if hit is None:
            return False
        try:
            await self.emitter.reused(job, prompt, *hit)
        except ReuseDeclined:
            return False
        self.answered(job)
        return True

    async def _send(self, body: dict[str, Any]) -> ChatResult:
        """One request, abandoned (as a retriable failure) if the server is declared hung."""
        abandon = self.server.abandon
        request = asyncio.ensure_future(self.client.chat(body))
        waiter = asyncio.ensure_future(abandon.wait())
        try:
            done, _ = await asyncio.wait({request, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not request.done():
                request.cancel()
        if request in done:
            return request.result()
        with contextlib.suppress(asyncio.CancelledError):
            await request
        raise RetriableServerError(f"{self.server.server_url}: request abandoned: server hung")
