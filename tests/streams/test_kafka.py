"""Kafka through the project's own client factories and topic helpers, against the real broker."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import RequestTimedOutError

from streams.config import Settings
from streams.kafka import ask_brokers, consumer_kwargs, producer_kwargs
from streams.topics import TopicSpec, ensure_topics, topic_specs


async def _consume_all(consumer: AIOKafkaConsumer, n: int, timeout_s: float = 60) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    async with asyncio.timeout(timeout_s):
        while len(got) < n:
            batch = await consumer.getmany(timeout_ms=500)
            for tp, msgs in batch.items():
                got += [(tp.partition, m.key or b"") for m in msgs]
    return got


async def test_seven_partition_topic_idempotent_produce_and_group_consume(
    kafka: str, settings: Settings
) -> None:
    spec = topic_specs(settings)["prompts"]
    assert spec.partitions == 7
    counts = await ensure_topics(settings, [spec])
    assert counts == {spec.name: 7}
    # Creating again is a no-op, not an error.
    assert await ensure_topics(settings, [spec]) == {spec.name: 7}

    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        futures = [
            await producer.send(spec.name, key=f"id-{i}".encode(), value=f"value-{i}".encode())
            for i in range(700)
        ]
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    per_partition = Counter(m.partition for m in metas)
    assert set(per_partition) == set(range(7)), "keys must spread over all 7 partitions"

    consumer = AIOKafkaConsumer(
        spec.name,
        **consumer_kwargs(settings.kafka, group_id=f"group-{spec.name}"),
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    try:
        got = await _consume_all(consumer, 700)
        assert sorted(k for _, k in got) == sorted(f"id-{i}".encode() for i in range(700))
        assert Counter(p for p, _ in got) == per_partition
        await consumer.commit()
        for p, n in per_partition.items():
            assert await consumer.committed(TopicPartition(spec.name, p)) == n
    finally:
        await consumer.stop()


async def test_topic_configs_keep_prompts_and_compact_progress(kafka: str, settings: Settings) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["prompts"], specs["producer_progress"]])
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        resources = [
            ConfigResource(ConfigResourceType.TOPIC, specs["prompts"].name),
            ConfigResource(ConfigResourceType.TOPIC, specs["producer_progress"].name),
        ]
        responses = await admin.describe_configs(resources)
    finally:
        await admin.close()
    found: dict[str, dict[str, str]] = {}
    for response in responses:
        for _err, _msg, _type, name, entries in response.resources:
            found[name] = {e[0]: e[1] for e in entries}
    prompts = found[specs["prompts"].name]
    assert prompts["retention.ms"] == "-1"
    assert prompts["max.message.bytes"] == str(settings.kafka.max_message_bytes)
    assert found[specs["producer_progress"].name]["cleanup.policy"] == "compact"


async def test_auto_create_is_disabled(kafka: str, settings: Settings) -> None:
    """Producing to a topic nobody created must fail rather than create a 1-partition topic."""
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka), request_timeout_ms=3000)
    await producer.start()
    try:
        missing = TopicSpec(f"never-created-{settings.run_id}", 1, 1)
        try:
            await asyncio.wait_for(producer.send_and_wait(missing.name, b"x"), 10)
        except Exception:
            pass
        else:
            raise AssertionError("the broker auto-created a topic")
    finally:
        await producer.stop()


def _failing_once(error: Exception) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return "answered"

    return calls, call


def test_a_retriable_error_is_asked_again() -> None:
    calls, call = _failing_once(RequestTimedOutError())
    assert asyncio.run(ask_brokers("describing t", call, timeout_s=10)) == "answered"
    assert len(calls) == 2
