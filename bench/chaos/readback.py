"""Reading a run back from Kafka and S3 as it is, for audits and tests: every committed record
of a topic with its offset, a group's committed offsets and members, the sink's objects with
their offsets. Read-only; every call is bounded in time.

Kafka is read ``read_committed`` (as every kafkagen consumer reads), so records of aborted
transactions and transaction markers are not returned: an offset without a record is one of
those. Objects are read with :mod:`sinks.layout` (keys, metadata, lines); an object that does not
follow the layout is returned with its ``problem`` set rather than raising.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocol

from sinks.layout import ObjectMeta, decode_line, iter_body_lines, parse_key, run_prefix
from streams.config import Settings
from streams.errors import LayoutError
from streams.kafka import client_kwargs, consumer_kwargs, end_offsets, topic_partitions

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """One committed Kafka record: where it is, its key, value and timestamp (ms since the epoch)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


@dataclass
class StoredObject:
    """One object of the sink: its key's parts, its metadata and the offsets of its lines.

    Attributes:
        key: the S3 key.
        topic, partition, start_offset: from the key (:func:`sinks.layout.parse_key`).
        end_offset: from the metadata (None when unreadable).
        offsets: the Kafka offsets of the body's lines, in order.
        last_modified: S3's ``LastModified``, seconds since the epoch (S3 keeps whole seconds).
        problem: why the object does not follow the layout (None when it does).
    """

    key: str
    topic: str
    partition: int
    start_offset: int
    end_offset: int | None
    offsets: list[int] = field(default_factory=list)
    last_modified: float = 0.0
    problem: str | None = None


async def read_records(settings: Settings, topic: str, *, timeout_s: float = 120.0) -> list[TopicRecord]:
    """Every committed record of ``topic``, from the beginning to the end offsets taken at start,
    in partition then offset order.

    Raises:
        KafkaError, TimeoutError: Kafka did not answer, or reading took over ``timeout_s`` seconds.
    """
    parts = await topic_partitions(settings.kafka, topic)
    if not parts:
        return []
    tps = [TopicPartition(topic, p) for p in parts]
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    out: list[TopicRecord] = []
    async with asyncio.timeout(timeout_s):
        ends = {
            TopicPartition(topic, p): end
            for p, end in (await end_offsets(settings.kafka, topic, partitions=parts)).items()
        }
        await consumer.start()
        try:
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            while behind := [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                batch = await consumer.getmany(*behind, timeout_ms=500)
                for tp, records in batch.items():
                    out += [
                        TopicRecord(topic, tp.partition, r.offset, r.key, r.value, r.timestamp)
                        for r in records
                        if r.offset < ends[tp]
                    ]
        finally:
            await consumer.stop()
    out.sort(key=lambda r: (r.partition, r.offset))
    return out


class GroupReader:
    """A group's committed offsets and members, asked through one admin client.

    Use as ``async with GroupReader(settings) as groups: await groups.committed(...)``.
    """

    def __init__(self, settings: Settings, *, timeout_s: float = 10.0) -> None:
        self.timeout_s = timeout_s
        self._admin = AIOKafkaAdminClient(
            **client_kwargs(settings.kafka, role="readback"), request_timeout_ms=int(timeout_s * 1000)
        )

    async def __aenter__(self) -> GroupReader:
        async with asyncio.timeout(self.timeout_s):
            await self._admin.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self._admin.close()

    async def committed(self, group: str, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> committed offset of ``group`` on ``topics`` (partitions without a
        commit are absent).

        Raises:
            KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` seconds.
        """
        async with asyncio.timeout(self.timeout_s):
            offsets = await self._admin.list_consumer_group_offsets(group)
        return {
            (tp.topic, tp.partition): meta.offset
            for tp, meta in offsets.items()
            if tp.topic in topics and meta.offset >= 0
        }

    async def members(self, group: str) -> tuple[str, dict[str, set[int]]]:
        """The group's state (``Stable``, ``PreparingRebalance``, ``Empty``...) and member id ->
        assigned partitions (of any topic). A static member's id is its ``group.instance.id``, a
        dash and a UUID (Kafka's ``generateMemberId``).

        Raises:
            KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` seconds.
        """
        async with asyncio.timeout(self.timeout_s):
            responses = await self._admin.describe_consumer_groups([group])
        described = responses[0].to_object()["groups"][0]
        members: dict[str, set[int]] = {}
        for m in described["members"]:
            raw = m["member_assignment"]
            parts = (
                {tp.partition for tp in ConsumerProtocol.ASSIGNMENT.decode(raw).partitions()}
                if raw
                else set()
            )
            members[str(m["member_id"])] = parts
        return str(described["state"]), members


def read_objects(client: S3Client, bucket: str, prefix: str, run_id: str) -> list[StoredObject]:
    """Every object of run ``run_id`` under ``prefix`` with the offsets of its lines, sorted by
    topic, partition and start offset. A key outside the layout is skipped; an object whose
    metadata or body is malformed is returned with ``problem`` set.

    Raises:
        botocore.exceptions.ClientError, BotoCoreError: S3 failed.
    """
    out: list[StoredObject] = []
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=run_prefix(prefix, run_id)
    ):
        for entry in page.get("Contents", []):
            try:
                parsed = parse_key(entry["Key"])
            except LayoutError:
                continue
            obj = StoredObject(
                entry["Key"],
                parsed.topic,
                parsed.partition,
                parsed.start_offset,
                None,
                last_modified=entry["LastModified"].timestamp(),
            )
            resp = client.get_object(Bucket=bucket, Key=entry["Key"])
            body = resp["Body"].read()
            try:
                obj.end_offset = ObjectMeta.from_s3(resp.get("Metadata", {})).end_offset
                for raw in iter_body_lines(body):
                    line = decode_line(raw)
                    if (line.topic, line.partition) != (obj.topic, obj.partition):
                        raise LayoutError(f"a line of {line.topic}-{line.partition}")
                    obj.offsets.append(line.offset)
            except LayoutError as exc:
                obj.problem = str(exc)
            out.append(obj)
    out.sort(key=lambda o: (o.topic, o.partition, o.start_offset))
    return out
