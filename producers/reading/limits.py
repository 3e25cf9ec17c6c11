"""How big a record and an input line may be.

A record may take the prompts topic's ``max.message.bytes`` in a batch: the smaller of the topic's
config (described from the broker: a topic created elsewhere may allow less) and
``kafka.max_message_bytes``; a bigger one is a bad line. A line longer than
``4 * kafka.max_message_bytes`` cannot become a record that fits: the reader skips it (reported
bad) without holding it in memory.
"""

from __future__ import annotations

from typing import Final

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams.config import Settings
from streams.kafka import admin_call

__all__ = [
    "LINE_LIMIT_FACTOR",
    "RECORD_OVERHEAD_BYTES",
    "line_limit",
    "record_limit",
    "record_size",
    "topic_max_message_bytes",
]

RECORD_OVERHEAD_BYTES: Final = 128
"""Bytes a record adds to its key and value inside a batch (headers, varints, batch header), rounded up."""
LINE_LIMIT_FACTOR: Final = 4
"""An input line may have this many times ``kafka.max_message_bytes``; a longer one is skipped."""


def record_size(key: bytes, value: bytes) -> int:
    """Bytes a record with ``key`` and ``value`` takes in a batch (an upper bound)."""
    return len(value) + len(key) + RECORD_OVERHEAD_BYTES


def line_limit(settings: Settings) -> int:
    """Bytes an input line may have (``4 * kafka.max_message_bytes``)."""
    return LINE_LIMIT_FACTOR * settings.kafka.max_message_bytes


async def topic_max_message_bytes(settings: Settings, topic: str) -> int | None:
    """The topic's effective ``max.message.bytes``, or ``None`` when it cannot be described.

    Reads aiokafka 0.14's ``DescribeConfigsResponse`` as ``AIOKafkaAdminClient.describe_configs``
    returns it (``aiokafka/protocol/admin.py``): ``response.resources`` holds ``(error_code,
    error_message, resource_type, resource_name, config_entries)``, each entry starting with
    ``(config_names, config_value, ...)``.

    Raises:
        aiokafka.errors.KafkaError: Kafka cannot be asked.
    """
    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    responses = await admin_call(
        settings.kafka, f"describing the configs of {topic}", lambda admin: admin.describe_configs([resource])
    )
    for response in responses:
        for _err, _msg, _type, _name, entries in response.resources:
            for entry in entries:
                if entry[0] == "max.message.bytes" and entry[1]:
                    return int(entry[1])
    return None


async def record_limit(settings: Settings, topic: str) -> int:
    """Bytes a record may take in a batch of ``topic``: the smaller of its ``max.message.bytes``
    (:func:`topic_max_message_bytes`) and ``kafka.max_message_bytes``.

    Raises:
        aiokafka.errors.KafkaError: Kafka cannot be asked.
    """
    topic_limit = await topic_max_message_bytes(settings, topic)
    return min(settings.kafka.max_message_bytes, topic_limit or settings.kafka.max_message_bytes)
