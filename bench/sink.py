"""Benchmark of the S3 sink (``python -m sinks.s3``) on the local stack.

For each batch size (``--flush-records``) it creates fresh topics, produces ``--records``
completion records of about ``--record-bytes`` bytes (text of random words, so zstd compresses it
about as much as real model output, not 100x), starts the sink as a subprocess and measures:

* throughput: records and uncompressed MB per second from the moment every partition was
  recovered (the sink is ready) to the moment every offset is committed (so in S3);
* the sink process's CPU seconds in that window (``/proc/<pid>/stat``): records per CPU second
  does not depend on what else runs on the machine, unlike the wall-clock rate;
* the sink process's RSS when ready and its peak (``VmRSS``, ``VmHWM`` from ``/proc/<pid>/status``);
* objects written and the compression ratio.

``idle_flush_s`` is set to 0.5 s so the tail batches do not wait 10 s. Topics and objects are
deleted afterwards. Usage (the local stack must be up: ``python -m launch.stack up kafka s3``)::

    .venv/bin/python bench/sink.py --records 30000 --flush-records 100 1000 5000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient  # noqa: E402

from bench.children import python_argv, start  # noqa: E402
from streams.config import Settings  # noqa: E402
from streams.environment import settings_to_env  # noqa: E402
from streams.kafka import client_kwargs, consumer_kwargs, end_offsets, producer_kwargs  # noqa: E402
from streams.records import (  # noqa: E402
    CompletionRecord,
    PromptMetadata,
    PromptRecord,
    Timings,
    Usage,
    encode,
    key_of,
)
from streams.runs.naming import sink_group as group_id  # noqa: E402
from streams.storage import s3_client  # noqa: E402
from streams.topics import TopicSpec, ensure_topics  # noqa: E402


def make_values(n: int, size: int, run_id: str, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """``n`` (key, encoded CompletionRecord) pairs of about ``size`` bytes each."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10))) for _ in range(5000)]
    out: list[tuple[bytes, bytes]] = []
    for i in range(n):
        rid = f"bench-{i:07d}"
        words: list[str] = []
        length = 0
        while length < size - 700:
            w = rng.choice(vocab)
            words.append(w)
            length += len(w) + 1
        record = CompletionRecord(
            id=rid,
            run_id=run_id,
            prompt=PromptRecord(
                id=rid,
                messages=[{"role": "user", "content": f"Question {i}: explain topic {rng.choice(vocab)}."}],
                metadata=PromptMetadata(source="bench", line=i + 1),
            ),
            content=" ".join(words),
            finish_reason="stop",
            usage=Usage(prompt_tokens=30, completion_tokens=length // 4, reasoning_tokens=0),
            timings=Timings(queued_s=0.1, latency_s=3.0, started_at=1.7e9, finished_at=1.7e9 + 3),
            server="http://127.0.0.1:30000",
            model="bench",
            params={"max_tokens": 4096},
        )
        out.append((key_of(rid), encode(record)))
    return out


@dataclass
class Result:
    flush_records: int
    records: int
    mb: float
    seconds: float
    peak_rss_mb: float
    ready_rss_mb: float
    cpu_s: float
    objects: int
    compressed_mb: float


async def produce(settings: Settings, values: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        for key, value in values:
            await producer.send(settings.topics.completions, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


async def committed_offsets(consumer: AIOKafkaConsumer, topic: str, ends: dict[int, int]) -> bool:
    """Whether the group of ``consumer`` has committed every partition's end offset of ``topic``."""
    return all([await consumer.committed(TopicPartition(topic, p)) == end for p, end in ends.items()])


def spawn_sink(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``python -m sinks.s3`` with ``env`` (its whole environment), its output in ``log`` (truncated)."""
    with log.open("wb") as out:
        return start(
            python_argv(["-m", "sinks.s3"]),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=None,
            die_with_parent=False,
        )


def read_log(log: Path) -> str:
    return log.read_text(errors="replace")


def rss_mb(pid: int, field: str = "VmHWM") -> float:
    """``VmHWM`` (peak resident set) or ``VmRSS`` (current) of ``pid`` in MB."""
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"{field}:\s+(\d+) kB", text)
    return int(match[1]) / 1024 if match else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def cleanup(settings: Settings) -> None:
    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="bench-admin"))
    await admin.start()
    try:
        await admin.delete_topics([settings.topics.completions, settings.topics.errors])
    finally:
        await admin.close()
    s3 = s3_client(settings.s3)
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=settings.s3.bucket, Prefix=settings.s3.prefix + "/"
    ):
        if page.get("Contents"):
            s3.delete_objects(
                Bucket=settings.s3.bucket, Delete={"Objects": [{"Key": o["Key"]} for o in page["Contents"]]}
            )


async def run_one(base: Settings, flush_records: int, values: list[tuple[bytes, bytes]], log: Path) -> Result:
    tag = uuid.uuid4().hex[:8]
    settings = base.model_copy(
        update={
            "run_id": f"bench-{tag}",
            "topics": base.topics.model_copy(
                update={"completions": f"bench-c-{tag}", "errors": f"bench-e-{tag}"}
            ),
            "s3": base.s3.model_copy(update={"prefix": f"bench-{tag}"}),
            "sink": base.sink.model_copy(
                update={
                    "flush_records": flush_records,
                    "idle_flush_s": 0.5,
                    "session_timeout_ms": 6000,
                    "rebalance_timeout_ms": 6000,
                    "heartbeat_interval_ms": 500,
                }
            ),
        }
    )
    t = settings.topics
    await ensure_topics(settings, [TopicSpec(n, t.partitions, 1) for n in (t.completions, t.errors)])
    await produce(settings, values)
    ends = await end_offsets(settings.kafka, t.completions, partitions=list(range(t.partitions)))
    env = {**os.environ, **settings_to_env(settings)}
    proc = spawn_sink(env, log)
    try:
        # The clock starts when the sink has recovered all its partitions (interpreter start-up,
        # group join and recovery excluded) and stops when every offset is committed, i.e. in S3.
        while read_log(log).count("recovered ") < 2 * t.partitions:
            if proc.poll() is not None:
                raise RuntimeError(f"sink exited {proc.returncode}: {read_log(log)[-2000:]}")
            await asyncio.sleep(0.02)
        started = time.monotonic()
        cpu_start = cpu_seconds(proc.pid)
        ready_rss = rss_mb(proc.pid, "VmRSS")
        watcher = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=group_id(settings)))
        await watcher.start()
        try:
            while not await committed_offsets(watcher, t.completions, ends):
                if proc.poll() is not None:
                    raise RuntimeError(f"sink exited {proc.returncode}: {read_log(log)[-2000:]}")
                await asyncio.sleep(0.2)
        finally:
            await watcher.stop()
        elapsed = time.monotonic() - started
        cpu = cpu_seconds(proc.pid) - cpu_start
        rss = rss_mb(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    s3 = s3_client(settings.s3)
    objects = compressed = 0
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=settings.s3.bucket, Prefix=settings.s3.prefix + "/"
    ):
        for o in page.get("Contents", []):
            objects += 1
            compressed += o["Size"]
    await cleanup(settings)
    raw = sum(len(v) for _, v in values)
    return Result(
        flush_records, len(values), raw / 1e6, elapsed, rss, ready_rss, cpu, objects, compressed / 1e6
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=30000)
    parser.add_argument("--record-bytes", type=int, default=6000)
    parser.add_argument("--flush-records", type=int, nargs="+", default=[100, 1000, 5000])
    args = parser.parse_args()
    base = Settings()
    log = Path(tempfile.gettempdir()) / "kafkagen-bench-sink.log"
    values = make_values(args.records, args.record_bytes, "bench")
    avg = sum(len(v) for _, v in values) / len(values)
    print(f"records: {len(values)} x {avg:.0f} B (uncompressed), {base.topics.partitions} partitions")
    print()
    print(
        "| flush_records | records/s | MB/s (uncompressed) | seconds | sink CPU s | records per CPU s "
        "| RSS ready → peak MB | objects | S3 MB (zstd) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for flush in args.flush_records:
        r = await run_one(base, flush, values, log)
        busy = max(r.seconds, 1e-6)
        print(
            f"| {flush} | {r.records / busy:,.0f} | {r.mb / busy:.1f} | {busy:.2f} | {r.cpu_s:.1f} "
            f"| {r.records / max(r.cpu_s, 1e-6):,.0f} | {r.ready_rss_mb:.0f} → {r.peak_rss_mb:.0f} "
            f"| {r.objects} | {r.compressed_mb:.1f} (ratio {r.mb / r.compressed_mb:.1f}x) |",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
