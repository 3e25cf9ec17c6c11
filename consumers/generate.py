"""The generation consumer: ``python -m consumers.generate --server URL``, one per inference server.

A member of the consumer group on the run's prompts topic. It keeps its server's slots busy with an
adaptive in-flight window (:mod:`consumers.window`), writes a completion or a dead letter per prompt
(:mod:`consumers.emit`), and commits per partition only the contiguous prefix of finished prompts
(:mod:`consumers.positions`). This module is the loop that ties the parts together: group
membership, fetching, starting, draining; the command line is :mod:`consumers.cli`.

Design: docs/consumer.md (the loop, commits, rebalances, server trouble, shutdown, recovery).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import sys
import time
from collections import deque
from collections.abc import Iterable, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError

from consumers.dead_letters import DeadLetters
from consumers.emit import Emitter
from consumers.group.assignor import stable_sticky_assignor
from consumers.group.membership import default_instance_id, group_consumer, group_id, stop_member
from consumers.group.ownership import check_topic_owner
from consumers.group.rebalance import RebalanceListener
from consumers.lending import Lending
from consumers.metrics import ConsumerMetrics, ConsumerStats
from consumers.positions.commits import Committer
from consumers.positions.jobs import Job, JobBook
from consumers.positions.offsets import OffsetTracker
from consumers.positions.recovery import answered_prompts
from consumers.process import PromptRunner
from consumers.quality.fleet_gate import FleetGate
from consumers.reuse import ReuseIndex
from consumers.sample_groups import sample_family
from consumers.server_watch import ServerWatch
from consumers.servers import ServerClient, ServerInfo
from consumers.window import WindowConfig, WindowPolicy
from streams.audit_trace import audit_trace
from streams.bounded import within
from streams.config import Settings
from streams.control import MemberLoad
from streams.kafka import KAFKA_STEP_S, KafkaOutage, producer_kwargs
from streams.retry import Backoff
from streams.topics import ensure_topics, topic_specs

__all__ = ["GenerationConsumer", "default_instance_id", "group_id"]

log = logging.getLogger("kafkagen.generate")

_FRESH_LOAD_S = 5.0
"""a ``/metrics`` reading older than this (seconds) no longer shows free slots."""
_STARTS_KEPT = 4096
"""start times remembered to discount those made since the last ``/metrics`` reading."""


class GenerationConsumer:
    """One consumer-group member feeding one inference server.

    Args:
        settings: all settings; ``settings.consumer`` tunes this class.
        server_url: the server's base URL.
        group: consumer group id (default :func:`streams.runs.naming.generate_group`:
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
        self.client = ServerClient.for_consumer(self.server_url, settings)
        self.window = WindowPolicy(self._window_config(None))
        self.backoff = Backoff(self.cfg.retry_initial_s, self.cfg.retry_max_s)
        self.metrics = ConsumerMetrics(settings.run_id, self.server_url, self.instance_id)
        self.metrics.kafka_up.set_function(lambda: float(self.kafka.up))
        self.stats = ConsumerStats()
        self.server = ServerWatch(self.client, self.cfg, self.metrics, self.server_url)
        self.book = JobBook(self.cfg.max_uncommitted)
        self._starts: deque[float] = deque()
        """when the latest prompts started (monotonic seconds), oldest first."""
        self.kafka = KafkaOutage(settings.kafka.bootstrap_servers, log)
        self._rng = random.Random()
        dead_letters = DeadLetters(settings.run_id, self.server_url)
        self.info: ServerInfo | None = None
        self.gate = FleetGate(
            settings,
            instance_id=self.instance_id,
            server_url=self.server_url,
            kafka=self.kafka,
            load=self._member_load,
            metrics=self.metrics,
        )
        self.emitter = Emitter(
            settings,
            completions_topic=self.topics["completions"].name,
            errors_topic=self.topics["errors"].name,
            server_url=self.server_url,
            instance_id=self.instance_id,
            dead_letters=dead_letters,
            kafka=self.kafka,
            backoff=self.backoff,
            rng=self._rng,
            metrics=self.metrics,
            stats=self.stats,
            finish=self._finish,
            counted=self.gate.count,
        )
        self.prompts = PromptRunner(
            settings,
            prompts_topic=self.prompts_topic,
            client=self.client,
            server=self.server,
            window=lambda: self.window,
            emitter=self.emitter,
            dead_letters=dead_letters,
            backoff=self.backoff,
            rng=self._rng,
            metrics=self.metrics,
            stats=self.stats,
            answered=self._answered,
        )
        self.lending = Lending(
            settings,
            own=self.client,
            instance_id=self.instance_id,
            members=lambda: self.gate.control.state.members,
            waiting=lambda: self.book.startable(),
            wake=self._start_buffered,
        )
        self._consumer: AIOKafkaConsumer | None = None
        self._stopping = asyncio.Event()
        self._generation = 0
        """bumped by every rebalance callback: a fetch position read across one is stale."""
        self._rebalancing = False
        """between a revoke and the next assignment: nothing new starts (the partitions may move)."""
        self._assignor = stable_sticky_assignor(self.instance_id)
        self.commits = Committer(
            self.book,
            topic=self.prompts_topic,
            interval_s=self.cfg.commit_interval_s,
            kafka=self.kafka,
            consumer=lambda: self._consumer,
            generation=lambda: self._generation,
        )

    # -- public ------------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask :meth:`run` to finish gracefully (what SIGTERM does)."""
        self._stopping.set()

    @property
    def in_flight(self) -> int:
        """What holds a place in the window (:attr:`consumers.positions.jobs.JobBook.in_flight`)."""
        return self.book.in_flight

    @property
    def waiting(self) -> int:
        """Prompts fetched and not started yet."""
        return self.book.waiting

    @property
    def tracker(self) -> OffsetTracker:
        """The offsets of the assigned partitions (:attr:`consumers.positions.jobs.JobBook.tracker`)."""
        return self.book.tracker

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
        info = self.info = discovery.result()
        log.info(
            "server %s: %s model=%s slots=%s context=%s",
            info.url,
            info.kind,
            info.model,
            info.max_running_requests,
            info.context_length,
        )
        self.window = WindowPolicy(self._window_config(info.max_running_requests))
        if info.max_running_requests is not None:
            self.metrics.slots.set(info.max_running_requests)
        self.server.mark_ready()
        await ensure_topics(
            self.settings,
            [self.topics[role] for role in ("prompts", "completions", "errors", "control")],
        )
        if self.cfg.reuse_from is not None:  # read once, before the first prompt can ask
            self.prompts.reuse = await ReuseIndex.load(self.settings, self.cfg.reuse_from)
        await self.gate.start()  # before joining: a run halted already starts nothing
        self.emitter.producer = AIOKafkaProducer(**producer_kwargs(self.settings.kafka))
        await self.emitter.producer.start()
        background = [
            asyncio.create_task(
                self.server.watch_load(
                    lambda: self.window, lambda: self.in_flight, lambda: self.prompts.groups.hidden > 0
                )
            ),
            asyncio.create_task(self._report()),
            asyncio.create_task(self.kafka.watch(lambda: self._consumer)),
            asyncio.create_task(self.gate.run()),
            *([asyncio.create_task(self.lending.watch())] if self.cfg.lend else []),
        ]
        try:
            # committed offsets lost (expired) on a run with results: skip what is answered
            self.book.answered = await answered_prompts(self.settings, self.group)
            await self._join()
            while not self._stopping.is_set():
                await self._step()
            await self._drain(self.cfg.shutdown_deadline_s)
        finally:
            for task in background:
                task.cancel()
            await self._close()

    def _member_load(self) -> MemberLoad:
        """This consumer's work and its server's load now, for its gate reports."""
        load = self.server.last_load
        return MemberLoad(
            in_flight=self.in_flight,
            window=self.window.size,
            waiting=self.waiting,
            slots=self.info.max_running_requests if self.info is not None else None,
            running=load.running if load is not None else None,
            queued=load.queued if load is not None else None,
            server_up=not self.server.is_down,
            partitions=sorted(self.book.tracker.assigned),
            model=self.info.model if self.info is not None else None,
        )

    def _window_config(self, max_running: int | None) -> WindowConfig:
        return WindowConfig(
            max_size=self.cfg.max_in_flight,
            max_running=max_running,
            target_queue=self.cfg.standing_queue,
            max_token_usage=self.cfg.max_token_usage,
        )

    async def check_topic_owner(self) -> None:
        """Refuse a prompts topic that belongs to another run (``docs/runs.md``,
        :func:`consumers.group.ownership.check_topic_owner`).

        Raises:
            ForeignRunError: the message names the topic, its owner and the fix.
            aiokafka.errors.KafkaError, TimeoutError: Kafka could not be asked.
        """
        await check_topic_owner(self.settings, self.prompts_topic)

    async def _step(self) -> None:
        """One turn of the loop: watch the server, start what may start, fetch, commit."""
        self._observe()
        if self.server.is_down:
            await self._watch_down()
        if self._consumer is None:  # left the group while the server was down
            if not self.server.is_down:
                await self._rejoin()
            else:
                await asyncio.sleep(0.2)
            return
        self._start_buffered()
        await self._fetch_once()
        self.server.check_hung(self.in_flight)
        self.server.check_throughput(self.in_flight, self.window.size)
        await self.commits.maybe_commit()

    async def _watch_down(self) -> None:
        """While the server is down (:meth:`consumers.server_watch.ServerWatch.poll_down`):
        rejoin when it is up again, leave the group after the grace."""
        verdict = self.server.poll_down(member=self._consumer is not None)
        if verdict == "up":
            await self._rejoin()
        elif verdict == "leave":
            await self._leave()

    # -- group membership ----------------------------------------------------------------------
    async def _join(self) -> None:
        consumer = group_consumer(
            self.settings, group=self.group, instance_id=self.instance_id, assignor=self._assignor
        )
        await consumer.start()
        consumer.subscribe([self.prompts_topic], listener=RebalanceListener(self))
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
        health = self.server.health
        down_s = time.monotonic() - (health.down_since or time.monotonic())
        log.warning(
            "server %s down for %.0f s (%s): leaving group %s",
            self.server_url,
            down_s,
            health.down_reason,
            self.group,
        )
        await self.commits.commit()
        await self._cancel(self.book.all_jobs())
        self.book.clear()
        if self._consumer is not None:
            await self._stop_consumer(leave=True)
        self.book.reset_offsets()
        self._generation += 1

    async def _stop_consumer(self, *, leave: bool) -> None:
        """Stop the Kafka consumer; with ``leave``, also remove our static membership at once
        (:func:`consumers.group.membership.stop_member`), so our partitions move within seconds."""
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        await stop_member(consumer, self.settings.kafka, self.group, leave=leave)
        audit_trace("generate").event("left")  # out of the group: every partition given up

    async def on_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        """Commit the revoked partitions' contiguous prefix; keep their requests as orphans.

        aiokafka runs this in its coordinator task, concurrently with the fetch loop
        (aiokafka 0.14 ``consumer/group_coordinator.py`` ``_on_join_prepare``); fetches return
        nothing while a reassignment is in progress (``consumer/fetcher.py`` ``fetched_records``).
        """
        self._generation += 1
        self._rebalancing = True
        parts = {tp.partition for tp in revoked if tp.topic == self.prompts_topic}
        await self.commits.commit(partitions=parts)
        self._generation += 1
        self.book.revoke(parts)
        audit_trace("generate").event("revoked", parts=sorted(parts))
        log.info("revoked partitions %s (%d requests kept as orphans)", sorted(parts), len(self.book.orphans))

    async def on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        """Register the new assignment, then cancel orphans of partitions that moved away.

        No ``await`` before the partitions are registered: aiokafka may return records of the
        assignment before it calls this (aiokafka 0.14 ``consumer/group_coordinator.py``
        ``_on_join_complete``; docs/consumer.md, "Rebalances").
        """
        self._generation += 1
        self._rebalancing = False
        parts = {tp.partition for tp in assigned if tp.topic == self.prompts_topic}
        audit_trace("generate").event("assigned", parts=sorted(parts))
        gone = self.book.assign(parts)
        log.info("assigned partitions %s (%d orphans to adopt)", sorted(parts), len(self.book.orphans))
        await self._cancel(gone)

    # -- the fetch loop --------------------------------------------------------------------------
    async def _fetch_once(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        # Keep up to ``prefetch`` records fetched ahead of the window, so a finished request is
        # replaced at once (:meth:`_answered`), not after a fetch. Records queued behind a full
        # span cannot start soon: they do not take room from the partitions that can.
        # Jobs whose answer is being written to Kafka count here too: a produce stall stops the
        # fetching (memory stays within window + prefetch) though they hold no server slot.
        room = (
            self.window.size
            + self._credit()
            + self.cfg.prefetch
            + self.book.lent
            - len(self.book.jobs)
            - self.book.startable()
        )
        self._apply_pauses(consumer, room)
        generation = self._generation
        # A partition adopting orphans is fetched even when the buffer is full: its records up
        # to the orphans' offsets cost at most one window more.
        extra = len(self.book.orphans) + len(self.book.finished_orphans)
        batch = await consumer.getmany(timeout_ms=200, max_records=max(room, 0) + extra or 1)
        for records in batch.values():
            for record in records:
                self.book.accept(record)
        self._start_buffered()
        # The fetch position moves past transaction markers (never returned as records): declare it
        # so commits reach the log end; one read across a rebalance callback is stale: skip it.
        for tp in list(consumer.assignment()):
            if tp.partition not in self.book.tracker.assigned or tp.topic != self.prompts_topic:
                continue
            try:
                position = await consumer.position(tp)
            except IllegalStateError:  # revoked meanwhile
                continue
            if generation == self._generation and tp.partition in self.book.tracker.assigned:
                self.book.tracker.advance(tp.partition, position)

    def _observe(self) -> None:
        """Set the gauges read from the loop's state: in flight, window, and per assigned
        partition its committed offset (:meth:`consumers.positions.offsets.OffsetTracker.base`) and the
        highwater aiokafka last fetched (:meth:`consumers.metrics.ConsumerMetrics.observe_partitions`)."""
        self.metrics.in_flight.set(self.in_flight)
        self.metrics.window.set(self.window.size)
        consumer, tracker = self._consumer, self.book.tracker
        offsets: dict[int, tuple[int | None, int | None]] = {}
        if consumer is not None:
            for tp in consumer.assignment():
                if tp.topic == self.prompts_topic and tp.partition in tracker.assigned:
                    offsets[tp.partition] = (tracker.base(tp.partition), consumer.highwater(tp))
        self.metrics.observe_partitions(offsets)

    def _apply_pauses(self, consumer: AIOKafkaConsumer, room: int) -> None:
        """Fetch only partitions that can take more work now (``room``: records); a pause only stops
        fetching. A partition whose orphans wait to be adopted
        (:meth:`consumers.positions.jobs.JobBook.adopting`) is never paused (docs/consumer.md,
        "Fetching and pauses")."""
        assignment = consumer.assignment()
        if room <= 0 or self.server.is_down or self._stopping.is_set():
            want = set(assignment)
        else:
            share = -(-(self.window.size + self.cfg.prefetch) // max(1, len(assignment)))
            want = {
                tp
                for tp in assignment
                if len(self.book.buffered.get(tp.partition, ())) >= share or self.book.span_full(tp.partition)
            }
        adopting = self.book.adopting()
        want = {tp for tp in want if tp.partition not in adopting or tp.topic != self.prompts_topic}
        paused = consumer.paused()
        if want - paused:
            consumer.pause(*(want - paused))
        if (paused & assignment) - want:
            consumer.resume(*((paused & assignment) - want))

    def _start_buffered(self) -> None:
        """Start queued records (:meth:`consumers.positions.jobs.JobBook.start_buffered`) while the window
        has room, the server is up, no rebalance is under way and the run is not halted by its
        quality gate."""
        if self.server.is_down or self._stopping.is_set() or self._rebalancing or self.gate.halted:
            return
        together = self.window.size if self.prompts.shares_samples() else 0
        default_max = self.settings.generation.max_tokens
        start = functools.partial(
            self.book.start_buffered, together=together, family=lambda r: sample_family(r, default_max)
        )
        if self.lending.room() > 0:  # idle members' free places come before this server's queue
            start(self._room() - self.cfg.standing_queue, self._start)
            self.book.start_buffered(self.lending.room(), lambda j: self.lending.lend(j, self.prompts.run))
        start(self._room(), self._start)

    def _room(self) -> int:
        """Prompts that may start now: the window, plus :meth:`_credit`, less those in flight."""
        return self.window.size + self._credit() - self.in_flight

    def _credit(self) -> int:
        """Places that copies of shared requests may have left on the server (docs/consumer.md,
        "Parallel samples"): at most :attr:`consumers.sample_groups.SampleGroups.hidden`, as many
        as the last fresh ``/metrics`` reading shows the server running and queueing fewer than
        the window, less the prompts started since."""
        hidden = self.prompts.groups.hidden
        load = self.server.last_load
        read_at = self.server.last_load_at
        if hidden <= 0 or load is None or time.monotonic() - read_at > _FRESH_LOAD_S:
            return 0
        while self._starts and self._starts[0] <= read_at:
            self._starts.popleft()
        free = self.window.size - load.running - load.queued - len(self._starts)
        return max(0, min(hidden, free))

    def _start(self, job: Job) -> asyncio.Task[None]:
        """The task that processes ``job`` (:meth:`consumers.process.PromptRunner.run`)."""
        self._starts.append(time.monotonic())
        if len(self._starts) > _STARTS_KEPT:
            self._starts.popleft()
        return asyncio.create_task(self.prompts.run(job), name=f"prompt-{job.key[0]}-{job.key[1]}")

    def _answered(self, job: Job) -> None:
        """The server answered ``job``: its slot is free, so start the next buffered prompt now,
        while the result is written to Kafka (the commit still waits for that write)."""
        if not job.answered:
            job.answered = True
            self._start_buffered()

    def _finish(self, job: Job) -> None:
        """The job's result is durably in Kafka: let the commit position move past it."""
        self.book.finish(job)
        self._answered(job)

    # -- shutdown ---------------------------------------------------------------------------------
    async def _drain(self, deadline_s: float) -> None:
        """Stop fetching, wait for in-flight work up to ``deadline_s`` seconds, commit."""
        consumer = self._consumer
        if consumer is not None and consumer.assignment():
            consumer.pause(*consumer.assignment())
        log.info("draining %d started prompts (deadline %.0f s)", len(self.book.jobs), deadline_s)
        end = time.monotonic() + deadline_s
        # With Kafka unreachable no result can be written: waiting for the requests buys nothing.
        while self.book.jobs and time.monotonic() < end and self.kafka.up:
            if consumer is not None:
                for records in (await consumer.getmany(timeout_ms=200, max_records=1)).values():
                    for record in records:
                        self.book.accept(record)  # tracked, never started: a later owner fetches it
            else:
                await asyncio.sleep(0.2)
            await self.commits.maybe_commit()
        await self.commits.commit()
        if self.book.jobs:
            log.warning(
                "%d requests unfinished at the deadline: they will be generated again", len(self.book.jobs)
            )

    async def _cancel(self, jobs: Sequence[Job]) -> None:
        tasks = [j.task for j in jobs if j.task is not None and not j.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _close(self) -> None:
        self.server.cancel_probes()
        await self._cancel(self.book.all_jobs())
        if self._consumer is not None:
            # A graceful stop (a scale-down) hands the partitions over at once; a crash does not.
            # Bounded: with all of Kafka down, leaving the group would wait for a coordinator.
            left, _ = await within(KAFKA_STEP_S, self._stop_consumer(leave=self._stopping.is_set()))
            if not left:
                log.warning("leaving group %s got no answer from Kafka in %.0f s", self.group, KAFKA_STEP_S)
        if self.emitter.producer is not None:
            with contextlib.suppress(Exception):
                await within(KAFKA_STEP_S, self.emitter.producer.stop())
        await self.gate.stop()
        await self.lending.aclose()
        if self.prompts.reuse is not None:
            with contextlib.suppress(Exception):
                await within(KAFKA_STEP_S, self.prompts.reuse.close())
        await self.client.aclose()

    async def _report(self) -> None:
        """Log the status line every 10 s."""
        while True:
            await asyncio.sleep(10.0)
            status = self.stats.status_line(
                in_flight=self.in_flight,
                window=self.window.size,
                waiting=self.waiting,
                server_up=not self.server.is_down,
                kafka=self.kafka.describe(),
            )
            log.info("%s", status)


if __name__ == "__main__":  # ``python -m consumers.generate``: the command line, :mod:`consumers.cli`
    from consumers.cli import main

    sys.exit(main())
