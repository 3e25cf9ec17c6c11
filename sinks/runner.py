"""The sink's runner: consume the completions and dead-letter topics, batch, upload, then commit.

One :class:`SinkRunner` per process owns one ``AIOKafkaConsumer`` built by
:func:`streams.kafka.consumer_kwargs` (``read_committed``, manual commits) and carries rules 1-4 of
docs/sink.md. Which records enter a batch, backpressure, the memory bound (two batches and
``2 * poll_records`` records per partition), rebalances, shutdown and why not faust's agent:
docs/sink.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Coroutine, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from sinks.batch import Batch
from sinks.layout import ObjectMeta, object_key, partition_prefix
from sinks.lines import record_line
from sinks.metrics import SinkMetrics, SinkStats
from sinks.partition import PartitionState
from sinks.pause import PAUSE_ENV, TestPause
from sinks.recovery import plan_recovery
from sinks.retrying import RetryingStore
from sinks.store import ObjectStore
from sinks.topics import ensure_sink_topics, group_id, record_types
from streams.audit_trace import audit_trace
from streams.bounded import within
from streams.config import Settings
from streams.kafka import KAFKA_STEP_S, KafkaOutage, consumer_kwargs, kafka_unavailable
from streams.retry import Backoff, kafka_outage, retry
from streams.storage import s3_client

__all__ = ["SinkRunner"]

log = logging.getLogger("kafkagen.sink")


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Hands the consumer's rebalance callbacks to the runner."""

    def __init__(self, runner: SinkRunner) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.runner.on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.runner.on_assigned(list(assigned))


