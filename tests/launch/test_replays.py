"""What a replay may be (launch/run/replays.py), against real Kafka: a replay of a run with prompts,
resumed under its own id; refused into a run that has prompts of its own or is another run's
replay, and from a replay or a run that does not exist, each before anything of it is created."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaProducer

from launch.run.replays import check_replay
from streams.config import Settings
from streams.control import RunRecord, encode_control, key_of_control
from streams.errors import ConfigError
from streams.kafka import producer_kwargs, topic_partitions
from streams.runs import naming
from streams.topics import ensure_topics, topic_specs
from tests.helpers import make_prompt, publish


def _run(settings: Settings, run_id: str, replay_of: str | None = None) -> Settings:
    topics = settings.topics.model_copy(update=naming.derived_topics(run_id, replay_of))
    return settings.model_copy(update={"run_id": run_id, "replay_of": replay_of, "topics": topics})


async def _record(s: Settings, parent: str | None) -> None:
    await ensure_topics(s, [topic_specs(s)["control"]])
    record = RunRecord(
        run_id=s.run_id,
        parent=parent,
        created_at=time.time(),
        updated_at=time.time(),
        by="t",
        prompts_topic=s.topics.prompts,
        partitions=7,
    )
    producer = AIOKafkaProducer(**producer_kwargs(s.kafka))
    await producer.start()
    try:
        await producer.send_and_wait(s.topics.control, encode_control(record), key=key_of_control(record))
    finally:
        await producer.stop()


@pytest.mark.parametrize("brokers", [1])
def test_what_a_replay_may_be(settings: Settings, unique: str) -> None:
    a, other = _run(settings, f"a-{unique}"), _run(settings, f"other-{unique}")
    asyncio.run(publish(a, [make_prompt(1)]))
    asyncio.run(publish(other, [make_prompt(2)]))

    asyncio.run(check_replay(_run(settings, f"new-{unique}", a.run_id)))  # a new replay
    resumed = _run(settings, f"b-{unique}", a.run_id)
    asyncio.run(_record(resumed, parent=a.run_id))
    asyncio.run(check_replay(resumed))  # the same replay again: it resumes

    refusals = {
        (other.run_id, a.run_id): f"run {other.run_id} exists and has prompts of its own",
        (f"c-{unique}", a.run_id): f"run c-{unique} exists and is a replay of run z-{unique}",
        (f"d-{unique}", resumed.run_id): f"run {resumed.run_id} is itself a replay of run {a.run_id}",
        (f"e-{unique}", f"nope-{unique}"): f"run nope-{unique} has no prompts topic",
    }
    asyncio.run(_record(_run(settings, f"c-{unique}"), parent=f"z-{unique}"))
    for (new, parent), message in refusals.items():
        with pytest.raises(ConfigError, match=message):
            asyncio.run(check_replay(_run(settings, new, parent)))
    for topic in (f"nope-{unique}.prompts", f"{resumed.run_id}.prompts", f"e-{unique}.completions"):
        assert not asyncio.run(topic_partitions(settings.kafka, topic)), topic
