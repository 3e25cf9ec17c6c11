"""Which run a prompts topic belongs to (the rule: ``docs/runs.md``).

The owner is the ``run_id`` of the first committed record of each partition (``read_committed``,
from the log start: a few fetches, whatever the topic's size); an empty or missing topic, and
records without a run id (published by hand or by tests), have no owner. Entry points check it
before they write into or read from the topic (:func:`foreign_owners`; they raise
:class:`streams.errors.ForeignRunError`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.config import Settings
from streams.kafka import consumer_kwargs, topic_partitions
from streams.records import PromptRecord, RecordDecodeError, decode

__all__ = ["describe_owners", "foreign_owners", "topic_owners"]


async def topic_owners(settings: Settings, topic: str, *, timeout_s: float = 30.0) -> set[str]:
    """The run ids of the first committed record of each partition of ``topic`` (usually one; empty
    for a missing or empty topic, or records without a run id).

    Raises:
        aiokafka.errors.KafkaError: Kafka cannot be asked.
        TimeoutError: the first records could not be read within ``timeout_s`` seconds (an open
            transaction of a producer that was killed keeps read_committed readers waiting until
            the broker aborts it).
    """
    partitions = await topic_partitions(settings.kafka, topic)
    if not partitions:
        return set()
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None), fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # read_committed: the last stable offsets
        owners: set[str] = set()
        pending = {tp for tp in tps if ends[tp] > 0}
        deadline = time.monotonic() + timeout_s
        while pending:
            # a partition whose log holds only markers or aborted records reaches its end unread
            for tp in list(pending):
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
            if not pending:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading the first records of {topic}: no answer in {timeout_s:.0f} s")
            batch = await consumer.getmany(*pending, timeout_ms=500, max_records=1)
            for tp, records in batch.items():
                if not records:
                    continue
                pending.discard(tp)
                consumer.pause(tp)
                try:
                    run_id = decode(records[0].value or b"", PromptRecord).run_id
                except RecordDecodeError:
                    continue
                if run_id is not None:
                    owners.add(run_id)
        return owners
    finally:
        await consumer.stop()


def foreign_owners(owners: Iterable[str], allowed: Iterable[str | None]) -> list[str]:
    """The owners in ``owners`` that are none of ``allowed`` (sorted)."""
    ok = {a for a in allowed if a is not None}
    return sorted(set(owners) - ok)


def describe_owners(owners: Iterable[str]) -> str:
    """``run A`` or ``runs A, B``: for messages."""
    names = sorted(owners)
    return ("run " if len(names) == 1 else "runs ") + ", ".join(names)
