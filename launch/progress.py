"""The main job's progress: offsets of the run's topics and the fleet's load, polled until done.

"Generated" is the generation group's committed offsets against the prompts topic's end; "in
S3" the sink group's against the completions and errors topics' ends (Kafka offsets, not
records: a transactional topic's markers add one offset per partition and transaction, so both
reach their ends a little above the record counts, together).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from tqdm import tqdm

from consumers.client import ServerClient
from streams import naming
from streams.config import Settings
from streams.errors import DeadlineError
from streams.kafka import consumer_kwargs

__all__ = ["FleetLoad", "Progress", "fleet_load", "progress", "wait_until_done"]


@dataclass
class Progress:
    """Counts in Kafka offsets (a transactional topic's markers make them slightly larger than
    record counts; they reach the end together)."""

    prompts_end: int = 0
    generated: int = 0
    results_end: int = 0
    in_s3: int = 0
    load_samples: list[float] = field(default_factory=list)
    already_done: bool = False
    """the run was complete before this invocation generated anything (a re-run)."""

    @property
    def done(self) -> bool:
        return self.prompts_end > 0 and self.generated >= self.prompts_end and self.in_s3 >= self.results_end


async def _offsets(settings: Settings, group: str, topics: Sequence[str]) -> tuple[int, int]:
    """(sum of ``group``'s committed offsets, sum of end offsets) over every partition of ``topics``.

    One client per call, polled every second: the group's own consumer reads both, the end offsets
    read_committed (last stable offsets) as :func:`streams.kafka.end_offsets` does. The run made its
    topics with ``topics.partitions`` partitions (:mod:`launch.run`), so no metadata is asked for.
    """
    tps = [TopicPartition(t, p) for t in topics for p in range(settings.topics.partitions)]
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=group))
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
        committed = sum([await consumer.committed(tp) or 0 for tp in tps])
    finally:
        await consumer.stop()
    return committed, sum(ends.values())


async def progress(settings: Settings) -> Progress:
    """The run's progress now, from its groups' committed offsets and its topics' end offsets.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer.
    """
    t = settings.topics
    generated, prompts_end = await _offsets(settings, naming.generate_group(settings), [t.prompts])
    in_s3, results_end = await _offsets(settings, naming.sink_group(settings), [t.completions, t.errors])
    return Progress(prompts_end=prompts_end, generated=generated, results_end=results_end, in_s3=in_s3)


@dataclass
class FleetLoad:
    """Running and queued requests summed over the servers that report them, and the mean
    occupancy over them: 1 for a server with requests waiting (it runs all that its running limit
    or its KV cache allows; SGLang's automatic running limit is in the thousands, so the cache is
    usually what binds), else running / running limit (None if no server tells)."""

    running: int = 0
    queued: int = 0
    occupancy: float | None = None

    def describe(self) -> str:
        busy = "?" if self.occupancy is None else f"{self.occupancy:.0%}"
        return f"running {self.running}, queued {self.queued}, slots busy {busy}"


async def fleet_load(clients: list[ServerClient]) -> FleetLoad:
    """The fleet's load now (:class:`FleetLoad`); servers that do not report it are left out."""
    fleet = FleetLoad()
    ratios = []
    for client in clients:
        load = await client.load()
        if load is None:
            continue
        fleet.running += load.running
        fleet.queued += load.queued
        slots = client.info.max_running_requests if client.info else None
        if load.queued > 0:
            ratios.append(1.0)  # work waits on the server: it runs all it can (KV-cache bound)
        elif slots:
            ratios.append(min(1.0, load.running / slots))
    fleet.occupancy = sum(ratios) / len(ratios) if ratios else None
    return fleet


async def wait_until_done(settings: Settings, timeout_s: float | None, show: bool) -> Progress:
    """Poll offsets every second until the run is done; draw two progress bars on stderr.

    Raises:
        TimeoutError: not done within ``timeout_s`` seconds.
    """
    clients = [ServerClient(u, settings.generation) for u in settings.servers]
    # Kafka offsets, not records: the producer's transaction markers add one offset per partition
    # and transaction, so "generated" runs a little above the prompt count; "to S3" is out of the
    # results written so far, a total that grows as completions arrive.
    gen_bar = tqdm(desc="generated", unit="offset", disable=not show, dynamic_ncols=True)
    s3_bar = tqdm(desc="to S3    ", unit="offset", disable=not show, dynamic_ncols=True)
    first = True
    samples: list[float] = []
    deadline = time.monotonic() + timeout_s if timeout_s else None
    try:
        for client in clients:
            await client.describe()
        while True:
            try:
                now = await progress(settings)
            except (TimeoutError, KafkaError, OSError) as exc:  # e.g. the broker restarting
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"run {settings.run_id}: Kafka unreachable: {exc}") from None
                await asyncio.sleep(2.0)
                continue
            load = await fleet_load(clients)
            if load.occupancy is not None and now.generated < now.prompts_end:
                samples.append(load.occupancy)
            gen_bar.set_postfix_str(load.describe(), refresh=False)
            for bar, n, total in (
                (gen_bar, now.generated, now.prompts_end),
                (s3_bar, now.in_s3, now.results_end),
            ):
                bar.total = total
                bar.n = min(n, total)
                bar.refresh()
            if now.done:
                now.load_samples = samples
                now.already_done = first
                return now
            first = False
            if deadline is not None and time.monotonic() > deadline:
                raise DeadlineError(f"run {settings.run_id} not done after {timeout_s:.0f} s: {now}")
            await asyncio.sleep(1.0)
    finally:
        gen_bar.close()
        s3_bar.close()
        for client in clients:
            await client.aclose()
