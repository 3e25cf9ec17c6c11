"""The generation consumer: ``python -m consumers.generate --server URL``, one per inference server.

A member of the consumer group on the prompts topic. It keeps its server's slots busy with an
adaptive in-flight window (:mod:`consumers.window`), writes a :class:`CompletionRecord` (or an
:class:`ErrorRecord` on the dead-letter topic) per prompt through an idempotent producer, and
commits per partition only the contiguous prefix of finished prompts (:mod:`consumers.offsets`).

Delivery: at-least-once. A prompt's offset is committed only after its completion or error
record was acknowledged by Kafka (acks=all), so a SIGKILL loses nothing; it re-generates at
most the prompts that were in flight or finished within the last commit interval (the window
plus ``commit_interval_s`` worth of completions). The export deduplicates by id.

Rebalances (aiokafka is eager: every rebalance revokes every partition, kafka-pitfalls.md).
On revoke we commit what is contiguous, then keep the revoked partitions' requests running as
*orphans* instead of cancelling them. When a partition comes back to us (the common case with
static membership) the re-fetched record adopts its orphan: no request is sent twice, and an
orphan that finished meanwhile is not generated again. Orphans of partitions that went to
another member are cancelled once the new assignment is known (the HTTP disconnect aborts them
on the server); their prompts are generated again by the new owner. Cost in duplicated GPU
work: the partial generations of requests in flight on partitions that really moved, plus any
orphan that finished between the revoke and the assignment on such a partition.

Server trouble (:mod:`consumers.health`): after ``down_after_failures`` consecutive retriable
failures, or when requests are in flight and none finishes for ``hang_timeout_s``, the server
is *down*: nothing is sent (retries are not burned), in-flight requests of a hung server are
abandoned and retried later, fetching is paused (while still polling, so ``max.poll.interval``
never expires) and a health probe runs every few seconds. When the probe passes, work resumes.
If the server stays down for ``down_grace_s``, the consumer leaves the group (it stops its
Kafka consumer; with static membership the broker reassigns its partitions after
``session_timeout_ms``) and rejoins once the server is healthy again.

Shutdown: SIGTERM/SIGINT stop fetching, wait up to ``shutdown_deadline_s`` for in-flight work,
commit, and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import re
import signal
import socket
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError, MessageSizeTooLargeError
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from consumers.client import ChatResult, ServerClient
from consumers.health import Backoff, HealthConfig, ServerHealth
from consumers.offsets import OffsetTracker
from consumers.quality import quality_flags
from consumers.window import WindowConfig, WindowPolicy
from streams import logs
from streams.config import Settings, check_server_url, load_settings
from streams.errors import FatalRequestError, KafkagenError, RetriableServerError, ServerError
from streams.kafka import consumer_kwargs, producer_kwargs, unreachable_message
from streams.records import (
    CompletionRecord,
    ErrorRecord,
    PromptRecord,
    RecordDecodeError,
    SourceOffset,
    Timings,
    decode,
    encode,
    key_of,
)
from streams.topics import ensure_topics, topic_specs

log = logging.getLogger("kafkagen.generate")

_PROBE_INTERVAL_S = 2.0
_LOAD_INTERVAL_S = 2.0
_DUPLICATE_RID = "Duplicate request ID"


@dataclass
class _Job:
    """One prompt being generated: its Kafka record and the task working on it."""

    record: ConsumerRecord[bytes, bytes]
    fetched_at: float
    task: asyncio.Task[None] | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.record.partition, self.record.offset)


@dataclass
class _Stats:
    completions: int = 0
    errors: int = 0
    retries: int = 0
    started: float = field(default_factory=time.monotonic)


class _Metrics:
    """Prometheus metrics of one consumer (its own registry, so several can share a process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.completions = Counter(
            "kafkagen_completions", "completion records written", ["finish_reason"], registry=self.registry
        )
        self.errors = Counter(
            "kafkagen_dead_letters", "error records written", ["error_type"], registry=self.registry
        )
        self.quality = Counter(
            "kafkagen_quality_flags", "quality flags raised", ["flag"], registry=self.registry
        )
        self.retries = Counter(
            "kafkagen_retries", "requests sent again after a retriable failure", registry=self.registry
        )
        self.tokens = Counter(
            "kafkagen_completion_tokens", "completion tokens generated", registry=self.registry
        )
        self.in_flight = Gauge("kafkagen_in_flight", "requests in flight", registry=self.registry)
        self.window = Gauge("kafkagen_window", "in-flight window size", registry=self.registry)
        self.server_up = Gauge("kafkagen_server_up", "1 when the server is healthy", registry=self.registry)


class GenerationConsumer:
    """One consumer-group member feeding one inference server.

    Args:
        settings: all settings; ``settings.consumer`` tunes this class.
        server_url: the server's base URL.
        group: consumer group id (default ``settings.consumer.group``).
        instance_id: static membership id (``group.instance.id``); stable per server, so a
            restarted consumer gets its partitions back without a fleet-wide rebalance.
    """

    def __init__(
        self, settings: Settings, server_url: str, *, group: str | None = None, instance_id: str | None = None
    ) -> None:
        self.settings = settings
        self.cfg = settings.consumer
        self.server_url = server_url.rstrip("/")
        self.group = group or group_id(settings)
        self.instance_id = instance_id or default_instance_id(self.server_url)
        self.topics = topic_specs(settings)
        self.prompts_topic = self.topics["prompts"].name
        self.client = ServerClient(
            self.server_url,
            settings.generation,
            pool_size=self.cfg.max_in_flight,
            request_timeout_s=self.cfg.request_timeout_s,
        )
        self.window = WindowPolicy(
            WindowConfig(max_size=self.cfg.max_in_flight, target_queue=self.cfg.standing_queue)
        )
        self.health = ServerHealth(
            HealthConfig(self.cfg.down_after_failures, self.cfg.down_grace_s, self.cfg.hang_timeout_s),
            time.monotonic(),
        )
        self.backoff = Backoff(self.cfg.backoff_initial_s, self.cfg.backoff_max_s)
        self.tracker = OffsetTracker()
        self.metrics = _Metrics()
        self.stats = _Stats()
        self.jobs: dict[tuple[int, int], _Job] = {}
        self.orphans: dict[tuple[int, int], _Job] = {}
        self.finished_orphans: set[tuple[int, int]] = set()
        self.done_uncommitted: dict[int, set[int]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._server_ok = asyncio.Event()
        self._abandon = asyncio.Event()
        self._stopping = asyncio.Event()
        self._last_commit = 0.0
        self._paused = False
        self._rng = random.Random()

    # -- public ------------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask :meth:`run` to finish gracefully (what SIGTERM does)."""
        self._stopping.set()

    @property
    def in_flight(self) -> int:
        return len(self.jobs)

    async def run(self) -> None:
        """Discover the server, join the group and generate until :meth:`stop`.

        Raises:
            RetriableServerError: the server never became ready within ``request_timeout_s``.
            aiokafka.errors.KafkaError: Kafka unreachable at start.
        """
        log.info(
            "waiting for server %s to be ready (up to %.0f s; SIGTERM stops)",
            self.server_url,
            self.cfg.request_timeout_s,
        )
        discovery = asyncio.create_task(self.client.discover(wait_s=self.cfg.request_timeout_s))
        stopping = asyncio.create_task(self._stopping.wait())
        await asyncio.wait({discovery, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not discovery.done():  # stopped while the server was not ready yet: nothing to drain
            discovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await discovery
            await self.client.aclose()
            log.info("stopped before server %s was ready", self.server_url)
            return
        info = discovery.result()
        log.info(
            "server %s: %s model=%s slots=%s context=%s",
            info.url,
            info.kind,
            info.model,
            info.max_running_requests,
            info.context_length,
        )
        self.window = WindowPolicy(
            WindowConfig(
                max_size=self.cfg.max_in_flight,
                max_running=info.max_running_requests,
                target_queue=self.cfg.standing_queue,
            )
        )
        self._server_ok.set()
        self.metrics.server_up.set(1)
        await ensure_topics(
            self.settings, [self.topics["prompts"], self.topics["completions"], self.topics["errors"]]
        )
        self._producer = AIOKafkaProducer(**producer_kwargs(self.settings.kafka))
        await self._producer.start()
        background = [asyncio.create_task(self._watch_load()), asyncio.create_task(self._report())]
        try:
            await self._join()
            while not self._stopping.is_set():
                if self.health.is_down:
                    await self._while_down()
                    continue
                await self._fetch_once()
                self._check_hung()
                await self._maybe_commit()
            await self._drain(self.cfg.shutdown_deadline_s)
        finally:
            for task in background:
                task.cancel()
            await self._close()

    # -- group membership ----------------------------------------------------------------------
    async def _join(self) -> None:
        consumer = AIOKafkaConsumer(
            **consumer_kwargs(self.settings.kafka, group_id=self.group),
            group_instance_id=self.instance_id,
            session_timeout_ms=self.cfg.session_timeout_ms,
            heartbeat_interval_ms=self.cfg.heartbeat_interval_ms,
            max_poll_records=self.cfg.max_in_flight,
        )
        await consumer.start()
        consumer.subscribe([self.prompts_topic], listener=_Listener(self))
        self._consumer = consumer
        self._paused = False
        log.info("joined group %s as %s", self.group, self.instance_id)

    async def _leave(self) -> None:
        """Give up our partitions: abandon all work, commit what is done, stop the Kafka consumer."""
        log.warning(
            "server %s down for %.0f s (%s): leaving group %s",
            self.server_url,
            self.cfg.down_grace_s,
            self.health.down_reason,
            self.group,
        )
        await self._commit(force=True)
        await self._cancel(list(self.jobs.values()) + list(self.orphans.values()))
        self.jobs.clear()
        self.orphans.clear()
        self.finished_orphans.clear()
        self.done_uncommitted.clear()
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
        self.tracker = OffsetTracker()

    async def on_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        parts = {tp.partition for tp in revoked if tp.topic == self.prompts_topic}
        await self._commit(force=True, partitions=parts)
        for key in [k for k in self.jobs if k[0] in parts]:
            self.orphans[key] = self.jobs.pop(key)
        # Finished but not committable yet (a lower offset was pending): never generate them again.
        for p in parts:
            self.finished_orphans |= {(p, o) for o in self.done_uncommitted.pop(p, set())}
        self.tracker.revoke(parts & self.tracker.assigned)
        self._paused = False
        log.info("revoked partitions %s (%d requests kept as orphans)", sorted(parts), len(self.orphans))

    async def on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        assert self._consumer is not None
        parts: dict[int, int | None] = {}
        for tp in assigned:
            if tp.topic == self.prompts_topic:
                parts[tp.partition] = await self._consumer.committed(tp)
        for p, committed in parts.items():
            if p not in self.tracker.assigned:
                self.tracker.assign(p, committed)
        gone = [job for key, job in self.orphans.items() if key[0] not in parts]
        await self._cancel(gone)
        for job in gone:
            self.orphans.pop(job.key, None)
        self.finished_orphans = {
            (p, o) for (p, o) in self.finished_orphans if p in parts and o >= (parts[p] or 0)
        }
        log.info("assigned partitions %s (%d orphans to adopt)", sorted(parts), len(self.orphans))

    # -- the fetch loop --------------------------------------------------------------------------
    async def _fetch_once(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        room = self.window.size - self.in_flight
        assignment = consumer.assignment()
        if room <= 0 and not self._paused and assignment:
            consumer.pause(*assignment)
            self._paused = True
        elif room > 0 and self._paused:
            consumer.resume(*assignment)
            self._paused = False
        batch = await consumer.getmany(timeout_ms=200, max_records=max(room, 1))
        for records in batch.values():
            for record in records:
                self._start(record)
        # The fetch position moves past transaction markers (the prompt producer is transactional),
        # which are never returned as records: declare it so commits can reach the log end.
        for tp in consumer.assignment():
            if tp.partition in self.tracker.assigned:
                self.tracker.advance(tp.partition, await consumer.position(tp))
        self.metrics.in_flight.set(self.in_flight)
        self.metrics.window.set(self.window.size)

    def _start(self, record: ConsumerRecord[bytes, bytes]) -> None:
        key = (record.partition, record.offset)
        if key in self.jobs:
            return  # fetched twice (a seek after rebalance): already being generated
        self.tracker.track(record.partition, record.offset)
        if key in self.finished_orphans:
            self.finished_orphans.discard(key)
            self.tracker.done(record.partition, record.offset)
            return
        orphan = self.orphans.pop(key, None)
        if orphan is not None:
            self.jobs[key] = orphan
            return
        job = _Job(record=record, fetched_at=time.time())
        job.task = asyncio.create_task(self._process(job), name=f"prompt-{record.partition}-{record.offset}")
        self.jobs[key] = job

    def _finish(self, job: _Job) -> None:
        """The job's result is durably in Kafka: let the commit position move past it."""
        p, o = job.key
        if self.jobs.get(job.key) is job:
            del self.jobs[job.key]
            if self.tracker.is_pending(p, o):
                self.tracker.done(p, o)
                self.done_uncommitted.setdefault(p, set()).add(o)
        elif self.orphans.get(job.key) is job:
            del self.orphans[job.key]
            self.finished_orphans.add(job.key)

    # -- one prompt ------------------------------------------------------------------------------
    async def _process(self, job: _Job) -> None:
        record = job.record
        source = SourceOffset(topic=record.topic, partition=record.partition, offset=record.offset)
        try:
            prompt = decode(record.value or b"", PromptRecord)
        except RecordDecodeError as exc:
            raw_id = (record.key or b"").decode(
                "utf-8", "replace"
            ) or f"{record.topic}:{record.partition}:{record.offset}"
            await self._emit_error(
                job,
                ErrorRecord(
                    id=raw_id,
                    run_id=self.settings.run_id,
                    raw=(record.value or b"").decode("utf-8", "replace"),
                    stage="generate",
                    error_type="RecordDecodeError",
                    message=str(exc),
                    attempts=0,
                    server=self.server_url,
                    source=source,
                    at=time.time(),
                ),
            )
            return
        attempts = 0
        last: ServerError | None = None
        while True:
            await self._server_ok.wait()
            attempts += 1
            rid = f"{self.settings.run_id}-{prompt.id}-{prompt.attempt}-{attempts}"
            body = self.client.request_body(prompt, rid)
            sent_at = time.time()
            try:
                result = await self._send(body)
            except FatalRequestError as exc:
                if _DUPLICATE_RID in str(exc):  # the same rid still runs from before a restart
                    last = RetriableServerError(str(exc), status=exc.status)
                else:
                    self.health.record_success(time.monotonic())
                    await self._dead_letter(job, prompt, source, exc, attempts)
                    return
            except RetriableServerError as exc:
                last = exc
            else:
                self.health.record_success(time.monotonic())
                self.window.observe_completion(result.latency_s, time.monotonic())
                await self._emit_completion(job, prompt, source, body, result, sent_at)
                return
            # a retriable failure
            now = time.monotonic()
            if last.status in (429, 503):
                self.window.observe_overload(now)
            if self.health.record_failure(now, str(last)):
                self._server_ok.clear()
                self.metrics.server_up.set(0)
            if attempts >= self.cfg.max_attempts and not self.health.is_down:
                await self._dead_letter(job, prompt, source, last, attempts)
                return
            self.stats.retries += 1
            self.metrics.retries.inc()
            await asyncio.sleep(self.backoff.delay(min(attempts, 30), self._rng))

    async def _send(self, body: dict[str, Any]) -> ChatResult:
        """One request, abandoned (as a retriable failure) if the server is declared hung."""
        abandon = self._abandon
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
        raise RetriableServerError(f"{self.server_url}: request abandoned: server hung")

    async def _emit_completion(
        self,
        job: _Job,
        prompt: PromptRecord,
        source: SourceOffset,
        body: dict[str, Any],
        result: ChatResult,
        sent_at: float,
    ) -> None:
        thinking = bool((body.get("chat_template_kwargs") or {}).get("enable_thinking"))
        flags = quality_flags(
            content=result.content,
            reasoning_content=result.reasoning_content,
            finish_reason=result.finish_reason,
            tool_calls=result.tool_calls,
            tools_offered=bool(prompt.tools),
            thinking_requested=thinking,
            prompt_text=_last_user_text(prompt),
        )
        params = {k: v for k, v in body.items() if k not in ("messages", "tools", "rid", "stream")}
        completion = CompletionRecord(
            id=prompt.id,
            run_id=self.settings.run_id,
            attempt=prompt.attempt,
            prompt=prompt,
            content=result.content,
            reasoning_content=result.reasoning_content,
            tool_calls=result.tool_calls,
            finish_reason=result.finish_reason,
            usage=result.usage,
            timings=Timings(
                queued_s=max(0.0, sent_at - job.fetched_at),
                latency_s=result.latency_s,
                started_at=sent_at,
                finished_at=sent_at + result.latency_s,
            ),
            server=self.server_url,
            model=result.model,
            params=params,
            quality=flags,
            source=source,
            consumer=self.instance_id,
        )
        try:
            await self._produce(self.topics["completions"].name, prompt.id, encode(completion))
        except MessageSizeTooLargeError as exc:
            await self._dead_letter(job, prompt, source, exc, 1)
            return
        self.stats.completions += 1
        self.metrics.completions.labels(result.finish_reason).inc()
        self.metrics.tokens.inc(result.usage.completion_tokens)
        for flag in flags:
            self.metrics.quality.labels(flag).inc()
        self._finish(job)

    async def _dead_letter(
        self, job: _Job, prompt: PromptRecord, source: SourceOffset, exc: Exception, attempts: int
    ) -> None:
        status = exc.status if isinstance(exc, ServerError) else None
        retriable = bool(getattr(exc, "retriable", False))
        await self._emit_error(
            job,
            ErrorRecord(
                id=prompt.id,
                run_id=self.settings.run_id,
                attempt=prompt.attempt,
                prompt=prompt,
                stage="generate",
                error_type=type(exc).__name__,
                message=str(exc)[:2000],
                status=status,
                retriable=retriable,
                attempts=attempts,
                server=self.server_url,
                source=source,
                at=time.time(),
            ),
        )

    async def _emit_error(self, job: _Job, error: ErrorRecord) -> None:
        await self._produce(self.topics["errors"].name, error.id, encode(error))
        self.stats.errors += 1
        self.metrics.errors.labels(error.error_type).inc()
        log.warning(
            "dead-lettered %s (partition %s offset %s): %s",
            error.id,
            job.record.partition,
            job.record.offset,
            error.message[:200],
        )
        self._finish(job)

    async def _produce(self, topic: str, record_id: str, value: bytes) -> None:
        """Send and wait for the broker's acknowledgement (acks=all); retry Kafka outages forever
        with backoff: the record is never dropped and its offset is not committed meanwhile."""
        assert self._producer is not None
        attempt = 0
        while True:
            try:
                await self._producer.send_and_wait(topic, value=value, key=key_of(record_id))
                return
            except MessageSizeTooLargeError:
                raise
            except KafkaError as exc:
                attempt += 1
                delay = self.backoff.delay(min(attempt, 30), self._rng)
                log.warning("producing to %s failed (%s); retrying in %.1f s", topic, exc, delay)
                await asyncio.sleep(delay)

    # -- server down / hung ------------------------------------------------------------------------
    def _check_hung(self) -> None:
        now = time.monotonic()
        if not self.health.is_down and self.health.hung(now, self.in_flight):
            self.health.mark_down(
                now,
                f"hung: {self.in_flight} requests in flight, none finished for "
                f"{self.cfg.hang_timeout_s:.0f} s",
            )
            self._server_ok.clear()
            self.metrics.server_up.set(0)
            self._abandon.set()
            self._abandon = asyncio.Event()

    async def _while_down(self) -> None:
        log.warning("server %s down: %s; pausing", self.server_url, self.health.down_reason)
        next_probe = 0.0
        while not self._stopping.is_set():
            if self._consumer is not None:
                assignment = self._consumer.assignment()
                if assignment:
                    self._consumer.pause(*assignment)
                    self._paused = True
                await self._consumer.getmany(timeout_ms=200, max_records=1)  # keeps the poll interval alive
                await self._maybe_commit()
            else:
                await asyncio.sleep(0.2)
            now = time.monotonic()
            if now >= next_probe:
                next_probe = now + _PROBE_INTERVAL_S
                if await self.client.healthy(timeout_s=min(30.0, self.cfg.hang_timeout_s)):
                    self.health.mark_up(time.monotonic())
                    self._server_ok.set()
                    self.metrics.server_up.set(1)
                    log.info("server %s healthy again; resuming", self.server_url)
                    if self._consumer is None:
                        await self._join()
                    return
            if self._consumer is not None and self.health.should_leave(time.monotonic()):
                await self._leave()

    # -- commits ----------------------------------------------------------------------------------
    async def _maybe_commit(self) -> None:
        if time.monotonic() - self._last_commit >= self.cfg.commit_interval_s:
            await self._commit()

    async def _commit(self, *, force: bool = False, partitions: set[int] | None = None) -> None:
        self._last_commit = time.monotonic()
        consumer = self._consumer
        if consumer is None:
            return
        offsets = {
            p: o for p, o in self.tracker.committable().items() if partitions is None or p in partitions
        }
        if not offsets:
            return
        try:
            await consumer.commit({TopicPartition(self.prompts_topic, p): o for p, o in offsets.items()})
        except (CommitFailedError, KafkaError) as exc:  # a rebalance is under way: commit later
            log.info("commit deferred: %s", exc)
            return
        for p, o in offsets.items():
            self.tracker.mark_committed(p, o)
            done = self.done_uncommitted.get(p)
            if done:
                self.done_uncommitted[p] = {x for x in done if x >= o}

    # -- shutdown ---------------------------------------------------------------------------------
    async def _drain(self, deadline_s: float) -> None:
        """Stop fetching, wait for in-flight work up to ``deadline_s`` seconds, commit."""
        consumer = self._consumer
        if consumer is not None and consumer.assignment():
            consumer.pause(*consumer.assignment())
        log.info("draining %d in-flight requests (deadline %.0f s)", self.in_flight, deadline_s)
        end = time.monotonic() + deadline_s
        while self.jobs and time.monotonic() < end:
            if consumer is not None:
                await consumer.getmany(timeout_ms=200, max_records=1)
            else:
                await asyncio.sleep(0.2)
            await self._maybe_commit()
        await self._commit(force=True)
        if self.jobs:
            log.warning(
                "%d requests unfinished at the deadline: they will be generated again", len(self.jobs)
            )

    async def _cancel(self, jobs: Sequence[_Job]) -> None:
        tasks = [j.task for j in jobs if j.task is not None and not j.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _close(self) -> None:
        await self._cancel(list(self.jobs.values()) + list(self.orphans.values()))
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
        await self.client.aclose()

    # -- background -------------------------------------------------------------------------------
    async def _watch_load(self) -> None:
        while True:
            await asyncio.sleep(_LOAD_INTERVAL_S)
            if self.health.is_down:
                continue
            load = await self.client.load()
            if load is not None:
                self.window.observe_metrics(
                    load.running, load.queued, time.monotonic(), in_flight=self.in_flight
                )

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(10.0)
            elapsed = max(1e-9, time.monotonic() - self.stats.started)
            log.info(
                "completions %d (%.2f/s), dead letters %d, retries %d, in flight %d/%d, server %s",
                self.stats.completions,
                self.stats.completions / elapsed,
                self.stats.errors,
                self.stats.retries,
                self.in_flight,
                self.window.size,
                "down" if self.health.is_down else "up",
            )


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Forwards aiokafka's rebalance callbacks (run inside the consumer's poll) to the consumer."""

    def __init__(self, owner: GenerationConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.owner.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self.owner.on_assigned(assigned)


def _last_user_text(prompt: PromptRecord) -> str | None:
    """The text of the prompt's last user message (text parts joined), or None."""
    for message in reversed(prompt.messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return None
    return None


def group_id(settings: Settings) -> str:
    """The generation consumers' group id: ``<consumer.group>.<run_id>``. One group per run, so a
    new run id replays the prompts topic from the start (a replay) and a re-run resumes."""
    return f"{settings.consumer.group}.{settings.run_id}"


def default_instance_id(server_url: str) -> str:
    """A static-membership id stable per host and server: ``<hostname>-<server host>-<port>``."""
    tail = re.sub(r"[^A-Za-z0-9]+", "-", server_url.split("://", 1)[-1]).strip("-")
    return f"{socket.gethostname()}-{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m consumers.generate --server URL [--group G] [--instance-id ID] [--metrics-port P]``
    plus any settings flag (``--generation.max-tokens 8192``, ``--kafka.bootstrap-servers ...``).
    Returns the exit status: 0 after a graceful stop, 1 on a fatal error, 2 on bad settings, 3 when
    Kafka cannot be reached at start."""
    parser = argparse.ArgumentParser(
        prog="python -m consumers.generate",
        description="Generation consumer: one per inference server (SGLang or OpenAI-compatible).",
        epilog="Any setting can also be given as a flag, e.g. --generation.max-tokens 8192 "
        "(see `python -m consumers.generate --settings-help`).",
    )
    parser.add_argument(
        "--server", required=True, help="the inference server's base URL, e.g. http://127.0.0.1:30000"
    )
    parser.add_argument("--group", help="consumer group id (default: <consumer.group>.<run id>)")
    parser.add_argument(
        "--instance-id", help="static membership id (default: <hostname>-<server host>-<port>)"
    )
    parser.add_argument(
        "--metrics-port", type=_port, help="serve Prometheus metrics on 127.0.0.1:PORT (1-65535)"
    )
    parser.add_argument("--settings-help", action="store_true", help="list every settings flag")
    args, rest = parser.parse_known_args(argv)
    logs.configure()
    try:
        settings = load_settings(Settings, ["--help"] if args.settings_help else rest, prog=parser.prog)
    except KafkagenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        check_server_url(args.server)
    except ValueError as exc:
        print(f"error: --server {exc}", file=sys.stderr)
        return 2
    worker = GenerationConsumer(settings, args.server, group=args.group, instance_id=args.instance_id)
    if args.metrics_port:
        try:
            start_http_server(args.metrics_port, addr="127.0.0.1", registry=worker.metrics.registry)
        except OSError as exc:
            print(f"error: --metrics-port {args.metrics_port}: {exc}", file=sys.stderr)
            return 2

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        await worker.run()

    try:
        asyncio.run(run())
    except KafkagenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (KafkaError, TimeoutError) as exc:  # unreachable or silent at start; later outages are retried
        print(unreachable_message(settings.kafka, exc), file=sys.stderr)
        return 3
    return 0


def _port(text: str) -> int:
    """argparse type: a TCP port number (1-65535)."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return port


if __name__ == "__main__":
    sys.exit(main())
