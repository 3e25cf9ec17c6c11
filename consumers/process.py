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
import re
import time
import zlib
from collections.abc import Callable, Coroutine
from typing import Any

from consumers.dead_letters import DeadLetters
from consumers.emit import Emitter
from consumers.group.ownership import foreign_prompt_reason
from consumers.lending import Peer
from consumers.metrics import ConsumerMetrics, ConsumerStats
from consumers.positions.jobs import Job
from consumers.quality.structured import structured_flags
from consumers.reuse import ReuseDeclined, ReuseIndex
from consumers.sample_groups import SampleGroups, worth_sharing
from consumers.server_watch import ServerWatch
from consumers.servers import ServerClient
from consumers.servers.answers import ChatResult
from consumers.servers.requests import request_digest, request_id
from consumers.window import WindowPolicy
from streams.config import Settings
from streams.errors import RecordDecodeError, RetriableServerError, ServerError
from streams.records import PromptRecord, decode, extra_body_problem
from streams.retry import Backoff, retriable

__all__ = ["DUPLICATE_RID", "PromptRunner"]

log = logging.getLogger("kafkagen.generate")

_Answer = tuple[dict[str, Any], ChatResult, float]
"""An answer in hand: the request body sent, its result, and the Unix time it was sent."""

DUPLICATE_RID = re.compile(r"Duplicate request ID|Request id \S+ already running\.")
"""The 400 message for a request id already in flight: SGLang's (docs/sglang.md, "Errors and
overload") and vLLM's (docs/vllm.md, "Requests")."""


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
        self.groups = SampleGroups()
        self.sharing_refused: str | None = None
        """why the server refused a request with ``n`` (samples are then sent one request each)."""

    async def run(self, job: Job, peer: Peer | None = None) -> None:
        """Process ``job``, and if anything escapes the processing, a dead letter saying what: a
        prompt's task never ends without a completion or error record, or its partition would
        be pinned. Cancellation (a revoke, a leave, the shutdown) is let through. ``peer``: the
        other member's server the job is lent to (:mod:`consumers.lending`): sent there first,
        to this consumer's own server if that send fails."""
        try:
            await self._process(job, peer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("prompt at partition %s offset %s failed unexpectedly", *job.key)
            await self.emitter.error(job, self.dead_letters.unexpected(job.record, exc))

    async def _process(self, job: Job, peer: Peer | None) -> None:
        record = job.record
        try:
            prompt = decode(record.value or b"", PromptRecord)
        except RecordDecodeError as exc:
            await self.emitter.error(job, self.dead_letters.undecodable(record, exc))
            return
        extra = prompt.params.extra_body
        problem = extra_body_problem(extra) if extra else None
        if problem is not None:  # a record not written by the producer, which checks it
            await self.emitter.error(job, self.dead_letters.undecodable(record, RecordDecodeError(problem)))
            return
        foreign = foreign_prompt_reason(self.settings, prompt, self.prompts_topic)
        if foreign is not None:
            await self.emitter.error(job, self.dead_letters.foreign(record, prompt, foreign))
            return
        # a regenerated prompt (attempt > 0) asks for a new generation: never a copy
        if self.reuse is not None and prompt.attempt == 0 and await self._reused(job, prompt):
            return
        if peer is not None:
            await self._generate(job, prompt, peer=peer)
            return
        if prompt.sample is not None and self.shares_samples():
            shared = await self._shared(prompt)
            if isinstance(shared, tuple):
                body, result, sent_at = shared
                if self._asks_again(body, result, 0):
                    await self._generate(job, prompt, invalid=1, kept=shared)
                    return
                self.answered(job)
                await self.emitter.completion(job, prompt, body, result, sent_at)
                return
            if isinstance(shared, ServerError):  # the shared send was this sample's first
                completed = await self._generate(job, prompt, failed=shared)
                if completed and not retriable(shared) and self.sharing_refused is None:
                    # refused shared, answered alone: the server refuses n itself
                    self.sharing_refused = str(shared)
                    log.warning("%s: samples are sent one request each from now on", shared)
                return
        await self._generate(job, prompt)

    async def _generate(
        self,
        job: Job,
        prompt: PromptRecord,
        *,
        invalid: int = 0,
        kept: _Answer | None = None,
        failed: ServerError | None = None,
        peer: Peer | None = None,
    ) -> bool:
        """Send ``prompt`` until it ends in a completion (True) or a dead letter (False).
        ``invalid``: answers already refused for their structured output, ``kept`` the last of
        them (written, flagged, if no valid answer comes); ``failed``: the shared request this
        sample was part of failed so, counted as its first send (a retriable failure waits out a
        backoff first); ``peer``: sent to that server while it answers (:meth:`run`)."""
        sends = failures = 0
        if failed is not None:
            sends = 1
            if retriable(failed):
                failures = 1
                await self._pause_to_retry(failures)
        while True:
            if peer is None:
                await self.server.ok.wait()
            sends += 1
            rid = request_id(self.settings.run_id, prompt.id, prompt.attempt, sends)
            body = self.client.request_body(prompt, rid)
            if invalid:  # asked again for a valid answer: another seed, or the same answer comes back
                body["seed"] = zlib.crc32(rid.encode()) % 2**31
            sent_at = time.time()
            sent_mono = time.monotonic()
            try:
                result = await (self._send(body) if peer is None else self._send_lent(peer, body))
            except ServerError as exc:
                if peer is not None:  # the other server failed it: back to this consumer's own
                    log.info("lent prompt %s back from %s: %s", prompt.id, peer.url, exc)
                    peer = job.lent_to = None
                    continue
                if retriable(exc):
                    last, server_failed = exc, True
                elif DUPLICATE_RID.search(str(exc)):
                    # our earlier send of this rid still runs there (a predecessor's, or one lent
                    # there and cancelled at a rebalance): the server answered, so it counts against
                    # the prompt's attempts, not the server's health; the next send has another rid
                    last, server_failed = RetriableServerError(str(exc), status=exc.status), False
                else:
                    self.server.record_success(time.monotonic())
                    return await self._kept_or_failure(job, prompt, kept, invalid, exc, sends)
            else:
                if peer is None:
                    self._observe_answer(result.latency_s, result.usage.completion_tokens)
                if self._asks_again(body, result, invalid):
                    invalid += 1
                    failures = 0  # a re-ask has the whole max_attempts for its failures
                    kept = (body, result, sent_at)
                    continue
                self.answered(job)
                server = None if peer is None else peer.url
                await self.emitter.completion(
                    job, prompt, body, result, sent_at, invalid_retries=invalid, server=server
                )
                return True
            # a retriable failure
            failures += 1
            if server_failed:
                self._observe_failure(last, sent_mono)
            if failures >= self.settings.consumer.max_attempts:
                return await self._kept_or_failure(job, prompt, kept, invalid, last, sends)
            await self._pause_to_retry(failures)

    async def _pause_to_retry(self, failures: int) -> None:
        """Count a retry and wait out its backoff (``failures`` so far, seconds from the backoff)."""
        self.stats.retries += 1
        self.metrics.retries.inc()
        await asyncio.sleep(self.backoff.delay(min(failures, 30), self.rng))

    def _asks_again(self, body: dict[str, Any], result: ChatResult, invalid: int) -> bool:
        """Whether ``result`` breaks ``body``'s structured output with re-asks left
        (``consumer.retry_invalid``); counts the re-ask."""
        if invalid < self.settings.consumer.retry_invalid and structured_flags(body, result.content):
            self.stats.invalid_retries += 1
            return True
        return False

    async def _kept_or_failure(
        self, job: Job, prompt: PromptRecord, kept: _Answer | None, invalid: int, exc: ServerError, sends: int
    ) -> bool:
        """The end of a prompt no send answered: the answer in hand, flagged, beats a dead letter.
        True when a completion was written."""
        if kept is not None:
            self.answered(job)
            await self.emitter.completion(job, prompt, *kept, invalid_retries=invalid - 1)
            return True
        if not retriable(exc):
            self.answered(job)
        await self.emitter.failure(job, prompt, exc, sends)
        return False

    def _observe_answer(self, latency_s: float, completion_tokens: int) -> None:
        """The server answered: it is healthy, and its latency and output feed the window."""
        now = time.monotonic()
        self.server.record_success(now)
        self.window().observe_completion(latency_s, now)
        # the server's output rate counts at the answer: a Kafka stall is not a collapse
        self.server.observe_output(now, completion_tokens)

    def _observe_failure(self, exc: ServerError, sent_mono: float) -> None:
        """A retriable failure: an overload shrinks the window; every one counts against health."""
        now = time.monotonic()
        if exc.status in (429, 503):
            self.window().observe_overload(now)
        self.server.record_failure(now, str(exc), sent_at=sent_mono)

    def shares_samples(self) -> bool:
        """Whether a prompt's samples may share a request (docs/consumer.md, "Parallel samples"):
        ``consumer.parallel_samples`` is on, no ``reuse_from`` lookup comes first, and the server
        (once discovered) answers ``n`` distinct choices and has not refused it."""
        info = self.client.info
        return (
            self.settings.consumer.parallel_samples
            and self.reuse is None
            and self.sharing_refused is None
            and info is not None
            and info.parallel_samples
        )

    async def _shared(self, prompt: PromptRecord) -> _Answer | ServerError | None:
        """This sample's answer from one request for all its siblings that start in this turn
        (:mod:`consumers.sample_groups`); the error that request failed with; or None: the sample
        is alone, or the server kind cannot (each then goes on with a request of its own)."""
        await self.server.ok.wait()  # the body names the served model: discovery must be done
        if not self.shares_samples():
            return None
        rid = request_id(self.settings.run_id, prompt.id, prompt.attempt, 0)
        body = self.client.request_body(prompt, rid)
        if not worth_sharing(prompt.messages, prompt.tools, int(body.get("max_tokens") or 0)):
            return None
        body.pop("seed", None)  # the copies share one request's parameters: a seed would make them equal
        group, place = self.groups.join(request_digest(body))
        try:
            await asyncio.sleep(0)  # the siblings started in this turn join
        except BaseException:
            if place == 0:  # cancelled before sending: no member may wait for this group
                self.groups.close(group)
                group.settle(None)
            raise
        if place > 0:
            answer = await asyncio.shield(group.answer)  # a cancelled member leaves the others be
            if answer is None or isinstance(answer, ServerError):
                return answer
            return answer[0], answer[1][place], answer[2]
        self.groups.close(group)
        if group.size == 1:
            group.settle(None)
            return None
        body["n"] = group.size
        sent_at, sent_mono = time.time(), time.monotonic()
        self.groups.hidden += group.size - 1
        try:
            results = await self._send_choices(body)
        except ServerError as exc:
            if retriable(exc):
                self._observe_failure(exc, sent_mono)
            else:
                self.server.record_success(time.monotonic())
            group.settle(exc)
            return exc
        except BaseException:
            group.settle(None)  # cancelled: the siblings go on alone
            raise
        finally:
            self.groups.hidden -= group.size - 1
        self.stats.shared_requests += 1
        self._observe_answer(results[0].latency_s, sum(r.usage.completion_tokens for r in results))
        group.settle((body, results, sent_at))
        return body, results[0], sent_at

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

    async def _send_lent(self, peer: Peer, body: dict[str, Any]) -> ChatResult:
        """One request to another member's server, abandoned (as a retriable failure) once that
        member reports its server down (:attr:`consumers.lending.Peer.down`)."""
        why = f"{peer.url}: its member reports the server down"
        result = (await _unless(peer.client.chat_choices(body), peer.down, why))[0]
        self.stats.lent += 1
        return result

    async def _send(self, body: dict[str, Any]) -> ChatResult:
        """One request for one answer (:meth:`_send_choices`)."""
        return (await self._send_choices(body))[0]

    async def _send_choices(self, body: dict[str, Any]) -> list[ChatResult]:
        """One request (for ``body["n"]`` answers), abandoned (as a retriable failure) if the server
        is declared hung."""
        why = f"{self.server.server_url}: request abandoned: server hung"
        return await _unless(self.client.chat_choices(body), self.server.abandon, why)


async def _unless(
    request: Coroutine[Any, Any, list[ChatResult]], abandon: asyncio.Event, why: str
) -> list[ChatResult]:
    """``request``'s answers, or, once ``abandon`` is set first, the request cancelled and a
    :class:`~streams.errors.RetriableServerError` saying ``why``."""
    sent = asyncio.ensure_future(request)
    waiter = asyncio.ensure_future(abandon.wait())
    try:
        done, _ = await asyncio.wait({sent, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not sent.done():
            sent.cancel()
    if sent in done:
        return sent.result()
    with contextlib.suppress(asyncio.CancelledError):
        await sent
    raise RetriableServerError(why)
