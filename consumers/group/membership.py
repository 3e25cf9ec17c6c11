"""The consumer's membership of its Kafka group: the group consumer it joins with (static
membership, one sticky assignor), its group and instance ids, and stopping it, with an explicit
leave when its partitions must move at once."""

from __future__ import annotations

import contextlib
import socket

from aiokafka import AIOKafkaConsumer

from consumers.group.assignor import StableStickyAssignor
from streams.config import KafkaSettings, Settings
from streams.kafka import consumer_kwargs, remove_group_member
from streams.runs import naming

__all__ = ["METADATA_MAX_AGE_MS", "default_instance_id", "group_consumer", "group_id", "stop_member"]

METADATA_MAX_AGE_MS = 30_000
"""Milliseconds between the group consumer's metadata refreshes: a partition added to the prompts
topic reaches the consumer group (a rebalance) within this long."""


def group_consumer(
    settings: Settings, *, group: str, instance_id: str, assignor: type[StableStickyAssignor]
) -> AIOKafkaConsumer:
    """A (not started) consumer of ``group`` with static membership ``instance_id``
    (``group.instance.id``), the ``settings.consumer`` session timings (milliseconds), at most
    ``max_in_flight`` records a poll, and ``assignor`` as its only assignor
    (:func:`consumers.group.assignor.stable_sticky_assignor`; the same class across rejoins: it
    remembers the group's last assignment)."""
    cfg = settings.consumer
    return AIOKafkaConsumer(
        **consumer_kwargs(settings.kafka, group_id=group),
        group_instance_id=instance_id,
        session_timeout_ms=cfg.session_timeout_ms,
        rebalance_timeout_ms=cfg.rebalance_ms,
        heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        max_poll_records=cfg.max_in_flight,
        # Partitions added to the prompts topic (kafkagen scale --partitions) are noticed at a
        # metadata refresh, which then rejoins the group: every 30 s, not aiokafka's 5 min.
        metadata_max_age_ms=METADATA_MAX_AGE_MS,
        # One assignor only: aiokafka 0.14 sends one JoinGroup per listed assignor, each with
        # a longer protocol list, which feeds rebalance storms (consumers/group/assignor.py).
        partition_assignment_strategy=(assignor,),
    )


async def stop_member(consumer: AIOKafkaConsumer, kafka: KafkaSettings, group: str, *, leave: bool) -> None:
    """Stop ``consumer`` (errors ignored: it is being dropped); with ``leave``, also remove its
    static membership of ``group`` at once (:func:`streams.kafka.remove_group_member`), so its
    partitions move within seconds instead of after ``session_timeout_ms``."""
    member_id = getattr(getattr(consumer, "_coordinator", None), "member_id", "")
    with contextlib.suppress(Exception):
        await consumer.stop()
    if leave:
        await remove_group_member(kafka, group, member_id)


group_id = naming.generate_group
"""The generation consumers' group id (:func:`streams.runs.naming.generate_group`)."""


def default_instance_id(server_url: str) -> str:
    """A static-membership id stable per host and server URL: ``<hostname>-<server slug>``
    (:func:`streams.runs.naming.server_slug`)."""
    return f"{socket.gethostname()}-{naming.server_slug(server_url)}"
