"""Whether the objects of a run cover its topics' offsets: holes, gaps and overlaps.

Per partition the objects must cover the topic's offsets from its first offset still in Kafka to its
end offset (``read_committed``); a hole is a *gap* only when Kafka holds a committed record in it
(the rules, holes below the first offset and ``--no-topic-check`` included: docs/export.md,
"Coverage"). :func:`holes`, :func:`spans` and :func:`overlaps` are pure.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from sinks.export.sources import Source
from streams.config import Settings
from streams.kafka import consumer_kwargs, end_offsets, topic_partitions

__all__ = ["Spans", "holes", "overlaps", "s3_only_gaps", "spans", "topic_coverage"]

Spans = dict[tuple[str, int], list[tuple[int, int]]]
"""(topic, partition) → sorted (start, end) offsets of its objects, inclusive."""


def spans(sources: Iterable[Source]) -> Spans:
    """The offsets of the objects whose metadata was read, per partition, sorted."""
    found: Spans = {}
    for s in sources:
        if s.meta is not None:
            found.setdefault((s.parsed.topic, s.parsed.partition), []).append(
                (s.meta.start_offset, s.meta.end_offset)
            )
    for ranges in found.values():
        ranges.sort()
    return found


def holes(spans: list[tuple[int, int]], start: int | None, end: int | None) -> list[tuple[int, int, str]]:
    """Offset ranges (inclusive) of a partition that no object covers: before the first object
    (from ``start``), between objects, after the last (to ``end - 1``). ``None`` bounds: unknown.

    Args:
        spans: the partition's objects, ``(start, end)`` inclusive, sorted.
    """
    found: list[tuple[int, int, str]] = []
    if not spans:
        if start is not None and end is not None and start < end:
            found.append((start, end - 1, "no object"))
        return found
    if start is not None and spans[0][0] > start:
        found.append((start, spans[0][0] - 1, "before the first object"))
    reach = spans[0][1]
    for first, last in spans[1:]:
        if first > reach + 1:
            found.append((reach + 1, first - 1, "between objects"))
        reach = max(reach, last)
    if end is not None and reach + 1 < end:
        found.append((reach + 1, end - 1, "after the last object"))
    return found


def overlaps(spans: Spans) -> list[dict[str, Any]]:
    """Offsets held by two consecutive objects of a partition (``from``..``to`` inclusive)."""
    found: list[dict[str, Any]] = []
    for (topic, partition), ranges in sorted(spans.items()):
        for (_, prev_end), (cur_start, cur_end) in itertools.pairwise(ranges):
            if cur_start <= prev_end:
                found.append(
                    {"topic": topic, "partition": partition, "from": cur_start, "to": min(prev_end, cur_end)}
                )
    return found


async def _partitions(settings: Settings, topics: Iterable[str]) -> dict[str, list[int]]:
    """The partitions of each of ``topics`` that exists (:func:`streams.kafka.topic_partitions`)."""
    found = {topic: await topic_partitions(settings.kafka, topic) for topic in topics}
    return {topic: partitions for topic, partitions in found.items() if partitions}


async def _first_record(
    consumer: AIOKafkaConsumer, tp: TopicPartition, first: int, last: int, stall_timeout_s: float
) -> int | None:
    """The offset of the first committed record in ``first..last`` of ``tp``, or ``None`` when the
    range holds only transaction markers and aborted records (``read_committed`` skips them)."""
    consumer.assign([tp])
    consumer.seek(tp, first)
    last_progress = time.monotonic()
    position = first
    while position <= last:
        batch = await consumer.getmany(tp, timeout_ms=500, max_records=10)
        records = batch.get(tp)
        if records:
            return records[0].offset if records[0].offset <= last else None
        now_at = await consumer.position(tp)
        if now_at > position:
            position, last_progress = now_at, time.monotonic()
        elif time.monotonic() - last_progress > stall_timeout_s:
            raise TimeoutError(
                f"reading {tp.topic}-{tp.partition} at {position}: no progress for {stall_timeout_s:.0f} s"
            )
    return None


async def topic_coverage(
    settings: Settings, spans: Spans, topics: set[str], *, stall_timeout_s: float = 30.0
) -> tuple[list[dict[str, Any]], list[str]]:
    """Check the objects' offsets against Kafka (docs/export.md, "Coverage").

    Args:
        spans: the objects' offsets per partition.
        topics: every topic to check (those of the objects and the configured result topics).
        stall_timeout_s: seconds without progress reading a range before giving up.

    Returns:
        the gaps (``topic``, ``partition``, ``from``, ``to`` inclusive, ``where`` and ``first_record``:
        the first record found in the range, ``None`` when the range is no longer in Kafka), and
        problems that make the coverage uncheckable (a topic of the objects missing from Kafka,
        objects beyond the topic's end).

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka could not be read.
    """
    partitions = await _partitions(settings, sorted(topics))
    problems = [
        f"topic {t} is not in Kafka: the offsets of its objects cannot be checked "
        "(set --topics.completions/--topics.errors, or --no-topic-check)"
        for t in sorted({t for t, _ in spans} - set(partitions))
    ]
    tps = [TopicPartition(t, p) for t, ps in sorted(partitions.items()) for p in ps]
    gaps: list[dict[str, Any]] = []
    if not tps:
        return gaps, problems
    ends: dict[TopicPartition, int] = {}
    for topic, numbers in sorted(partitions.items()):  # read_committed: the last stable offsets
        found = await end_offsets(settings.kafka, topic, partitions=numbers)
        ends.update({TopicPartition(topic, p): end for p, end in found.items()})
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    await consumer.start()
    try:
        consumer.assign(tps)
        starts = await consumer.beginning_offsets(tps)
        for tp in tps:
            found_spans = spans.get((tp.topic, tp.partition), [])
            start, end = starts[tp], ends[tp]
            if found_spans and max(e for _, e in found_spans) >= end:
                problems.append(
                    f"{tp.topic}-{tp.partition}: objects reach offset {max(e for _, e in found_spans)} but "
                    f"the topic ends at {end} (a re-created topic? export the run from its own topic)"
                )
            for first, last, where in holes(found_spans, start, end):
                gap = {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "from": first,
                    "to": last,
                    "where": where,
                }
                gone = f"offsets below {start} are no longer in Kafka (retention): cannot tell what they held"
                if last < start:
                    gaps.append({**gap, "first_record": None, "reason": gone})
                    continue
                record = await _first_record(consumer, tp, max(first, start), last, stall_timeout_s)
                if record is not None:
                    reason = f"Kafka holds record {record} there, no object has it"
                    gaps.append({**gap, "first_record": record, "reason": reason})
                elif first < start:
                    gaps.append({**gap, "first_record": None, "reason": gone})
    finally:
        await consumer.stop()
    for topic, partition in spans:
        if topic in partitions and partition not in partitions[topic]:
            problems.append(f"{topic}-{partition}: objects of a partition the topic does not have")
    return gaps, problems


def s3_only_gaps(spans: Spans) -> list[dict[str, Any]]:
    """The holes between objects, without Kafka (``--no-topic-check``): every hole is a gap."""
    return [
        {
            "topic": topic,
            "partition": partition,
            "from": first,
            "to": last,
            "where": where,
            "first_record": None,
            "reason": "no object holds these offsets (not checked against Kafka)",
        }
        for (topic, partition), found in sorted(spans.items())
        for first, last, where in holes(found, None, None)
    ]
