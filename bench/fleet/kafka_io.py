"""The fleet benchmark's Kafka traffic: publishing the prompts on the partitions the producer
would pick, reading a topic back, the consumer group's assignment, deleting the run's topics.
Partitions and end offsets come from :mod:`streams.kafka` (their one owner)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocol

from producers.partitioning import input_salt, partition_for
from streams.config import KeyBy, Settings
from streams.kafka import client_kwargs, consumer_kwargs, end_offsets, producer_kwargs, topic_partitions
from streams.records import PromptRecord, encode, key_of

__all__ = [
    "CompletionSource",
    "CompletionTimings",
    "CompletionView",
    "delete_topics",
    "group_assignment",
    "publish_prompts",
    "read_all_values",
]


class CompletionTimings(msgspec.Struct):
    started_at: float
    finished_at: float


class CompletionSource(msgspec.Struct):
    partition: int


class CompletionView(msgspec.Struct):
    """The fields of a CompletionRecord the benchmark reads (msgspec skips the rest)."""

    id: str
    server: str
    timings: CompletionTimings
    source: CompletionSource | None = None
    consumer: str | None = None


async def publish_prompts(settings: Settings, prompts: Sequence[PromptRecord], key_by: KeyBy) -> None:
    """Publish ``prompts`` keyed by id, each on the partition ``python -m producers.prompts
    --key-by KEY_BY`` would give it as line ``i + 1`` of one input, yielding to the loop as it goes."""
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        topic = settings.topics.prompts
        salt = input_salt("bench")
        for i, p in enumerate(prompts):
            key = key_of(p.id)
            partition = partition_for(p, key, settings.topics.partitions, key_by, line=i + 1, salt=salt)
            await producer.send(topic, encode(p), key=key, partition=partition)
            if i % 200 == 199:
                await asyncio.sleep(0)  # the simulators share this loop
        await producer.flush()
    finally:
        await producer.stop()


async def read_all_values(settings: Settings, topic: str) -> list[bytes]:
    """Every committed record value of ``topic`` (``b""`` for a null value), from the beginning
    to the end offsets taken now, partition by partition as fetched.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer.
    """
    parts = await topic_partitions(settings.kafka, topic)
    if not parts:
        return []
    ends = await end_offsets(settings.kafka, topic, partitions=parts)
    tps = [TopicPartition(topic, p) for p in parts]
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out: list[bytes] = []
        while any([await consumer.position(tp) < ends[tp.partition] for tp in tps]):
            batch = await consumer.getmany(timeout_ms=500, max_records=2000)
            for records in batch.values():
                out += [r.value or b"" for r in records]
        return out
    finally:
        await consumer.stop()


async def delete_topics(settings: Settings, names: Sequence[str]) -> None:
    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="bench-admin"))
    await admin.start()
    try:
        await admin.delete_topics(list(names))
    finally:
        await admin.close()


async def group_assignment(settings: Settings, group: str) -> tuple[str, list[set[int]]]:
    """The group's state as the broker sees it, and each member's partitions."""
    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="bench-admin"))
    await admin.start()
    try:
        responses = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    described = responses[0].to_object()["groups"][0]
    members = [
        {tp.partition for tp in ConsumerProtocol.ASSIGNMENT.decode(m["member_assignment"]).partitions()}
        if m["member_assignment"]
        else set()
        for m in described["members"]
    ]
    return str(described["state"]), members
