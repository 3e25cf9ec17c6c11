"""A run's past, read back from its topics' record timestamps: the samples the dashboard's charts
start with, so a page opened on a finished (or long-running) run shows how it went, not flat lines
from the moment the dashboard started.

Kafka answers "the first offset whose record timestamp is >= T" per partition (ListOffsets by time,
``AIOKafkaConsumer.offsets_for_times``, aiokafka 0.14), from its time index, without reading a
record: the count of records before T is that offset minus the partition's first offset (its end
offset when none is that late). Asked at up to ``points`` times from the run's first record to its
last, on the prompts, completions and errors topics, that gives the published and results curves and
the completions/s between points. Record timestamps are the producers' clocks (``CreateTime``,
Kafka's default). The prompts topic's offsets count the producer's transaction markers too (as the
status's ``published_exact`` false does, docs/status.md); tokens/s, lag, in S3, quality and the
servers are not in the offsets and stay ``None``. What this answers: docs/dashboard.md.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.config import Settings
from streams.kafka import consumer_kwargs, topic_partitions

__all__ = ["align_published", "samples_from_counts", "topic_history"]

_RESOLUTION_MS = 100


def samples_from_counts(times_ms: list[int], counts: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """The history samples (``launch.status.dashboard.history.sample_of`` keys, ``source``
    ``"topics"``) of cumulative record counts ``(prompts, completions, errors)`` before each of
    ``times_ms`` (Unix milliseconds, ascending): the counts, ``remaining`` (prompts less results) and
    ``completions_per_s``, the results per second since the previous time (``None`` at the first)."""
    samples: list[dict[str, Any]] = []
    for i, (t, (prompts, completions, errors)) in enumerate(zip(times_ms, counts, strict=True)):
        results = completions + errors
        rate = None
        if i:
            before = counts[i - 1][1] + counts[i - 1][2]
            rate = round((results - before) / ((t - times_ms[i - 1]) / 1000), 3)
        samples.append(
            {
                "at": t / 1000,
                "source": "topics",
                "state": None,
                "gate": None,
                "published": prompts,
                "results": results,
                "completions": completions,
                "errors": errors,
                "in_s3": None,
                "exported": None,
                "remaining": max(0, prompts - results),
                "tokens_per_s": None,
                "completions_per_s": rate,
                "eta_s": None,
                "lag": None,
                "sink_lag": None,
                "quality": {},
                "quality_results": None,
                "servers": {},
            }
        )
    return samples


def align_published(samples: list[dict[str, Any]], published: int) -> list[dict[str, Any]]:
    """``samples`` with their ``published`` (prompts-topic offsets, transaction markers included)
    scaled so that the last is ``published`` (the status's exact count, ``published_exact``), and
    ``remaining`` with them: the markers spread over the run, so that the chart does not drop where
    the collected samples start. Unchanged when the last is not more than ``published``."""
    last = samples[-1]["published"] if samples else 0
    if not last or last <= published:
        return samples
    aligned = []
    for s in samples:
        prompts = round(s["published"] * published / last)
        aligned.append({**s, "published": prompts, "remaining": max(0, prompts - s["results"])})
    return aligned


async def topic_history(
    settings: Settings, *, points: int = 120, until_ms: int | None = None, timeout_s: float = 30.0
) -> list[dict[str, Any]]:
    """The run's history from its topics' record timestamps: up to ``points`` samples (at least
    1 s apart) from its first record to its last (before ``until_ms``, Unix ms; default: now), plus
    one just after the last; ``[]`` when its topics hold no record yet.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` seconds.
    """
    t = settings.topics
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None), request_timeout_ms=10000)
    try:
        async with asyncio.timeout(timeout_s):
            await consumer.start()
            tps = {
                topic: [TopicPartition(topic, p) for p in await topic_partitions(settings.kafka, topic)]
                for topic in (t.prompts, t.completions, t.errors)
            }
            every = [tp for group in tps.values() for tp in group]
            if not every:
                return []
            begin = await consumer.beginning_offsets(every)
            end = await consumer.end_offsets(every)
            full = [tp for tp in every if end[tp] > begin[tp]]
            if not full:
                return []

            async def before(ms: int) -> dict[TopicPartition, int]:
                """Records of each partition with a timestamp < ``ms``."""
                found = await consumer.offsets_for_times({tp: ms for tp in full})
                return {tp: (found[tp].offset if found.get(tp) else end[tp]) - begin[tp] for tp in full}

            firsts = await consumer.offsets_for_times({tp: 0 for tp in full})
            first = min(v.timestamp for v in firsts.values() if v is not None)
            low, high = first, until_ms if until_ms is not None else int(time.time() * 1000)
            # the last timestamp: the latest T that some record's timestamp is >= (binary search)
            while high - low > _RESOLUTION_MS:
                mid = (low + high) // 2
                found = await consumer.offsets_for_times({tp: mid for tp in full})
                low, high = (mid, high) if any(found.get(tp) for tp in full) else (low, mid)
            last = low
            step = max(1000, (last - first) // max(1, points - 2))
            times = [*range(first, last, step), last + _RESOLUTION_MS + 1]
            counts: list[tuple[int, int, int]] = []
            for ms in times:
                n = await before(ms)
                prompts, completions, errors = (sum(n.get(tp, 0) for tp in tps[x]) for x in tps)
                counts.append((prompts, completions, errors))
    finally:
        await consumer.stop()
    return samples_from_counts(times, counts)