class SinkRunner:
    """The sink's consume → batch → upload → commit loop for one process (docs/sink.md, "The runner").

    Args:
        settings: topics, S3 location, run id, sink settings.
        store: the S3 operations (default: built from ``settings.s3``).
        pause: the test hook (default: from ``KAFKAGEN_SINK_TEST_PAUSE``).
    """

    def __init__(
        self, settings: Settings, *, store: ObjectStore | None = None, pause: TestPause | None = None
    ) -> None:
        self.settings = settings
        self.group = group_id(settings)
        self.pause = pause or TestPause(os.environ.get(PAUSE_ENV))
        self.trace = audit_trace("sink")  # the fault audit's (streams/audit_trace.py); off unless set
        self.store = store or ObjectStore(
            s3_client(settings.s3, max_attempts=3),
            settings.s3.bucket,
            settings.sink.multipart_threshold_bytes,
            self.pause,
        )
        self.types = record_types(settings)
        self.stats = SinkStats(kafka=KafkaOutage(settings.kafka.bootstrap_servers, log))
        self.done = asyncio.Event()
        self._parts: dict[TopicPartition, PartitionState] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._stopping = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._fatal: BaseException | None = None
        self.metrics = SinkMetrics(self.stats, settings.run_id)
        self.status_interval_s = 10.0
        self._kafka_backoff = Backoff(settings.sink.retry_initial_s, settings.sink.retry_max_s)
        self.s3 = RetryingStore(
            self.store,
            self.stats,
            initial_s=settings.sink.retry_initial_s,
            max_s=settings.sink.retry_max_s,
            stopping=self._stopping,
        )

    # -- lifecycle -----------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Ask :meth:`run` to stop: uploads in flight get ``shutdown_deadline_s``, batches are dropped."""
        self._stopping.set()
        self._wakeup.set()

    def _consumer_kwargs(self) -> dict[str, Any]:
        sink = self.settings.sink
        kwargs = consumer_kwargs(self.settings.kafka, group_id=self.group)
        kwargs.update(
            client_id=f"{self.settings.kafka.client_id}-sink",
            session_timeout_ms=sink.session_timeout_ms,
            rebalance_timeout_ms=sink.rebalance_ms,
            heartbeat_interval_ms=sink.heartbeat_interval_ms,
            group_instance_id=sink.instance_id,
        )
        return kwargs

    async def run(self) -> None:
        """Consume until :meth:`request_stop`. Raises the first unexpected error (the process then
        exits non-zero and, restarted, resumes from S3).

        Raises:
            ConfigError: the bucket does not exist or is not accessible.
            PermanentStorageError: S3 refused an operation for good.
            UnavailableError: Kafka could not be reached at start (:meth:`_start_consumer`).
        """
        try:
            await self.s3.check_bucket(self.settings.s3.endpoint_url)
            consumer = await self._start_consumer()
            log.info("sink started: group %s, topics %s", self.group, ", ".join(self.types))
            watchers = [
                asyncio.create_task(self.stats.kafka.watch(consumer)),
                asyncio.create_task(self._report()),
            ]
            try:
                await self._loop(consumer)
            finally:
                for task in watchers:
                    task.cancel()
                await self._shutdown(consumer)
        finally:
            self.done.set()

    async def _start_consumer(self) -> AIOKafkaConsumer:
        """Create the sink topics when missing and start the consumer. Kafka that fails here, even
        after answering the command's own start check (S3 can keep the sink waiting in between),
        ends the sink as Kafka unreachable at start does (exit status 3); later outages are waited
        out.

        Raises:
            UnavailableError: Kafka could not be reached or stayed silent.
        """
        consumer = AIOKafkaConsumer(**self._consumer_kwargs())
        self._consumer = consumer  # before it starts: the first assignment may come while it starts
        try:
            await ensure_sink_topics(self.settings)
            consumer.subscribe(list(self.types), listener=_Rebalance(self))
            await consumer.start()
        except (KafkaError, TimeoutError) as exc:
            self._consumer = None
            with contextlib.suppress(Exception):
                await within(KAFKA_STEP_S, consumer.stop())
            raise kafka_unavailable(self.settings.kafka, exc) from None
        return consumer

    async def _report(self) -> None:
        """Log :meth:`SinkStats.status` every ``status_interval_s`` seconds."""
        while True:
            await asyncio.sleep(self.status_interval_s)
            self.stats.partitions = len(self._parts)
            log.info("%s", self.stats.status(time.monotonic()))

    async def _loop(self, consumer: AIOKafkaConsumer) -> None:
        fetch: asyncio.Task[dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]] | None = None
        issued: dict[TopicPartition, tuple[PartitionState, int]] = {}
        try:
            while not self._stopping.is_set():
                if self._fatal is not None:
                    raise self._fatal
                if fetch is None:
                    issued = {tp: (p, p.epoch) for tp, p in self._parts.items()}
                    fetch = asyncio.create_task(
                        consumer.getmany(timeout_ms=1000, max_records=self.settings.sink.poll_records)
                    )
                self._wakeup.clear()
                wake = asyncio.create_task(self._wakeup.wait())
                await asyncio.wait(
                    {fetch, wake}, timeout=self._idle_wait_s(), return_when=asyncio.FIRST_COMPLETED
                )
                wake.cancel()
                if fetch.done():
                    data, fetch = fetch.result(), None
                    for tp, records in data.items():
                        part = self._parts.get(tp)
                        if part is None or part.closed:
                            continue
                        if issued.get(tp) != (part, part.epoch):
                            # Fetched before the partition's latest seek (or by its previous
                            # owner): may lie beyond the new position. Drop and seek again.
                            if part.position is not None:
                                self._seek(part, part.next_offset)
                            continue
                        part.pending.extend(records)
                self._step(time.monotonic())
        finally:
            if fetch is not None:
                fetch.cancel()
                with contextlib.suppress(BaseException):
                    await fetch

    def _idle_wait_s(self) -> float:
        deadlines = [
            p.last_append + self.settings.sink.idle_flush_s
            for p in self._parts.values()
            if p.batch is not None and p.task is None and not p.frozen
        ]
        if not deadlines:
            return 1.0
        return min(1.0, max(0.01, min(deadlines) - time.monotonic()))

    def _step(self, now: float) -> None:
        self._observe()
        for part in list(self._parts.values()):
            if part.frozen:
                continue
            if part.task is not None and part.task.done():
                part.task, part.flushing = None, False
            if part.position is not None and (part.task is None or part.flushing):
                self._drain(part, now)
                if (
                    part.task is None
                    and part.batch is not None
                    and now - part.last_append >= self.settings.sink.idle_flush_s
                ):
                    self._start_flush(part)
            self._set_paused(part)

    def _observe(self) -> None:
        """Per assigned partition, its committed offset and highwater for the metrics
        (:attr:`sinks.metrics.SinkStats.offsets`); a partition still recovering has none yet."""
        consumer = self._consumer
        assigned = consumer.assignment() if consumer is not None else set()
        self.stats.offsets = {
            (tp.topic, tp.partition): (p.position, consumer.highwater(tp))
            for tp, p in list(self._parts.items())
            if consumer is not None and p.position is not None and not p.closed and tp in assigned
        }

    def _set_paused(self, part: PartitionState) -> None:
        """Paused while recovering, and while records wait because both batches are taken."""
        consumer = self._consumer
        want = (part.task is not None and not part.flushing) or bool(part.pending)
        if consumer is None or part.closed or want == part.paused:
            return
        if want:
            consumer.pause(part.tp)
        else:
            consumer.resume(part.tp)
        part.paused = want

    def _full(self, batch: Batch) -> bool:
        sink = self.settings.sink
        return batch.full(sink.flush_records, sink.flush_bytes)

    def _drain(self, part: PartitionState, now: float) -> None:
        """Move pending records into the filling batch; hand a full batch to the uploader as soon
        as the previous upload of the partition is done (one uploading, one filling)."""
        sink = self.settings.sink
        while True:
            if part.batch is not None and self._full(part.batch):
                if part.task is not None:
                    return  # the previous upload is still running: the records wait in pending
                self._start_flush(part)
                continue
            if not part.pending:
                return
            rec = part.pending.popleft()
            if rec.offset < part.next_offset:
                continue
            line, ok = record_line(
                topic=rec.topic,
                partition=rec.partition,
                offset=rec.offset,
                timestamp_ms=rec.timestamp,
                key=rec.key,
                value=rec.value,
                record_type=part.record_type,
                run_id=self.settings.run_id,
            )
            if not ok:
                self.stats.undecodable += 1
                log.warning(
                    "undecodable record %s-%d@%d: written as an error line",
                    rec.topic,
                    rec.partition,
                    rec.offset,
                )
            if part.batch is None:
                part.batch = Batch(sink.compression_level)
                part.mid_batch_hooked = False
            part.batch.add(rec.offset, line)
            part.next_offset = rec.offset + 1
            part.last_append = now
            self.stats.records += 1
            key = (rec.topic, rec.partition)
            self.stats.partition_records[key] = self.stats.partition_records.get(key, 0) + 1
            if not part.mid_batch_hooked and part.batch.count >= max(1, sink.flush_records // 2):
                part.mid_batch_hooked = True
                self.pause("mid_batch", f"tp={rec.topic}-{rec.partition} records={part.batch.count}")

    def _spawn(self, part: PartitionState, coro: Coroutine[Any, Any, None], *, flushing: bool) -> None:
        task = asyncio.create_task(coro)
        part.task, part.flushing = task, flushing

        def done(t: asyncio.Task[None]) -> None:
            if not t.cancelled() and t.exception() is not None and self._fatal is None:
                self._fatal = t.exception()
            self._wakeup.set()

        task.add_done_callback(done)

    def _start_flush(self, part: PartitionState) -> None:
        assert part.batch is not None
        body, meta = part.batch.seal()
        part.batch = None
        self._spawn(part, self._flush(part, body, meta), flushing=True)

    # -- partition tasks -----------------------------------------------------------------------
    def _seek(self, part: PartitionState, offset: int) -> None:
        """Seek the consumer (aiokafka drops what it fetched before) and invalidate any fetch
        already issued for the partition."""
        assert self._consumer is not None
        self._consumer.seek(part.tp, offset)
        part.epoch += 1

    async def _committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp`` (``None``: none), retried while Kafka fails
        retriably (:func:`streams.retry.retry`)."""
        consumer = self._consumer
        assert consumer is not None

        async def read() -> int | None:
            committed: int | None = await consumer.committed(tp)
            return committed

        return await retry(
            f"reading the committed offset of {tp}",
            read,
            backoff=self._kafka_backoff,
            log=log,
            is_retriable=kafka_outage,
        )

    async def _commit(self, part: PartitionState, offset: int) -> None:
        if part.closed or self._consumer is None:
            return
        self.trace.event("commit", tp=[part.tp.topic, part.tp.partition], offset=offset)
        try:
            answered, _ = await within(KAFKA_STEP_S, self._consumer.commit({part.tp: offset}))
        except (CommitFailedError, IllegalStateError) as exc:
            log.info(
                "commit of %s at %d skipped (%s): the partition moved; S3 stays authoritative",
                part.tp,
                offset,
                exc,
            )
        except KafkaError as exc:
            log.warning(
                "commit of %s at %d failed: %r; the next commit or recovery from S3 covers it",
                part.tp,
                offset,
                exc,
            )
        else:
            if not answered:
                log.warning(
                    "commit of %s at %d got no answer from Kafka in %.0f s; the next commit or "
                    "recovery from S3 covers it",
                    part.tp,
                    offset,
                    KAFKA_STEP_S,
                )

    async def _log_start(self, tp: TopicPartition) -> int:
        """The partition's first offset still in Kafka, retried while Kafka fails retriably
        (:func:`streams.retry.retry`)."""
        consumer = self._consumer
        assert consumer is not None

        async def read() -> int:
            starts = await consumer.beginning_offsets([tp])
            return int(starts[tp])

        what = f"reading the first offset of {tp}"
        return await retry(what, read, backoff=self._kafka_backoff, log=log, is_retriable=kafka_outage)

    async def _recover(self, part: PartitionState) -> None:
        """Find where the partition's objects end in S3 and seek there: S3 wins over the group's
        committed offset in both directions (rule 4 of docs/sink.md). A commit beyond S3 means the
        objects behind it are gone from this destination (folder deleted, bucket or prefix
        changed): they are written again from Kafka, with a warning; the commit is moved to the
        new position."""
        s3 = self.settings.s3
        folder = partition_prefix(s3.prefix, self.settings.run_id, part.tp.topic, part.tp.partition)
        last = await self.s3.last_object(folder)
        aborted = await self.s3.abort_uploads(folder)
        committed = await self._committed(part.tp)
        log_start = await self._log_start(part.tp)
        if part.closed:
            return
        s3_next = last[1].end_offset + 1 if last else None
        if last is not None:  # in S3 now: what the audit may count as durable from this moment
            span = [last[1].start_offset, last[1].end_offset]
            self.trace.event("found", tp=[part.tp.topic, part.tp.partition], span=span)
        plan = plan_recovery(s3_next=s3_next, committed=committed, log_start=log_start)
        position = plan.position
        where = f"s3://{self.s3.bucket}/{folder}"
        if plan.rewritten is not None:
            log.warning(
                "%s-%d: the group %s committed offset %d, but %s %s: the objects were deleted or the "
                "sink's destination (bucket, prefix, run id) changed since. S3 wins: offsets %d..%d "
                "are written again from Kafka",
                part.tp.topic,
                part.tp.partition,
                self.group,
                committed,
                where,
                f"ends at offset {s3_next - 1}" if s3_next is not None else "holds no object",
                *plan.rewritten,
            )
        if plan.lost is not None:
            log.warning(
                "%s-%d: %s ends at offset %d but Kafka keeps offsets from %d on (retention): offsets "
                "%d..%d cannot be written; the export will report the gap",
                part.tp.topic,
                part.tp.partition,
                where,
                plan.lost[0] - 1,
                log_start,
                *plan.lost,
            )
        assert self._consumer is not None
        self._seek(part, position)
        part.position = part.next_offset = position
        log.info(
            "recovered %s-%d at offset %d (S3 next %s, committed %s, aborted uploads %d)",
            part.tp.topic,
            part.tp.partition,
            position,
            s3_next,
            committed,
            aborted,
        )
        if plan.commit:
            await self._commit(part, position)

    async def _flush(self, part: PartitionState, body: bytes, meta: ObjectMeta) -> None:
        s3 = self.settings.s3
        key = object_key(s3.prefix, self.settings.run_id, part.tp.topic, part.tp.partition, meta.start_offset)
        if self.trace.planted("commit_before_upload"):
            await self._commit(part, meta.end_offset + 1)
        outcome = await self.s3.put_once(key, body, meta)
        span = [outcome.meta.start_offset, outcome.meta.end_offset]  # ours, or the key's owner's
        self.trace.event("put", tp=[part.tp.topic, part.tp.partition], span=span)
        self.pause("after_upload", f"key={key} end={meta.end_offset}")
        if part.closed:
            return
        if outcome.created:
            new = meta.end_offset + 1
            self.stats.objects += 1
            self.stats.uncompressed_bytes += meta.uncompressed_bytes
            self.stats.compressed_bytes += len(body)
            log.info(
                "wrote %s offsets %d..%d (%d records, %d bytes)",
                key,
                meta.start_offset,
                meta.end_offset,
                meta.record_count,
                len(body),
            )
        else:
            new = outcome.meta.end_offset + 1
            self.stats.existing += 1
            log.warning(
                "%s already exists with offsets %d..%d (ours: ..%d): kept it, resuming at %d",
                key,
                outcome.meta.start_offset,
                outcome.meta.end_offset,
                meta.end_offset,
                new,
            )
            if new != meta.end_offset + 1:
                # The filling batch started at our end + 1: wrong now. Re-read from the existing end.
                part.batch = None
                part.pending.clear()
                self._seek(part, new)
                part.next_offset = new
        part.position = new
        await self._commit(part, new)

    # -- rebalance -----------------------------------------------------------------------------
    def on_assigned(self, assigned: list[TopicPartition]) -> None:
        """Rebalance listener: start recovering each new partition; it stays paused until then."""
        assert self._consumer is not None
        for tp in assigned:
            record_type = self.types.get(tp.topic)
            if record_type is None:
                continue
            part = PartitionState(tp, record_type)
            self._parts[tp] = part
            self.stats.partitions = len(self._parts)
            self._consumer.pause(tp)
            part.paused = True
            self._spawn(part, self._recover(part), flushing=False)

    async def on_revoked(self, revoked: list[TopicPartition]) -> None:
        """Rebalance listener: give uploads in flight a bounded time, then drop the partitions."""
        parts = [p for tp in revoked if (p := self._parts.get(tp)) is not None]
        await self._close(parts, min(10.0, self.settings.sink.rebalance_ms / 2000))

    async def _close(self, parts: list[PartitionState], wait_s: float) -> None:
        for part in parts:
            part.frozen = True
        flushing = [p.task for p in parts if p.task is not None and p.flushing and not p.task.done()]
        if flushing:
            await asyncio.wait(flushing, timeout=wait_s)
        for part in parts:
            part.closed = True
            if part.task is not None and not part.task.done():
                part.task.cancel()
            self._parts.pop(part.tp, None)
        self.stats.partitions = len(self._parts)

    async def _shutdown(self, consumer: AIOKafkaConsumer) -> None:
        parts = list(self._parts.values())
        await self._close(parts, self.settings.sink.shutdown_deadline_s)
        tasks = [p.task for p in parts if p.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        stopped, _ = await within(KAFKA_STEP_S, consumer.stop())
        if not stopped:
            log.warning("stopping the sink's consumer got no answer from Kafka in %.0f s", KAFKA_STEP_S)
        log.info(
            "sink stopped: %d records, %d objects written, %d existing kept, %d undecodable",
            self.stats.records,
            self.stats.objects,
            self.stats.existing,
            self.stats.undecodable,
        )
