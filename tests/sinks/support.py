"""Helpers for the sink tests: synthetic records, topics, the sink as a subprocess, and reading
back what it wrote to S3."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from sinks.batch import Batch
from sinks.layout import ObjectMeta, decode_line, iter_body_lines, object_key, parse_key, topic_prefix
from sinks.lines import record_line
from sinks.pause import PAUSE_ENV, PAUSE_MARKER
from sinks.store import ObjectStore
from sinks.topics import group_id
from streams.config import Settings
from streams.environment import settings_to_env
from streams.kafka import consumer_kwargs, producer_kwargs
from streams.records import (
    CompletionRecord,
    ErrorRecord,
    PromptMetadata,
    PromptRecord,
    SourceOffset,
    Timings,
    Usage,
    encode,
    key_of,
)
from streams.storage import s3_client
from streams.topics import TopicSpec, ensure_topics

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

REPO_ROOT = Path(__file__).resolve().parents[2]
FILLER = "The quick brown fox jumps over the lazy dog; 0123456789. "


def prompt(i: int, run_id: str) -> PromptRecord:
    """Prompt ``id-<i>``."""
    return PromptRecord(
        id=f"id-{i:06d}",
        messages=[{"role": "user", "content": f"What is {i} + {i}?"}],
        metadata=PromptMetadata(source="test", line=i + 1),
        run_id=run_id,
    )


def completion(
    i: int, run_id: str, *, content_bytes: int = 6000, finish_reason: str = "stop"
) -> CompletionRecord:
    """A valid completion of :func:`prompt` ``i`` whose content is ``content_bytes`` long (~6 KB records)."""
    text = (f"Answer {i}: " + FILLER * (content_bytes // len(FILLER) + 1))[:content_bytes]
    return CompletionRecord(
        id=f"id-{i:06d}",
        run_id=run_id,
        prompt=prompt(i, run_id),
        content=text,
        reasoning_content="thinking " * 8,
        finish_reason=finish_reason,
        usage=Usage(prompt_tokens=20, completion_tokens=100 + i % 7, reasoning_tokens=10),
        timings=Timings(queued_s=0.01, latency_s=1.5, started_at=1.7e9, finished_at=1.7e9 + 1.5),
        server="http://127.0.0.1:30000",
        model="test-model",
        params={"max_tokens": 512},
        quality=["repetition_loop"] if i % 10 == 0 else [],
        source=SourceOffset(topic="prompts", partition=0, offset=i),
    )


def sink_settings(settings: Settings, **sink: object) -> Settings:
    """``settings`` with test-friendly sink settings (fast group joins, short retries), overridable."""
    base: dict[str, object] = {
        "flush_records": 100,
        "idle_flush_s": 1.5,
        "session_timeout_ms": 6000,
        "rebalance_timeout_ms": 6000,
        "heartbeat_interval_ms": 500,
        "instance_id": "sink-test-0",
        "retry_initial_s": 0.2,
        "retry_max_s": 2.0,
        "shutdown_deadline_s": 5.0,
    }
    base.update(sink)
    topics = settings.topics.model_copy(update={"partitions": 3})
    return settings.model_copy(update={"sink": settings.sink.model_copy(update=base), "topics": topics})


async def create_topics(settings: Settings) -> None:
    """The prompts, completions and errors topics (``topics.partitions`` each), replicated as the
    cluster allows (3 replicas and ``min.insync.replicas`` 2 on 3 brokers, :func:`ensure_topics`)."""
    t = settings.topics
    await ensure_topics(
        settings, [TopicSpec(name, t.partitions, None) for name in (t.prompts, t.completions, t.errors)]
    )


async def produce(
    settings: Settings,
    topic: str,
    items: Sequence[tuple[bytes | None, bytes | None]],
    *,
    partition: int | None = None,
) -> list[tuple[int, int]]:
    """Produce ``(key, value)`` pairs to ``topic`` (idempotent producer, acks=all); returns each
    record's ``(partition, offset)``."""
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key, partition=partition) for key, value in items]
        await producer.flush()
        return [((md := await f).partition, md.offset) for f in futures]
    finally:
        await producer.stop()


