"""The generation consumer: ``python -m consumers.generate --server URL``, one per inference server.

A member of the consumer group on the prompts topic. It keeps its server's slots busy with an
adaptive in-flight window (:mod:`consumers.window`), writes a :class:`CompletionRecord` (or an
:class:`ErrorRecord` on the dead-letter topic) per prompt through an idempotent producer, and
commits per partition only the contiguous prefix of finished prompts (:mod:`consumers.offsets`).
Up to ``prefetch`` prompts are fetched ahead of the window, so the moment the server answers a
request (before its result is written to Kafka) the next prompt is sent: a fast server is not
left waiting on a Kafka fetch or a produce acknowledgement.

Delivery: at-least-once. A prompt's offset is committed only after its completion or error
record was acknowledged by Kafka (acks=all), so a SIGKILL loses nothing. Every fetched record is
tracked at once and kept until it is started (a local queue per partition while the window is
full or the server is down): nothing read from Kafka is dropped, whatever the schedule of
rebalances. A prompt starts only if its offset is below its partition's committed offset plus
``max_uncommitted``, so a SIGKILL re-generates at most ``max_uncommitted`` prompts per partition
the consumer owned (in practice: the requests in flight plus what finished since the last commit,
which is made every ``commit_interval_s`` and at once when a span is half full). Every prompt ends
in a completion or a dead letter: a result too large for a Kafka record, or any failure that
escapes a prompt's task, becomes a dead letter trimmed to fit (:func:`streams.records.fit_error`).

Rebalances (aiokafka is eager: every rebalance revokes every partition, docs/kafka.md; its
callbacks run in its coordinator task, concurrently with our fetch loop). The assignment is
sticky (:mod:`consumers.assignor`): a member's loss moves only its partitions.
On revoke we commit what is contiguous, then keep the revoked partitions' requests running as
*orphans* instead of cancelling them. When a partition comes back to us (the common case with
static membership and a sticky assignment) the re-fetched record adopts its orphan: no request
is sent twice, and an orphan that finished meanwhile is not generated again. Orphans of
partitions that went to another member are cancelled once the new assignment is known (the HTTP
disconnect aborts them on the server); their prompts are generated again by the new owner. On
assign the partitions are registered before any ``await``, and a record of a partition not
registered yet registers it: aiokafka may return records of a new assignment before it calls
``on_partitions_assigned`` (on a cluster of several brokers it usually does).

Server trouble (:mod:`consumers.health`): after ``down_after_failures`` consecutive retriable
failures, or when requests are in flight and none finishes for ``hang_timeout_s``, the server
is *down*: nothing new is sent, in-flight requests of a hung server are abandoned and retried
later, fetching is paused (while still polling, so ``max.poll.interval`` never expires, and
keeping every record a poll returns) and a health probe runs every few seconds in the
background. When the probe passes, work resumes. A prompt is sent at most ``max_attempts``
times by one consumer, outages included (a prompt fetched again after a rebalance, a leave or a
crash counts anew); failures of requests sent before the server came back do not
count against the server (:mod:`consumers.health`).
If the server stays down for ``down_grace_s``, the consumer leaves the group with an explicit
LeaveGroup (:func:`streams.kafka.remove_group_member`; a static member otherwise keeps its partitions until
``session_timeout_ms`` expires), so its partitions move to the other members within seconds, and
rejoins once the server is healthy again.

Runs (``docs/runs.md``): the consumer reads ``<run id>.prompts`` (``<replay_of>.prompts`` for a
replay) in group ``<consumer.group>.<run id>`` and writes ``<run id>.completions`` and
``.errors`` (:mod:`streams.naming`). A prompts topic belongs to one run: at start, a topic whose
first records carry a run id that is neither ``run_id`` nor ``replay_of`` stops the consumer with
exit 2 before it joins the group; later, a prompt of such another run is dead-lettered
(``ForeignRunPrompt``), never generated. Prompts without a run id (published by hand) are generated.

Shutdown: SIGTERM/SIGINT stop fetching, wait up to ``shutdown_deadline_s`` for in-flight work,
commit, leave the group (so a scale-down hands the partitions over at once) and exit 0. A
SIGKILLed member keeps its partitions until ``session_timeout_ms``; a restart within it gets them
back without a rebalance.
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
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError, MessageSizeTooLargeError
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from consumers.assignor import stable_sticky_assignor
from consumers.client import ChatResult, ServerClient, request_id
from consumers.health import Backoff, HealthConfig, ServerHealth
from consumers.offsets import OffsetTracker
from consumers.quality import quality_flags
from consumers.watchdog import ThroughputWatchdog, WatchdogConfig
from consumers.window import WindowConfig, WindowPolicy
from streams import logs, naming
from streams.config import Settings, check_server_url, load_settings
from streams.errors import (
    FatalRequestError,
    ForeignRunError,
    KafkagenError,
    RetriableServerError,
    ServerError,
)
from streams.kafka import (
    KafkaOutage,
    consumer_kwargs,
    producer_kwargs,
    remove_group_member,
    unreachable_message,
)
from streams.records import (
    MAX_ERROR_ID_CHARS,
    CompletionRecord,
    ErrorRecord,
    PromptRecord,
    RecordDecodeError,
    SourceOffset,
    Timings,
    decode,
    encode,
    fit_error,
    key_of,
)
from streams.runs import describe_owners, foreign_owners, topic_owners
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
    answered: bool = False
    """the server's answer is in (its result is being written to Kafka): it holds no server slot."""

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
        self.output_rate = Gauge(
            "kafkagen_output_tokens_per_second",
            "completion tokens per second finished over the watchdog window",
            registry=self.registry,
        )
        self.kafka_up = Gauge("kafkagen_kafka_up", "1 while Kafka answers", registry=self.registry)


