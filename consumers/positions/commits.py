"""When and what the consumer commits: per partition, the contiguous prefix of finished prompts
(:meth:`consumers.positions.jobs.JobBook.committable`), every ``commit_interval_s`` seconds and at
once when a partition's uncommitted span is half full. A commit never raises a Kafka error: one
that meets a rebalance or an outage is made again later, and each waits at most
:data:`streams.kafka.KAFKA_STEP_S`.

Design: docs/consumer.md, "When commits are made".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from consumers.positions.jobs import JobBook
from streams.audit_trace import audit_trace
from streams.bounded import within
from streams.kafka import KAFKA_STEP_S, KafkaOutage

__all__ = ["Committer"]

log = logging.getLogger("kafkagen.generate")


class Committer:
    """Commits one consumer's offsets on ``topic``.

    Args:
        book: the consumer's book of work (what is committable).
        topic: the prompts topic.
        interval_s: seconds between periodic commits.
        kafka: the outage tracker.
        consumer: the current group consumer (None while out of the group).
        generation: the consumer's rebalance counter, bumped by every rebalance callback.
    """

    def __init__(
        self,
        book: JobBook,
        *,
        topic: str,
        interval_s: float,
        kafka: KafkaOutage,
        consumer: Callable[[], AIOKafkaConsumer | None],
        generation: Callable[[], int],
    ) -> None:
        self.book = book
        self.topic = topic
        self.interval_s = interval_s
        self.kafka = kafka
        self.consumer = consumer
        self.generation = generation
        self.last_commit = 0.0
        """monotonic seconds of the last commit (attempted)."""

    async def maybe_commit(self) -> None:
        """Commit every ``interval_s``, and at once when a partition's uncommitted span is half
        of ``max_uncommitted`` (:meth:`consumers.positions.jobs.JobBook.commit_urgent`)."""
        due = time.monotonic() - self.last_commit >= self.interval_s
        if due or self.book.commit_urgent():
            await self.commit()

    async def commit(self, *, partitions: set[int] | None = None) -> None:
        """Commit what is committable of ``partitions`` (None: all); never raises a Kafka error
        (a failed commit is made again later)."""
        self.last_commit = time.monotonic()
        consumer = self.consumer()
        if consumer is None:
            return
        offsets = self.book.committable(partitions)
        if not offsets:
            return
        generation = self.generation()
        trace = audit_trace("generate")
        trace.event("commit", offsets=offsets)
        try:
            answered, _ = await within(
                KAFKA_STEP_S,
                consumer.commit({TopicPartition(self.topic, p): o for p, o in offsets.items()}),
            )
        except (CommitFailedError, IllegalStateError) as exc:  # a rebalance is under way: commit later
            log.info("commit deferred: %s", exc)
            return
        except KafkaError as exc:
            self.kafka.failed(f"commit failed: {exc}")
            return
        if not answered:
            self.kafka.failed(f"commit got no answer in {KAFKA_STEP_S:.0f} s")
            return
        self.kafka.ok()
        trace.event("committed", offsets=offsets)
        # committed across a rebalance callback: only a revoke's own commit still applies
        if generation == self.generation() or partitions is not None:
            self.book.committed(offsets)