async def produce_run(settings: Settings, ids: range, *, prompts: bool = True) -> None:
    """Prompts (optionally) and completions for ``ids``, keyed by id."""
    if prompts:
        await produce(
            settings,
            settings.topics.prompts,
            [(key_of(prompt(i, settings.run_id).id), encode(prompt(i, settings.run_id))) for i in ids],
        )
    await produce(
        settings,
        settings.topics.completions,
        [(key_of(f"id-{i:06d}"), encode(completion(i, settings.run_id))) for i in ids],
    )


async def committed(settings: Settings, topic: str) -> dict[int, int | None]:
    """The sink group's committed offset per partition of ``topic``."""
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=group_id(settings)))
    await consumer.start()
    try:
        parts = range(settings.topics.partitions)
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in parts}
    finally:
        await consumer.stop()


@dataclass(frozen=True)
class StoredObject:
    """One object as listed and read back."""

    key: str
    partition: int
    etag: str
    meta: ObjectMeta
    offsets: list[int]
    kinds: list[str]
    lines: list[bytes]


def client(settings: Settings) -> S3Client:
    return s3_client(settings.s3, max_attempts=2)


def stored_objects(settings: Settings, topic: str, *, read: bool = True) -> list[StoredObject]:
    """Every object under the run's ``topic`` folder, sorted by (partition, start offset)."""
    s3 = client(settings)
    out: list[StoredObject] = []
    folder = topic_prefix(settings.s3.prefix, settings.run_id, topic)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=settings.s3.bucket, Prefix=folder):
        for obj in page.get("Contents", []):
            parsed = parse_key(obj["Key"])
            head = s3.head_object(Bucket=settings.s3.bucket, Key=obj["Key"])
            meta = ObjectMeta.from_s3(head["Metadata"])
            offsets: list[int] = []
            kinds: list[str] = []
            lines: list[bytes] = []
            if read:
                body = s3.get_object(Bucket=settings.s3.bucket, Key=obj["Key"])["Body"].read()
                for raw in iter_body_lines(body):
                    line = decode_line(raw)
                    offsets.append(line.offset)
                    kinds.append(line.kind)
                    lines.append(raw)
            out.append(StoredObject(obj["Key"], parsed.partition, head["ETag"], meta, offsets, kinds, lines))
    return sorted(out, key=lambda o: (o.partition, o.meta.start_offset))


def assert_exact_coverage(objects: list[StoredObject], ends: dict[int, int]) -> None:
    """Per partition the objects cover ``0 .. end - 1`` exactly once: no gap, no overlap, and each
    object's metadata agrees with its lines (count, offsets, SHA-256)."""
    import hashlib

    for partition, end in ends.items():
        mine = [o for o in objects if o.partition == partition]
        expected = 0
        for obj in mine:
            assert obj.meta.start_offset == expected, (
                f"{obj.key}: starts at {obj.meta.start_offset}, expected {expected}"
            )
            assert obj.offsets == list(range(obj.meta.start_offset, obj.meta.end_offset + 1)), obj.key
            assert obj.meta.record_count == len(obj.offsets), obj.key
            assert hashlib.sha256(b"".join(obj.lines)).hexdigest() == obj.meta.sha256, obj.key
            expected = obj.meta.end_offset + 1
        assert expected == end, f"partition {partition}: objects end at {expected}, topic at {end}"