class GenerationConsumer:
    """One consumer-group member feeding one inference server.

    Args:
        settings: all settings; ``settings.consumer`` tunes this class.
        server_url: the server's base URL.
        group: consumer group id (default :func:`streams.naming.generate_group`:
            ``<consumer.group>.<run_id>``).
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
        self.window = WindowPolicy(self._window_config(None))
        self.health = ServerHealth(
            HealthConfig(self.cfg.down_after_failures, self.cfg.down_grace_s, self.cfg.hang_timeout_s),
            time.monotonic(),
        )
        self.backoff = Backoff(self.cfg.retry_initial_s, self.cfg.retry_max_s)
        self.watchdog = ThroughputWatchdog(
            WatchdogConfig(
                window_s=self.cfg.watchdog_window_s,
                factor=self.cfg.watchdog_factor,
                collapse_s=self.cfg.watchdog_collapse_s,
                baseline_s=max(3600.0, self.cfg.watchdog_window_s),
            ),
            time.monotonic(),
        )
        self.tracker = OffsetTracker()
        self.metrics = _Metrics()
        self.metrics.kafka_up.set_function(lambda: float(self.kafka.up))
        self.stats = _Stats()
        self.jobs: dict[tuple[int, int], _Job] = {}
        """started prompts of assigned partitions, by (partition, offset)."""
        self.buffered: dict[int, deque[ConsumerRecord[bytes, bytes]]] = {}
        """fetched, tracked, not started yet (window full, server down, span limit), per partition."""
        self.orphans: dict[tuple[int, int], _Job] = {}
        self.finished_orphans: set[tuple[int, int]] = set()
        self.done_uncommitted: dict[int, set[int]] = {}
        self.kafka = KafkaOutage(settings.kafka.bootstrap_servers, log)
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._server_ok = asyncio.Event()
        self._abandon = asyncio.Event()
        self._stopping = asyncio.Event()
        self._probe: asyncio.Task[bool] | None = None
        """health probe of a server marked down."""
        self._hang_probe: asyncio.Task[bool] | None = None
        """generation probe of a server whose in-flight requests have not finished for a while."""
        self._next_probe = 0.0
        self._generation = 0
        """bumped by every rebalance callback: a fetch position read across one is stale."""
        self._last_commit = 0.0
        self._hold_until = 0.0
        """while the server is down for a throughput collapse: no health probe before this time."""
        self._give_up = False
        """leave the group at once, without waiting for ``down_grace_s``."""
        self._rebalancing = False
        """between a revoke and the next assignment: nothing new starts (the partitions may move)."""
        self._rng = random.Random()
        self._assignor = stable_sticky_assignor(self.instance_id)

    # -- public ------------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask :meth:`run` to finish gracefully (what SIGTERM does)."""
        self._stopping.set()

    @property
    def in_flight(self) -> int:
        """Prompts started on assigned partitions whose server answer is not in yet: what holds
        a place in the window (a prompt whose result is being written to Kafka does not)."""
        return sum(1 for job in self.jobs.values() if not job.answered)

    @property
    def waiting(self) -> int:
        """Prompts fetched and not started yet."""
        return sum(len(q) for q in self.buffered.values())

    async def run(self) -> None:
        """Discover the server, join the group and generate until :meth:`stop`.

        Raises:
            ForeignRunError: the prompts topic belongs to another run than ``run_id`` and
                ``replay_of`` (checked first, before waiting for the server or joining the group).
            RetriableServerError: the server never became ready within ``startup_timeout_s``.
            aiokafka.errors.KafkaError: Kafka unreachable at start.
        """
        await self.check_topic_owner()
        log.info(
            "waiting for server %s to be ready (up to %.0f s; SIGTERM stops)",
            self.server_url,
            self.cfg.startup_timeout_s,
        )
        discovery = asyncio.create_task(self.client.discover(wait_s=self.cfg.startup_timeout_s))
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
        self.window = WindowPolicy(self._window_config(info.max_running_requests))
        self._server_ok.set()
        self.metrics.server_up.set(1)
        await ensure_topics(
            self.settings, [self.topics["prompts"], self.topics["completions"], self.topics["errors"]]
        )
        self._producer = AIOKafkaProducer(**producer_kwargs(self.settings.kafka))
        await self._producer.start()
        background = [
            asyncio.create_task(self._watch_load()),
            asyncio.create_task(self._report()),
            asyncio.create_task(self.kafka.watch(lambda: self._consumer)),
        ]
        try:
            await self._join()
            while not self._stopping.is_set():
                await self._step()
            await self._drain(self.cfg.shutdown_deadline_s)
        finally:
            for task in background:
                task.cancel()
            await self._close()

    def _window_config(self, max_running: int | None) -> WindowConfig:
        return WindowConfig(
            max_size=self.cfg.max_in_flight,
            max_running=max_running,
            target_queue=self.cfg.standing_queue,
            max_token_usage=self.cfg.max_token_usage,
        )

    async def check_topic_owner(self) -> None:
        """Refuse a prompts topic that belongs to another run (``docs/runs.md``): its first records
        carry a run id that is neither ``run_id`` nor ``replay_of``. An empty or missing topic has
        no owner (the consumer may start before the producer).

        Raises:
            ForeignRunError: the message names the topic, its owner and the fix.
            aiokafka.errors.KafkaError, TimeoutError: Kafka could not be asked.
        """
        s = self.settings
        topic = self.prompts_topic
        foreign = foreign_owners(await topic_owners(s, topic), [s.run_id, s.replay_of])
        if not foreign:
            return
        other = foreign[0]
        replay = f" (a replay of run {s.replay_of})" if s.replay_of else ""
        raise ForeignRunError(
            f"prompts topic {topic} belongs to {describe_owners(foreign)}, not run {s.run_id}{replay}: "
            f"nothing was generated. To regenerate run {other}'s prompts under run {s.run_id}, add "
            f"--replay-of {other} (KAFKAGEN_REPLAY_OF={other}); to generate run {s.run_id}'s own "
            f"prompts, read {naming.prompts_topic(s.run_id)} (the default: drop --topics.prompts) "
            "(docs/runs.md)"
        )

    def _foreign_prompt(self, prompt: PromptRecord) -> str | None:
        """Why ``prompt`` must not be generated by this run, or ``None``: a prompt whose ``run_id``
        is set and is neither ``run_id`` nor ``replay_of`` belongs to another run. A prompt without
        a run id (published by hand) is accepted."""
        s = self.settings
        if prompt.run_id is None or prompt.run_id in (s.run_id, s.replay_of):
            return None
        replay = f" (a replay of run {s.replay_of})" if s.replay_of else ""
        return (
            f"prompt of run {prompt.run_id} on {self.prompts_topic}, read by run {s.run_id}{replay}: "
            f"not generated. A prompts topic belongs to one run (docs/runs.md): publish run "
            f"{prompt.run_id}'s prompts to {naming.prompts_topic(prompt.run_id)}, or regenerate them "
            f"with --replay-of {prompt.run_id}"
        )

    async def _step(self) -> None:
        """One turn of the loop: watch the server, start what may start, fetch, commit."""
        if self.health.is_down:
            await self._watch_down()
        if self._consumer is None:  # left the group while the server was down
            if not self.health.is_down:
                await self._rejoin()
            else:
                await asyncio.sleep(0.2)
            return
        self._start_buffered()
        await self._fetch_once()
        self._check_hung()
        self._check_throughput()
        await self._maybe_commit()

    # -- group membership ----------------------------------------------------------------------
    async def _join(self) -> None:
        consumer = AIOKafkaConsumer(
            **consumer_kwargs(self.settings.kafka, group_id=self.group),
            group_instance_id=self.instance_id,
            session_timeout_ms=self.cfg.session_timeout_ms,
            heartbeat_interval_ms=self.cfg.heartbeat_interval_ms,
            max_poll_records=self.cfg.max_in_flight,
            # One assignor only: aiokafka 0.14 sends one JoinGroup per listed assignor, each with
            # a longer protocol list, which feeds rebalance storms (consumers/assignor.py).
            partition_assignment_strategy=(self._assignor,),
        )
        await consumer.start()
        consumer.subscribe([self.prompts_topic], listener=_Listener(self))
        self._consumer = consumer
        self._rebalancing = False  # a revoke of a consumer that was stopped is over
        log.info("joined group %s as %s", self.group, self.instance_id)

    async def _rejoin(self) -> None:
        """Join the group again after leaving it; while Kafka cannot be reached, wait and retry
        (the next loop turn) instead of exiting."""
        if self._consumer is not None:
            return
        try:
            await self._join()
        except KafkaError as exc:
            self.kafka.failed(f"rejoining group {self.group} failed: {exc}")
            await asyncio.sleep(self.backoff.delay(3, self._rng))
        else:
            self.kafka.ok()

    async def _leave(self) -> None:
        """Give up our partitions: abandon all work, commit what is done, stop the Kafka consumer."""
        down_s = time.monotonic() - (self.health.down_since or time.monotonic())
        log.warning(
            "server %s down for %.0f s (%s): leaving group %s",
            self.server_url,
            down_s,
            self.health.down_reason,
            self.group,
        )
        await self._commit()
        await self._cancel(list(self.jobs.values()) + list(self.orphans.values()))
        self.jobs.clear()
        self.buffered.clear()
        self.orphans.clear()
        self.finished_orphans.clear()
        self.done_uncommitted.clear()
        if self._consumer is not None:
            await self._stop_consumer(leave=True)
        self.tracker = OffsetTracker()
        self._generation += 1

    async def _stop_consumer(self, *, leave: bool) -> None:
        """Stop the Kafka consumer; with ``leave``, also remove our static membership at once
        (:func:`streams.kafka.remove_group_member`), so our partitions move within seconds."""
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        member_id = getattr(getattr(consumer, "_coordinator", None), "member_id", "")
        with contextlib.suppress(Exception):
            await consumer.stop()
        if leave:
            await remove_group_member(self.settings.kafka, self.group, member_id)

    async def on_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        """Commit the revoked partitions' contiguous prefix; keep their requests as orphans.

        aiokafka runs this in its coordinator task, concurrently with the fetch loop
        (aiokafka 0.14 ``consumer/group_coordinator.py`` ``_on_join_prepare``); fetches return
        nothing while a reassignment is in progress (``consumer/fetcher.py`` ``fetched_records``).
        """
        self._generation += 1
        self._rebalancing = True
        parts = {tp.partition for tp in revoked if tp.topic == self.prompts_topic}
        await self._commit(partitions=parts)
        self._generation += 1
        self._forget(parts, keep_orphans=True)
        log.info("revoked partitions %s (%d requests kept as orphans)", sorted(parts), len(self.orphans))

    async def on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        """Register the new assignment, then cancel orphans of partitions that moved away.

        No ``await`` before the partitions are registered: aiokafka sets the assignment, and its
        fetcher may return records of it, before it calls this (aiokafka 0.14
        ``consumer/group_coordinator.py`` ``_on_join_complete``). A record of a partition not
        registered yet registers it (:meth:`_accept`), so the order does not matter.
        """
        self._generation += 1
        self._rebalancing = False
        parts = {tp.partition for tp in assigned if tp.topic == self.prompts_topic}
        for p in parts - self.tracker.assigned:
            self.tracker.assign(p)
        self._forget(self.tracker.assigned - parts, keep_orphans=False)
        gone = [job for key, job in self.orphans.items() if key[0] not in parts]
        for job in gone:
            self.orphans.pop(job.key, None)
        self.finished_orphans = {(p, o) for (p, o) in self.finished_orphans if p in parts}
        log.info("assigned partitions %s (%d orphans to adopt)", sorted(parts), len(self.orphans))
        await self._cancel(gone)

    def _forget(self, parts: set[int] | frozenset[int], *, keep_orphans: bool) -> None:
        """Stop tracking ``parts``: their started prompts become orphans (or are cancelled),
        their fetched-but-unstarted records are dropped (the next owner fetches them again:
        nothing was committed past them)."""
        for key in [k for k in self.jobs if k[0] in parts]:
            job = self.jobs.pop(key)
            if keep_orphans:
                self.orphans[key] = job
            elif job.task is not None:
                job.task.cancel()
        for p in parts:
            self.buffered.pop(p, None)
            # Finished but not committable yet (a lower offset was pending): never generate them again.
            done = self.done_uncommitted.pop(p, set())
            if keep_orphans:
                self.finished_orphans |= {(p, o) for o in done}
        self.tracker.revoke(parts & self.tracker.assigned)

    # -- the fetch loop --------------------------------------------------------------------------
    async def _fetch_once(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        # Keep up to ``prefetch`` records fetched ahead of the window, so a finished request is
        # replaced at once (:meth:`_answered`), not after a fetch. Records queued behind a full
        # span cannot start soon: they do not take room from the partitions that can.
        # Jobs whose answer is being written to Kafka count here too: a produce stall stops the
        # fetching (memory stays within window + prefetch) though they hold no server slot.
        startable = sum(len(q) for p, q in self.buffered.items() if not self._head_blocked(p))
        room = self.window.size + self.cfg.prefetch - len(self.jobs) - startable
        self._apply_pauses(consumer, room)
        generation = self._generation
        batch = await consumer.getmany(timeout_ms=200, max_records=max(room, 1))
        for records in batch.values():
            for record in records:
                self._accept(record)
        self._start_buffered()
        # The fetch position moves past transaction markers (the prompt producer is transactional),
        # which are never returned as records: declare it so commits can reach the log end. A
        # position read across a rebalance callback may belong to the previous assignment: skip it.
        for tp in list(consumer.assignment()):
            if tp.partition not in self.tracker.assigned or tp.topic != self.prompts_topic:
                continue
            try:
                position = await consumer.position(tp)
            except IllegalStateError:  # revoked meanwhile
                continue
            if generation == self._generation and tp.partition in self.tracker.assigned:
                self.tracker.advance(tp.partition, position)
        self.metrics.in_flight.set(self.in_flight)
        self.metrics.window.set(self.window.size)

    def _apply_pauses(self, consumer: AIOKafkaConsumer, room: int) -> None:
        """Fetch only partitions that can take more work now.

        Paused: every partition while the window and the prefetch buffer are full or the server
        is down; else a partition holding its share of the buffer (``(window + prefetch) /
        partitions``), or whose uncommitted span reached ``max_uncommitted``. A pause only stops
        fetching: records already returned are kept.
        """
        assignment = consumer.assignment()
        if room <= 0 or self.health.is_down or self._stopping.is_set():
            want = set(assignment)
        else:
            share = -(-(self.window.size + self.cfg.prefetch) // max(1, len(assignment)))
            want = {
                tp
                for tp in assignment
                if len(self.buffered.get(tp.partition, ())) >= share or self._span_full(tp.partition)
            }
        paused = consumer.paused()
        if want - paused:
            consumer.pause(*(want - paused))
        if (paused & assignment) - want:
            consumer.resume(*((paused & assignment) - want))

    def _head_blocked(self, partition: int) -> bool:
        """Whether the first queued record of ``partition`` lies past its uncommitted span."""
        queue = self.buffered.get(partition)
        if not queue or partition not in self.tracker.assigned:
            return False
        base = self.tracker.base(partition)
        return base is not None and queue[0].offset >= base + self.cfg.max_uncommitted

    def _span_full(self, partition: int) -> bool:
        """Whether ``partition`` was fetched up to ``max_uncommitted`` past its span's base."""
        if partition not in self.tracker.assigned:
            return False
        base, end = self.tracker.base(partition), self.tracker.fetched_end(partition)
        return base is not None and end is not None and end >= base + self.cfg.max_uncommitted

    def _accept(self, record: ConsumerRecord[bytes, bytes]) -> None:
        """Take a fetched record: track it, then adopt its orphan, skip it if an orphan already
        finished it, or queue it to start. Never drops a record it has not accounted for."""
        p, o = record.partition, record.offset
        if p not in self.tracker.assigned:  # returned before on_partitions_assigned ran
            self.tracker.assign(p)
        if self.tracker.seen(p, o):
            return  # fetched again after a seek: already in flight, done, or queued
        self.tracker.track(p, o)
        key = (p, o)
        if key in self.finished_orphans:
            self.finished_orphans.discard(key)
            self.tracker.done(p, o)
            self.done_uncommitted.setdefault(p, set()).add(o)
            return
        orphan = self.orphans.pop(key, None)
        if orphan is not None:
            self.jobs[key] = orphan
            return
        self.buffered.setdefault(p, deque()).append(record)

    def _start_buffered(self) -> None:
        """Start queued records, oldest first per partition and round-robin over partitions, while
        the window has room, the server is up, and each record is within its partition's span."""
        if self.health.is_down or self._stopping.is_set() or self._rebalancing:
            return
        room = self.window.size - self.in_flight
        while room > 0:
            started = False
            for p, queue in list(self.buffered.items()):
                if not queue or room <= 0:
                    continue
                if self._head_blocked(p):
                    continue
                record = queue.popleft()
                job = _Job(record=record, fetched_at=time.time())
                job.task = asyncio.create_task(self._guarded(job), name=f"prompt-{p}-{record.offset}")
                self.jobs[job.key] = job
                self.buffered[p] = self.buffered.pop(p)  # served: to the back of the round
                room -= 1
                started = True
            if not started:
                break
        for p in [p for p, q in self.buffered.items() if not q]:
            del self.buffered[p]

    def _answered(self, job: _Job) -> None:
        """The server answered ``job``: its slot is free, so start the next buffered prompt now,
        while the result is written to Kafka (the commit still waits for that write)."""
        if not job.answered:
            job.answered = True
            self._start_buffered()

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
        self._answered(job)

    # -- one prompt ------------------------------------------------------------------------------
    async def _guarded(self, job: _Job) -> None:
        """:meth:`_process`, and if anything escapes it, a dead letter saying what: a prompt's
        task never ends without a completion or error record, or its partition would be pinned."""
        try:
            await self._process(job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("prompt at partition %s offset %s failed unexpectedly", *job.key)
            record = job.record
            await self._emit_error(
                job,
                ErrorRecord(
                    id=(record.key or b"").decode("utf-8", "replace") or _source_id(record),
                    run_id=self.settings.run_id,
                    stage="generate",
                    error_type=type(exc).__name__,
                    message=f"unexpected failure in the consumer: {exc}",
                    attempts=0,
                    server=self.server_url,
                    source=SourceOffset(topic=record.topic, partition=record.partition, offset=record.offset),
                    at=time.time(),
                ),
            )

    async def _process(self, job: _Job) -> None:
        record = job.record
        source = SourceOffset(topic=record.topic, partition=record.partition, offset=record.offset)
        try:
            prompt = decode(record.value or b"", PromptRecord)
        except RecordDecodeError as exc:
            await self._emit_error(
                job,
                ErrorRecord(
                    id=(record.key or b"").decode("utf-8", "replace") or _source_id(record),
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
        foreign = self._foreign_prompt(prompt)
        if foreign is not None:
            await self._emit_error(
                job,
                ErrorRecord(
                    id=prompt.id,
                    run_id=self.settings.run_id,
                    attempt=prompt.attempt,
                    prompt=prompt,
                    stage="generate",
                    error_type="ForeignRunPrompt",
                    message=foreign,
                    attempts=0,
                    server=self.server_url,
                    source=source,
                    at=time.time(),
                ),
            )
            return
        attempts = 0
        while True:
            await self._server_ok.wait()
            attempts += 1
            rid = request_id(self.settings.run_id, prompt.id, prompt.attempt, attempts)
            body = self.client.request_body(prompt, rid)
            sent_at = time.time()
            sent_mono = time.monotonic()
            try:
                result = await self._send(body)
            except FatalRequestError as exc:
                if _DUPLICATE_RID not in str(exc):
                    self.health.record_success(time.monotonic())
                    self._answered(job)
                    await self._dead_letter(job, prompt, source, exc, attempts)
                    return
                last: ServerError = RetriableServerError(str(exc), status=exc.status)
            except RetriableServerError as exc:
                last = exc
            else:
                self.health.record_success(time.monotonic())
                self.window.observe_completion(result.latency_s, time.monotonic())
                # the server's output rate counts at the answer: a Kafka stall is not a collapse
                self.watchdog.observe(time.monotonic(), result.usage.completion_tokens)
                self._answered(job)
                await self._emit_completion(job, prompt, source, body, result, sent_at)
                return
            # a retriable failure
            now = time.monotonic()
            if last.status in (429, 503):
                self.window.observe_overload(now)
            if self.health.record_failure(now, str(last), sent_at=sent_mono):
                self._server_ok.clear()
                self.metrics.server_up.set(0)
            if attempts >= self.cfg.max_attempts:
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
        value = encode(completion)
        if len(value) > self._value_budget(prompt.id):
            too_large = MessageSizeTooLargeError(
                f"the completion is {len(value)} bytes, over kafka.max_message_bytes "
                f"({self.settings.kafka.max_message_bytes}); raise it (KAFKAGEN_KAFKA__MAX_MESSAGE_BYTES) "
                "and re-generate this prompt"
            )
            await self._dead_letter(job, prompt, source, too_large, 1)
            return
        try:
            await self._produce(self.topics["completions"].name, prompt.id, value)
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
        """Write ``error`` (trimmed to fit a Kafka record, :func:`streams.records.fit_error`) to the
        dead-letter topic, then let the offset be committed."""
        error = fit_error(error, self._value_budget(error.id))
        await self._produce(self.topics["errors"].name, error.id, encode(error))
        self.stats.errors += 1
        self.metrics.errors.labels(error.error_type).inc()
        log.warning(
            "dead-lettered %s (partition %s offset %s): %s",
            error.id[:200],
            job.record.partition,
            job.record.offset,
            error.message[:200],
        )
        self._finish(job)

    def _value_budget(self, record_id: str) -> int:
        """Bytes a record value may have: the record limit less its key and framing (an error
        record's id, its key, is cut to :data:`streams.records.MAX_ERROR_ID_CHARS` first)."""
        key = key_of(record_id[:MAX_ERROR_ID_CHARS])
        return self.settings.kafka.max_message_bytes - 4 * len(key) - 1024

    async def _produce(self, topic: str, record_id: str, value: bytes) -> None:
        """Send and wait for the broker's acknowledgement (acks=all); retry Kafka outages forever
        with backoff: the record is never dropped and its offset is not committed meanwhile.
        The outage is one warning, a reminder every 30 s, the ``kafkagen_kafka_up`` gauge and
        the status line (:class:`streams.kafka.KafkaOutage`), not a line per record."""
        assert self._producer is not None
        attempt = 0
        while True:
            try:
                await self._producer.send_and_wait(topic, value=value, key=key_of(record_id))
            except MessageSizeTooLargeError:
                raise
            except KafkaError as exc:
                attempt += 1
                self.kafka.failed(f"producing to {topic} failed: {exc}")
                await asyncio.sleep(self.backoff.delay(min(attempt, 30), self._rng))
            else:
                self.kafka.ok()
                return

    # -- server down / hung ------------------------------------------------------------------------
    def _check_hung(self) -> None:
        """Requests in flight and none finished for ``hang_timeout_s``: long generations, or a
        wedged engine? The server's own generation probe tells them apart before anything is
        abandoned. SGLang's ``/health_generate`` passes when the engine sent any output since the
        probe began, and it sends the output of every running non-streaming request each 50
        tokens (sglang 0.5 ``entrypoints/http_server.py`` ``health_generate``,
        ``managers/scheduler_output_processor_mixin.py`` ``DEFAULT_FORCE_STREAM_INTERVAL``), so
        it passes under a full batch of long generations and fails on a hung engine. Passed: the
        in-flight requests count as progressing. Failed: the server is hung (marked down)."""
        now = time.monotonic()
        if self.health.is_down or not self.health.hung(now, self.in_flight):
            if self._hang_probe is not None:  # its verdict is about a moment that has passed
                self._hang_probe.cancel()
                self._hang_probe = None
            return
        if self._hang_probe is None:
            self._hang_probe = asyncio.create_task(
                self.client.healthy(timeout_s=min(30.0, self.cfg.hang_timeout_s))
            )
            return
        if not self._hang_probe.done():
            return
        probe, self._hang_probe = self._hang_probe, None
        if not probe.cancelled() and probe.exception() is None and probe.result():
            self.health.record_progress(time.monotonic())
            log.info(
                "server %s: %d requests in flight, none finished for %.0f s, but it is generating; not hung",
                self.server_url,
                self.in_flight,
                self.cfg.hang_timeout_s,
            )
            return
        self._declare_down(
            f"hung: {self.in_flight} requests in flight, none finished for "
            f"{self.cfg.hang_timeout_s:.0f} s, and its generation probe failed"
        )

    def _declare_down(self, reason: str) -> None:
        """Mark the server down for ``reason``: stop starting work and abandon what is in flight
        (each abandoned prompt is retried within its ``max_attempts``)."""
        self.health.mark_down(time.monotonic(), reason)
        self._server_ok.clear()
        self.metrics.server_up.set(0)
        self._abandon.set()
        self._abandon = asyncio.Event()

    def _check_throughput(self) -> None:
        """Feed the output-rate watchdog (:mod:`consumers.watchdog`); on a lasting collapse, mark the
        server down and give up the partitions at once, for ``watchdog_hold_s``."""
        if self.health.is_down:
            return
        now = time.monotonic()
        saturated = self.in_flight if self.in_flight >= max(1, self.window.size // 2) else 0
        was_low = self.watchdog.low()
        collapsed = self.watchdog.check(now, saturated)
        rate, baseline = self.watchdog.rate(now), self.watchdog.baseline or 0.0
        self.metrics.output_rate.set(rate)
        if self.watchdog.low() and not was_low:
            log.warning(
                "server %s output %.1f tokens/s, below 1/%g of its recent peak %.1f tokens/s; "
                "giving up its partitions if this lasts %.0f s",
                self.server_url,
                rate,
                self.cfg.watchdog_factor,
                baseline,
                self.cfg.watchdog_collapse_s,
            )
        if not collapsed:
            return
        self._declare_down(
            f"throughput collapsed: {rate:.1f} tokens/s for {self.cfg.watchdog_collapse_s:.0f} s against a "
            f"recent peak of {baseline:.1f}; out of the group for {self.cfg.watchdog_hold_s:.0f} s",
        )
        self._hold_until = now + self.cfg.watchdog_hold_s
        self._give_up = True
        self.watchdog.reset(now)

    async def _watch_down(self) -> None:
        """While the server is down: probe it every few seconds in the background (the loop keeps
        polling Kafka meanwhile), resume when a probe passes, leave the group after the grace."""
        now = time.monotonic()
        if self._probe is None and now >= max(self._next_probe, self._hold_until):
            if self._next_probe == 0.0:
                log.warning("server %s down: %s; pausing", self.server_url, self.health.down_reason)
            self._next_probe = now + _PROBE_INTERVAL_S
            self._probe = asyncio.create_task(
                self.client.healthy(timeout_s=min(30.0, self.cfg.hang_timeout_s))
            )
        if self._probe is not None and self._probe.done():
            probe, self._probe = self._probe, None
            if not probe.cancelled() and probe.exception() is None and probe.result():
                self.health.mark_up(time.monotonic())
                self._next_probe = 0.0
                self._server_ok.set()
                self.metrics.server_up.set(1)
                log.info("server %s healthy again; resuming", self.server_url)
                await self._rejoin()
                return
        if self._consumer is not None and (self._give_up or self.health.should_leave(time.monotonic())):
            self._give_up = False
            await self._leave()

    # -- commits ----------------------------------------------------------------------------------
    async def _maybe_commit(self) -> None:
        """Commit every ``commit_interval_s``, and at once when a partition's uncommitted span is
        half of ``max_uncommitted`` (so the span limit does not throttle a fast partition)."""
        due = time.monotonic() - self._last_commit >= self.cfg.commit_interval_s
        if not due:
            for p, position in self.tracker.committable().items():
                base = self.tracker.base(p)
                if base is not None and position - base >= self.cfg.max_uncommitted // 2:
                    due = True
                    break
        if due:
            await self._commit()

    async def _commit(self, *, partitions: set[int] | None = None) -> None:
        self._last_commit = time.monotonic()
        consumer = self._consumer
        if consumer is None:
            return
        offsets = {
            p: o for p, o in self.tracker.committable().items() if partitions is None or p in partitions
        }
        if not offsets:
            return
        generation = self._generation
        try:
            await consumer.commit({TopicPartition(self.prompts_topic, p): o for p, o in offsets.items()})
        except (CommitFailedError, IllegalStateError) as exc:  # a rebalance is under way: commit later
            log.info("commit deferred: %s", exc)
            return
        except KafkaError as exc:
            self.kafka.failed(f"commit failed: {exc}")
            return
        self.kafka.ok()
        for p, o in offsets.items():
            if p not in self.tracker.assigned or (generation != self._generation and partitions is None):
                continue
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
        log.info("draining %d started prompts (deadline %.0f s)", len(self.jobs), deadline_s)
        end = time.monotonic() + deadline_s
        while self.jobs and time.monotonic() < end:
            if consumer is not None:
                for records in (await consumer.getmany(timeout_ms=200, max_records=1)).values():
                    for record in records:
                        self._accept(record)  # tracked, never started: a later owner fetches it
            else:
                await asyncio.sleep(0.2)
            await self._maybe_commit()
        await self._commit()
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
        for probe in (self._probe, self._hang_probe):
            if probe is not None:
                probe.cancel()
        await self._cancel(list(self.jobs.values()) + list(self.orphans.values()))
        if self._consumer is not None:
            # A graceful stop (a scale-down) hands the partitions over at once; a crash does not.
            await self._stop_consumer(leave=self._stopping.is_set())
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
        await self.client.aclose()

    # -- background -------------------------------------------------------------------------------
    async def _watch_load(self) -> None:
        """Feed the window from the server's ``/metrics`` every few seconds. A reading that fails
        (a malformed or impossible one; an unreachable server reads as no reading) is logged and
        skipped; the watcher never dies."""
        failures = 0
        while True:
            if not self.health.is_down:
                try:
                    load = await self.client.load()
                    if load is not None:
                        self.window.observe_metrics(
                            load.running,
                            load.queued,
                            time.monotonic(),
                            in_flight=self.in_flight,
                            token_usage=load.token_usage,
                        )
                except Exception as exc:  # one bad reading must not stop the window adapting
                    failures += 1
                    if failures == 1 or failures % 30 == 0:
                        log.warning(
                            "reading %s/metrics failed (%d times): %r", self.server_url, failures, exc
                        )
            await asyncio.sleep(_LOAD_INTERVAL_S)

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(10.0)
            elapsed = max(1e-9, time.monotonic() - self.stats.started)
            kafka = self.kafka.describe()
            log.info(
                "completions %d (%.2f/s), dead letters %d, retries %d, in flight %d/%d, waiting %d, "
                "server %s, kafka %s",
                self.stats.completions,
                self.stats.completions / elapsed,
                self.stats.errors,
                self.stats.retries,
                self.in_flight,
                self.window.size,
                self.waiting,
                "down" if self.health.is_down else "up",
                kafka,
            )


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Forwards aiokafka's rebalance callbacks (run in aiokafka's coordinator task, concurrently
    with the fetch loop) to the consumer."""

    def __init__(self, owner: GenerationConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.owner.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self.owner.on_assigned(assigned)


def _source_id(record: ConsumerRecord[bytes, bytes]) -> str:
    """The id of a record that carries none: ``<topic>+<partition>+<offset>``."""
    return f"{record.topic}+{record.partition}+{record.offset}"


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


group_id = naming.generate_group
"""The generation consumers' group id (:func:`streams.naming.generate_group`)."""


def default_instance_id(server_url: str) -> str:
    """A static-membership id stable per host and server: ``<hostname>-<server host>-<port>``."""
    tail = re.sub(r"[^A-Za-z0-9]+", "-", server_url.split("://", 1)[-1]).strip("-")
    return f"{socket.gethostname()}-{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m consumers.generate --server URL [--group G] [--instance-id ID] [--metrics-port P]``
    plus any settings flag (``--generation.max-tokens 8192``, ``--kafka.bootstrap-servers ...``).
    Returns the exit status: 0 after a graceful stop, 1 on a fatal error, 2 on bad settings or a
    prompts topic of another run (``docs/runs.md``), 3 when Kafka cannot be reached at start."""
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
    except ForeignRunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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
