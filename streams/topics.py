"""Topic names, layouts and configs, and the admin helper that creates them.

The one place that says how each kafkagen topic is configured: prompts, completions and errors
kept forever (``retention.ms=-1``), producer progress and control compacted, every topic with
``max.message.bytes`` from ``KafkaSettings.max_message_bytes``, replication chosen from the live
brokers at creation (:func:`replication_for`). Each config and why (Apache Kafka topic configs
reference): ``docs/kafka.md``, "Topics and their configs".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from streams.config import Settings
from streams.errors import ConfigError
from streams.kafka import admin_call

__all__ = ["TopicSpec", "ensure_topics", "replication_for", "topic_specs"]

log = logging.getLogger("kafkagen.topics")


@dataclass(frozen=True)
class TopicSpec:
    """One topic's layout: name, partition count (int), replication factor (None: chosen from
    the cluster at creation, :func:`replication_for`) and configs."""

    name: str
    partitions: int
    replication_factor: int | None
    configs: dict[str, str] = field(default_factory=dict)


def replication_for(live_brokers: int, requested: int | None = None) -> tuple[int, int]:
    """``(replication factor, min.insync.replicas)`` of a new topic on a cluster of ``live_brokers``.

    ``requested`` (``topics.replication_factor``) wins when set; otherwise 3 from 3 live brokers
    up, else ``live_brokers``. ``min.insync.replicas`` is 2 from 3 replicas up, else 1.

    Raises:
        ConfigError: ``requested`` is more than the live brokers (Kafka would refuse the topic).
    """
    rf = requested if requested is not None else max(1, min(3, live_brokers))
    if rf > live_brokers:
        raise ConfigError(
            f"topics.replication_factor is {rf} but the Kafka cluster has {live_brokers} live broker(s); "
            f"set KAFKAGEN_TOPICS__REPLICATION_FACTOR to at most {live_brokers}, or unset it to choose "
            "from the cluster"
        )
    return rf, 2 if rf >= 3 else 1


def topic_specs(settings: Settings) -> dict[str, TopicSpec]:
    """Specs of kafkagen's topics keyed by role: ``prompts``, ``completions``, ``errors``,
    ``control``, ``producer_progress``."""
    t = settings.topics
    common = {"max.message.bytes": str(settings.kafka.max_message_bytes)}
    keep = {**common, "cleanup.policy": "delete", "retention.ms": "-1"}
    return {
        "prompts": TopicSpec(t.prompts, t.partitions, t.replication_factor, keep),
        "completions": TopicSpec(t.completions, t.partitions, t.replication_factor, keep),
        "errors": TopicSpec(t.errors, t.partitions, t.replication_factor, keep),
        # A segment is compacted only once closed: a new one every 10 minutes keeps the members' reports
        # (one per consumer per second) from piling up in a never-compacted active segment.
        "control": TopicSpec(
            t.control,
            1,
            t.replication_factor,
            {**common, "cleanup.policy": "compact", "segment.ms": "600000"},
        ),
        "producer_progress": TopicSpec(
            t.producer_progress, 1, t.replication_factor, {**common, "cleanup.policy": "compact"}
        ),
    }


async def ensure_topics(
    settings: Settings, specs: list[TopicSpec], *, timeout_s: float = 30.0
) -> dict[str, int]:
    """Create the topics in ``specs`` that do not exist yet; leave existing ones as they are.

    A spec without a replication factor gets one from the cluster's live broker count, and every
    new topic gets ``min.insync.replicas`` to match (:func:`replication_for`) unless its spec sets it.

    Returns:
        topic name → its actual partition count (which may differ from the spec for a topic that
        existed before; callers decide whether that matters).

    Raises:
        ConfigError: a topic could not be created or described (the broker's error code is named,
            e.g. 3 = unknown topic after a rejected create).
        aiokafka.errors.KafkaError, asyncio.TimeoutError: the broker could not be reached within
            ``timeout_s`` seconds.
    """
    return await admin_call(
        settings.kafka,
        "topic set-up",
        lambda admin: _ensure_with(admin, specs, timeout_s),
        timeout_s=timeout_s,
    )


async def _ensure_with(
    admin: AIOKafkaAdminClient, specs: list[TopicSpec], timeout_s: float
) -> dict[str, int]:
    """One pass of :func:`ensure_topics` with a started ``admin`` client."""
    existing = set(await admin.list_topics())
    missing = [s for s in specs if s.name not in existing]
    if missing:
        live = len((await admin.describe_cluster())["brokers"])
        new = []
        for s in missing:
            rf, min_isr = replication_for(live, s.replication_factor)
            if s.replication_factor is None and live == 2:
                log.warning(
                    "topic %s gets %d replicas: only 2 brokers are live (3 from 3 up); set "
                    "topics.replication_factor to decide it yourself",
                    s.name,
                    rf,
                )
            configs = {"min.insync.replicas": str(min_isr), **s.configs}
            new.append(NewTopic(s.name, s.partitions, rf, topic_configs=configs))
        # Another process may create it between our list and create: that is fine (error 36,
        # TOPIC_ALREADY_EXISTS). Any other per-topic error comes back in the response, not raised.
        with contextlib.suppress(TopicAlreadyExistsError):
            response = await admin.create_topics(new)
            for topic, code, *message in response.topic_errors:
                if code not in (0, TopicAlreadyExistsError.errno):
                    raise ConfigError(
                        f"topic {topic!r} could not be created: Kafka error code {code}"
                        + (f" ({message[0]})" if message and message[0] else "")
                    )
    # A just-created topic can be missing from metadata for a moment (error 3,
    # UNKNOWN_TOPIC_OR_PARTITION): describe again until it shows up or half the time has run out
    # (half: so that this error, not the call's timeout, says what failed)
    deadline = asyncio.get_running_loop().time() + timeout_s / 2
    while True:
        described = await admin.describe_topics([s.name for s in specs])
        failed = [t for t in described if t.get("error_code", 0) not in (0, None)]
        if not failed:
            break
        if asyncio.get_running_loop().time() >= deadline:
            topic = failed[0]
            raise ConfigError(
                f"topic {topic.get('topic')!r} could not be created or described: "
                f"Kafka error code {topic['error_code']}"
            )
        await asyncio.sleep(0.1)
    counts = {t["topic"]: len(t["partitions"]) for t in described}
    return counts
