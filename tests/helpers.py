"""Helpers for tests that run real processes against the local Kafka: publish prompts, read
topics back, and start/kill kafkagen processes with a test's settings."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import IO, TypeVar

import pytest
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families

from streams.config import Settings
from streams.environment import settings_to_env
from streams.kafka import client_kwargs, consumer_kwargs, producer_kwargs, topic_partitions
from streams.records import (
    CompletionRecord,
    ErrorRecord,
    GenerationParams,
    ProgressRecord,
    PromptMetadata,
    PromptRecord,
    decode,
    encode,
    key_of,
)
from streams.topics import ensure_topics, topic_specs

REPO_ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T", CompletionRecord, ErrorRecord, PromptRecord, ProgressRecord)


def broker_shapes(*, xfail_on_3: str | None = None) -> pytest.MarkDecorator:
    """Run the decorated test on the single broker and on the 3-broker cluster: it parametrizes
    the ``brokers`` fixture (ids ``1broker``, ``3brokers``) that the ``settings`` fixture follows.
    ``xfail_on_3`` marks the cluster run as an expected, non-strict failure with that reason."""
    three = pytest.param(
        3,
        id="3brokers",
        marks=[pytest.mark.xfail(strict=False, reason=xfail_on_3)] if xfail_on_3 else [],
    )
    return pytest.mark.parametrize("brokers", [pytest.param(1, id="1broker"), three])


def with_kafka_at(settings: Settings, bootstrap_servers: str) -> Settings:
    """``settings`` pointing at another Kafka address (an unreachable or silent one, in tests)."""
    kafka = settings.kafka.model_copy(update={"bootstrap_servers": bootstrap_servers})
    return settings.model_copy(update={"kafka": kafka})


def make_prompt(
    i: int, *, max_tokens: int | None = None, min_tokens: int | None = None, content: str | None = None
) -> PromptRecord:
    """A small chat prompt with id ``p-<i>``."""
    return PromptRecord(
        id=f"p-{i:05d}",
        messages=[{"role": "user", "content": content or f"Question number {i}: what is {i} + {i}?"}],
        params=GenerationParams(max_tokens=max_tokens, min_tokens=min_tokens),
        metadata=PromptMetadata(source="test", line=i + 1),
    )


async def publish(
    settings: Settings, prompts: Sequence[PromptRecord], *, partition: int | None = None
) -> None:
    """Create the kafkagen topics and publish ``prompts`` keyed by id."""
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["prompts"], specs["completions"], specs["errors"]])
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        for p in prompts:
            await producer.send(specs["prompts"].name, encode(p), key=key_of(p.id), partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


async def partitions_of(settings: Settings, topic: str) -> list[int]:
    """Partition numbers of ``topic`` (empty when it does not exist)."""
    return await topic_partitions(settings.kafka, topic)


async def read_topic(settings: Settings, topic: str, cls: type[T]) -> list[T]:
    """Every committed record of ``topic`` (read_committed, from the beginning to the end offsets)."""
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    await consumer.start()
    try:
        parts = await partitions_of(settings, topic)
        tps = [TopicPartition(topic, p) for p in parts]
        if not tps:
            return []
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[T] = []

        async def behind() -> bool:
            return any([await consumer.position(tp) < end[tp] for tp in tps])

        async with asyncio.timeout(60):
            while await behind():
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    out += [decode(r.value or b"", cls) for r in records]
        return out
    finally:
        await consumer.stop()


async def partition_leader(settings: Settings, topic: str, partition: int) -> int:
    """Node id of the broker leading ``topic``-``partition`` now (``kafka-<id>`` in a local cluster)."""
    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="test-admin"))
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return int(next(p["leader"] for p in described["partitions"] if p["partition"] == partition))


async def committed(settings: Settings, group: str, topic: str) -> dict[int, int | None]:
    """The group's committed offset per partition of ``topic``."""
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=group))
    await consumer.start()
    try:
        parts = await partitions_of(settings, topic)
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in sorted(parts)}
    finally:
        await consumer.stop()


TEST_SERVER_PORTS = range(23000, 27000)
"""Where ``unused_port`` hands out ports to servers a test starts: below Linux's ephemeral range
(32768-60999), so that no outgoing connection's source port can take one between the pick and the
server's bind (it did: a simulator failed with 'address already in use'); apart from the fixed ports
of the fault audit (21000-22422, S3's +10000 above 31000), ``launch.serve``'s tests (27000-27199) and
``own_kafka`` (29100-29899). Each xdist worker has its own block of 250."""

