"""What the sink reads from Kafka: its topics, their record types and its consumer group.

The topics are the run's (``<run id>.completions`` and ``.errors`` unless set,
:mod:`streams.runs.naming`, ``docs/runs.md``); the group, also the faust app id, is
``<sink.group>.<run_id>`` (:func:`streams.runs.naming.sink_group`).
"""

from __future__ import annotations

from sinks.lines import SinkRecordType
from streams.config import Settings
from streams.records import CompletionRecord, ErrorRecord
from streams.runs import naming
from streams.topics import ensure_topics, topic_specs

__all__ = ["ensure_sink_topics", "group_id", "record_types"]

group_id = naming.sink_group
"""The sink's consumer group and faust app id: ``<sink.group>.<run_id>``
(:func:`streams.runs.naming.sink_group`)."""


def record_types(settings: Settings) -> dict[str, SinkRecordType]:
    """Topic name → the record type of its values: the completions and the dead-letter topic."""
    return {settings.topics.completions: CompletionRecord, settings.topics.errors: ErrorRecord}


async def ensure_sink_topics(settings: Settings) -> None:
    """Create the completions and dead-letter topics when missing.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka could not be reached.
    """
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["completions"], specs["errors"]])
