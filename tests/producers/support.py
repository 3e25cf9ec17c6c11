"""What the producer's process tests share: the command-line flags that point it at a test's
settings, running it as a process, reading a topic back, and killing it mid-file."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from streams.config import Settings
from streams.kafka import consumer_kwargs
from streams.records import ProgressRecord, decode

REPO_ROOT = Path(__file__).resolve().parents[2]


def flags(settings: Settings) -> list[str]:
    """The CLI flags that point the producer at this test's broker, topics and run."""
    return [
        "--kafka.bootstrap-servers",
        settings.kafka.bootstrap_servers,
        "--topics.prompts",
        settings.topics.prompts,
        "--topics.producer-progress",
        settings.topics.producer_progress,
        "--topics.partitions",
        str(settings.topics.partitions),
        "--run-id",
        settings.run_id,
        "--no-progress",
    ]


def spawn(
    settings: Settings, *args: str, cwd: Path, stdin: Any = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "producers.prompts", *args, *flags(settings)],
        cwd=cwd,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def run_cli(settings: Settings, *args: str, cwd: Path, input: bytes | None = None) -> tuple[int, str]:
    """Run the producer as a process; returns its exit status and stderr."""
    proc = spawn(settings, *args, cwd=cwd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
    _, err = proc.communicate(input, timeout=60)
    return proc.returncode, err.decode()


async def read_all(
    settings: Settings,
    topic: str,
    *,
    partitions: int | None = None,
    isolation: str = "read_committed",
    visible_now: bool = False,
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topic`` up to its high watermarks now. With ``read_committed`` that waits
    for the last transactions' markers (a commit returns before they are written) and for open
    transactions to end; ``visible_now`` reads only up to the last stable offsets instead."""
    count = settings.topics.partitions if partitions is None else partitions
    tps = [TopicPartition(topic, p) for p in range(count)]
    base = consumer_kwargs(settings.kafka, group_id=None)
    probe = AIOKafkaConsumer(**{**base, "isolation_level": "read_uncommitted"})
    consumer = AIOKafkaConsumer(**{**base, "isolation_level": isolation})
    await probe.start()
    await consumer.start()
    try:
        end = await (consumer if visible_now else probe).end_offsets(tps)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: list[ConsumerRecord[bytes, bytes]] = []
        async with asyncio.timeout(30):
            while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
                for messages in (await consumer.getmany(*tps, timeout_ms=200)).values():
                    got += messages
        return got
    finally:
        await consumer.stop()
        await probe.stop()


async def sigkill_mid_file(settings: Settings, *args: str, n: int, cwd: Path) -> int:
    """Start the producer on ``args`` (an input of ``n`` records, published slowly enough to be
    caught: give ``--producer.max-records-per-s``), SIGKILL it once at least 40 % of the records
    are committed while records of its open transaction are already in the log, and return how
    many were committed. The watchers are ready before the producer starts."""
    progress = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    sent = AIOKafkaConsumer(
        **{**consumer_kwargs(settings.kafka, group_id=None), "isolation_level": "read_uncommitted"}
    )
    await progress.start()
    await sent.start()
    committed = seen = 0
    proc: subprocess.Popen[bytes] | None = None
    try:
        progress_tp = TopicPartition(settings.topics.producer_progress, 0)
        prompt_tps = [TopicPartition(settings.topics.prompts, p) for p in range(settings.topics.partitions)]
        progress.assign([progress_tp])
        sent.assign(prompt_tps)
        await progress.seek_to_beginning(progress_tp)
        await sent.seek_to_beginning(*prompt_tps)
        # ready: each watcher has resolved its start offsets (metadata and ListOffsets answered)
        await progress.position(progress_tp)
        for tp in prompt_tps:
            await sent.position(tp)
        proc = spawn(settings, *args, cwd=cwd)

        async def poll() -> None:
            nonlocal committed, seen
            for messages in (await progress.getmany(timeout_ms=30)).values():
                for m in messages:
                    committed = decode(m.value or b"", ProgressRecord).published
            seen += sum(len(v) for v in (await sent.getmany(timeout_ms=30)).values())

        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the producer never reached the middle of the file"
            assert proc.poll() is None, f"the producer ended before it was killed ({committed=}, {seen=})"
            await poll()
            if committed >= n * 0.4 and seen > committed:
                os.kill(proc.pid, signal.SIGSTOP)  # freeze it, then look again: a commit may have landed
                for _ in range(5):
                    await poll()
                if seen > committed:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
                os.kill(proc.pid, signal.SIGCONT)
    finally:
        await progress.stop()
        await sent.stop()
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            await asyncio.to_thread(proc.wait, 10)
    assert proc.returncode == -signal.SIGKILL
    assert n * 0.4 <= committed < n
    return committed