class SinkProcess:
    """``python -m sinks.s3`` as a subprocess with a test's settings in its environment."""

    def __init__(
        self, settings: Settings, log: Path, *, pause: str | None = None, args: Sequence[str] = ()
    ) -> None:
        env = {**os.environ, **settings_to_env(settings), "PYTHONUNBUFFERED": "1"}
        env.pop(PAUSE_ENV, None)
        if pause:
            env[PAUSE_ENV] = pause
        self.log = log
        self._offset = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sinks.s3", *args],
                cwd=REPO_ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        """What this process has logged so far."""
        with self.log.open("rb") as f:
            f.seek(self._offset)
            return f.read().decode("utf-8", "replace")

    async def wait_for_log(self, text: str, *, timeout_s: float, count: int = 1) -> str:
        """Wait until ``text`` appears ``count`` times in this process's output; return the output.

        Raises:
            AssertionError: timeout, or the process exited first.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            out = self.output()
            if out.count(text) >= count:
                return out
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"sink exited ({self.proc.returncode}) before logging {text!r}:\n{out[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"sink did not log {text!r} within {timeout_s:.0f} s:\n{out[-3000:]}")
            await asyncio.sleep(0.1)

    async def wait_paused(self, *, timeout_s: float = 60) -> str:
        """Wait for the test hook's pause marker; return the line."""
        out = await self.wait_for_log(PAUSE_MARKER, timeout_s=timeout_s)
        return next(line for line in out.splitlines() if PAUSE_MARKER in line)

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM, wait, return the exit status (SIGKILL after ``timeout_s``)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(f"sink did not stop on SIGTERM within {timeout_s} s") from None
        return self.proc.returncode


async def wait_all_written(
    settings: Settings, sink: SinkProcess, topic: str, ends: dict[int, int], *, timeout_s: float
) -> None:
    """Wait until the objects under ``topic`` reach every partition's end and the group committed it.

    Raises:
        AssertionError: timeout or the sink exited.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        objects = stored_objects(settings, topic, read=False)
        reached = {
            p: max((o.meta.end_offset + 1 for o in objects if o.partition == p), default=0) for p in ends
        }
        if reached == ends and await committed(settings, topic) == ends:
            return
        if sink.proc.poll() is not None:
            raise AssertionError(f"sink exited ({sink.proc.returncode}):\n{sink.output()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not all written after {timeout_s:.0f} s: {reached} vs {ends}\n{sink.output()[-3000:]}"
            )
        await asyncio.sleep(0.3)


async def sink_until_written(
    settings: Settings, log: Path, ends: dict[int, int], *, timeout_s: float
) -> SinkProcess:
    """Start a sink, wait until the completions topic's objects and commits reach ``ends``
    (:func:`wait_all_written`), stop it with SIGTERM (status 0) and return it, for its output.

    Raises:
        AssertionError: timeout, the sink exited first, or its stop was not clean.
    """
    sink = SinkProcess(settings, log)
    try:
        await wait_all_written(settings, sink, settings.topics.completions, ends, timeout_s=timeout_s)
        assert sink.stop() == 0
    finally:
        sink.kill()
    return sink


async def read_partition(
    settings: Settings, topic: str, partition: int
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every committed record of ``topic``-``partition`` (``read_committed``), up to its end offset."""
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[ConsumerRecord[bytes, bytes]] = []
        deadline = time.monotonic() + 60
        while await consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"{topic}-{partition}: stuck before {end}"
            batch = await consumer.getmany(tp, timeout_ms=500)
            out.extend(r for r in batch.get(tp, []) if r.offset < end)
        return out
    finally:
        await consumer.stop()


async def write_objects(
    settings: Settings,
    topic: str,
    partition: int,
    ranges: Sequence[tuple[int, int]] | None = None,
    *,
    record_type: type[CompletionRecord] | type[ErrorRecord] = CompletionRecord,
) -> list[str]:
    """Write objects as the sink does, from the committed records of ``topic``-``partition`` in
    Kafka: one object per ``(first, last)`` offset range (inclusive; default: one object for all).
    Returns the keys."""
    records = await read_partition(settings, topic, partition)
    store = ObjectStore(client(settings), settings.s3.bucket, 1 << 30)
    keys: list[str] = []
    for first, last in ranges if ranges is not None else [(0, records[-1].offset)]:
        batch = Batch(3)
        for rec in records:
            if first <= rec.offset <= last:
                line, _ = record_line(
                    topic=topic,
                    partition=partition,
                    offset=rec.offset,
                    timestamp_ms=rec.timestamp,
                    key=rec.key,
                    value=rec.value,
                    record_type=record_type,
                    run_id=settings.run_id,
                )
                batch.add(rec.offset, line)
        body, meta = batch.seal()
        key = object_key(settings.s3.prefix, settings.run_id, topic, partition, meta.start_offset)
        assert store.put_once(key, body, meta).created
        keys.append(key)
    return keys
