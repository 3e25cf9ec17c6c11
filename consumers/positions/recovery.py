"""Where a generation consumer resumes when its group's committed offsets are gone.

Kafka deletes an empty group's committed offsets after ``offsets.retention.minutes`` (KIP-211).
Before it joins the group, a consumer that finds partitions holding prompts but no committed
offset, while the run has results, reads the results topics once and skips every prompt record a
result answers (:func:`answered_prompts`, :class:`Answered`); the others are generated.

Design: docs/consumer.md, "Recovery when committed offsets are gone".
"""

from __future__ import annotations

import hashlib
import logging
from array import array
from bisect import bisect_left
from collections.abc import Mapping

import msgspec
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import CoordinatorLoadInProgressError
from aiokafka.structs import OffsetAndMetadata

from streams.config import Settings
from streams.kafka import admin_call, end_offsets, read_to_end, topic_partitions
from streams.records import SourceOffset

__all__ = ["Answered", "answered_prompts"]

log = logging.getLogger("kafkagen.generate")


class _ResultSource(msgspec.Struct):
    id: str = ""
    source: SourceOffset | None = None


_sources = msgspec.json.Decoder(_ResultSource)


def _id_hash(key: bytes) -> int:
    """64 bits of BLAKE2b of a record key (a prompt id's UTF-8 bytes, ``streams.records.key_of``)."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big", signed=True)


class Answered:
    """Prompt records already answered, by prompts-topic partition: the offset a result names, and
    its id, so that a record at that offset with another id (a prompts topic created again under
    the same name) is not taken for answered.

    Args:
        offsets: partition → {offset → id} of prompt records that have a result.
    """

    def __init__(self, offsets: Mapping[int, Mapping[int, str]]) -> None:
        self._offsets: dict[int, array[int]] = {}
        self._ids: dict[int, array[int]] = {}
        for p, found in offsets.items():
            ordered = sorted(found)
            self._offsets[p] = array("q", ordered)
            self._ids[p] = array("q", (_id_hash(found[o].encode("utf-8")) for o in ordered))
        self.skipped = 0
        """records :meth:`covers` said were answered (the consumer skipped them)."""

    def __len__(self) -> int:
        return sum(len(found) for found in self._offsets.values())

    @property
    def partitions(self) -> list[int]:
        """The partitions recovered, sorted."""
        return sorted(self._offsets)

    def covers(self, partition: int, offset: int, key: bytes | None) -> bool:
        """Whether the prompt record at ``offset`` of ``partition``, of key ``key``, has a result
        (counted in :attr:`skipped` when it has)."""
        found = self._offsets.get(partition)
        if not found or key is None:
            return False
        i = bisect_left(found, offset)
        hit = i < len(found) and found[i] == offset and self._ids[partition][i] == _id_hash(key)
        self.skipped += hit
        return hit


async def answered_prompts(settings: Settings, group: str, *, timeout_s: float = 60.0) -> Answered | None:
    """What the consumer of ``group`` must skip on the partitions of ``settings.topics.prompts``
    that hold records but have no committed offset in ``group`` while the run has results
    (docs/consumer.md, "Recovery"); None when there is no such partition. Logs what it found: a
    warning when no partition has a committed offset (they expired), else at info level.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka could not be read (``timeout_s`` seconds
            per request; the results topics are read as :func:`streams.kafka.read_to_end` does).
    """
    t = settings.topics
    kafka = settings.kafka
    partitions = await topic_partitions(kafka, t.prompts, timeout_s=timeout_s)
    if not partitions:
        return None
    asked = [TopicPartition(t.prompts, p) for p in partitions]

    async def committed_offsets(admin: AIOKafkaAdminClient) -> dict[TopicPartition, OffsetAndMetadata]:
        got: dict[TopicPartition, OffsetAndMetadata] = await admin.list_consumer_group_offsets(
            group, partitions=asked
        )
        # asked by partition, the broker answers each (-1: no committed offset, the group known or
        # not); aiokafka 0.14 leaves the response's own error code unread, so an answer without
        # them (its coordinator loading or moving) is one to ask again, not "no offsets"
        if any(tp not in got for tp in asked):
            raise CoordinatorLoadInProgressError(f"OffsetFetch of {group} answered without its partitions")
        return got

    committed = await admin_call(
        kafka, f"committed offsets of {group}", committed_offsets, timeout_s=timeout_s
    )
    ends = await end_offsets(kafka, t.prompts, timeout_s=timeout_s)
    missing = [
        p for p in partitions if ends.get(p, 0) > 0 and committed[TopicPartition(t.prompts, p)].offset < 0
    ]
    if not missing:
        return None
    results = {
        topic: sum((await end_offsets(kafka, topic, timeout_s=timeout_s)).values())
        for topic in (t.completions, t.errors)
    }
    if not any(results.values()):
        return None  # a run's first start: nothing was answered yet
    found: dict[int, dict[int, str]] = {p: {} for p in missing}
    for topic in (t.completions, t.errors):
        async for records in read_to_end(kafka, topic):
            for rec in records:
                try:
                    result = _sources.decode(rec.value or b"")
                except msgspec.DecodeError:
                    continue  # not a result record
                source = result.source
                if source is not None and source.topic == t.prompts and source.partition in found:
                    found[source.partition][source.offset] = result.id
    answered = Answered(found)
    # no partition with one: the group's offsets expired (they expire together, once the group
    # is empty); else these are partitions no consumer has committed on yet (a run's start, added)
    expired = all(offset.offset < 0 for offset in committed.values())
    log.log(
        logging.WARNING if expired else logging.INFO,
        "partitions %s of %s hold prompts but no committed offset in group %s, while the run has %d "
        "results (%s: %d, %s: %d): the group's offsets expired (the broker's "
        "offsets.retention.minutes; README, guarantees), or no consumer has committed on them yet. "
        "Recovered from the results: %d prompt records of them have a result and are skipped when "
        "fetched, not generated again; the others are generated",
        missing,
        t.prompts,
        group,
        sum(results.values()),
        t.completions,
        results[t.completions],
        t.errors,
        results[t.errors],
        len(answered),
    )
    return answered