_handed_out = itertools.count()


def unused_port(count: int = 1) -> int:
    """A TCP port P of 127.0.0.1 with P .. P+count-1 all free now, from this xdist worker's block of
    ``TEST_SERVER_PORTS``, never the one handed out just before (a test may pick several before it
    starts anything on them).

    Raises:
        AssertionError: every port of the block is taken.
    """
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    block = 250
    first = TEST_SERVER_PORTS.start + (worker % (len(TEST_SERVER_PORTS) // block)) * block
    for _ in range(block):
        port = first + next(_handed_out) % (block - count + 1)
        if all(port_free(port + k) for k in range(count)):
            for _ in range(count - 1):
                next(_handed_out)  # the run's other ports are not handed out next
            return port
    raise AssertionError(f"no {count} free port(s) in {first}-{first + block - 1}")


def metric_value(text: str, name: str) -> float | None:
    """The value of the first sample named ``name`` (whatever its labels) in a Prometheus text
    exposition ``text``; None when there is none."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return None


def spawn(
    args: Sequence[str], settings: Settings, log: Path, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``python <args>`` in the repository with ``settings`` in its environment."""
    env = {**os.environ, **settings_to_env(settings), **(extra_env or {})}
    out: IO[bytes] = log.open("ab")
    return subprocess.Popen(
        [sys.executable, *args], cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
    )


def sigkill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and reap it."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def port_free(port: int) -> bool:
    """Whether nothing listens on (or holds) TCP ``port`` of 127.0.0.1 now: it can be bound."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def _look(check: Callable[[], bool] | Callable[[], object]) -> bool:
    """One look at ``check`` (sync or async): whether it is truthy now."""
    result = check()
    if asyncio.iscoroutine(result):
        result = await result
    return bool(result)


async def wait_for(
    check: Callable[[], bool] | Callable[[], object], *, timeout_s: float, what: str, interval_s: float = 0.25
) -> None:
    """Poll ``check`` (sync or async) until it returns truthy.

    Raises:
        AssertionError: ``timeout_s`` seconds passed; the message says ``what`` was awaited.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if await _look(check):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(interval_s)


async def holds(
    check: Callable[[], bool] | Callable[[], object], *, for_s: float, what: str, interval_s: float = 0.25
) -> None:
    """Watch ``check`` (sync or async) over a window of ``for_s`` seconds in which nothing may
    happen (no request sent, no commit moved, no rebalance): it must be truthy at every look.
    Open the window only once what it watches is ready; make it seconds wide.

    Raises:
        AssertionError: ``check`` was falsy at some look; the message says ``what`` should hold.
    """
    started = time.monotonic()
    while True:
        if not await _look(check):
            raise AssertionError(f"{what} stopped holding after {time.monotonic() - started:.1f} s")
        if time.monotonic() - started >= for_s:
            return
        await asyncio.sleep(interval_s)


def start_simulator(log: Path, *args: str, port: int = 0) -> tuple[subprocess.Popen[str], str]:
    """``python -m simulator --port PORT ARGS`` (``port`` 0: any free one) with its stderr in ``log``;
    returns the process and its URL, read from the line the simulator prints once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator", "--port", str(port), *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:\d+", line)
    if not match:
        proc.kill()
        raise AssertionError(f"the simulator printed {line!r}; see {log}")
    return proc, match.group(0)


@contextmanager
def simulators(
    logs: Path, count: int, *args: str, ports: Sequence[int] = (), name: str = "sim"
) -> Iterator[list[str]]:
    """``count`` simulators (:func:`start_simulator` with ``args``; logs ``<logs>/<name>-<i>.log``; the
    i-th on ``ports[i]`` when given, else any free port); yields their URLs, terminates them after."""
    procs: list[subprocess.Popen[str]] = []
    try:
        urls = []
        for i in range(count):
            proc, url = start_simulator(logs / f"{name}-{i}.log", *args, port=ports[i] if ports else 0)
            procs.append(proc)
            urls.append(url)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(20)


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """``app`` served on 127.0.0.1, on a port the OS picks, until the block ends; yields its base
    URL (``http://127.0.0.1:<port>``)."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
