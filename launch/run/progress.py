"""The main job's progress, in prompts: collected (:mod:`launch.status.collect`) until the run is done.

Counts are prompts and records, never Kafka offsets; done is decided on offsets, exactly
(:attr:`launch.status.shape.RunStatus.done`). A live view on a terminal, else one plain line every
``interval_s`` seconds (default 10) and a final line, each starting with the local time
(``HH:MM:SS``): docs/main-job.md, "Progress".
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from aiokafka.errors import KafkaError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bars

from launch.status.collect import Collector, quiet_kafka_logs
from launch.status.shape import GateView, RunStatus
from launch.status.view import clock, eta_text, progress_line
from streams.config import Settings
from streams.errors import DeadlineError

__all__ = [
    "PLAIN_INTERVAL_S",
    "Progress",
    "from_status",
    "progress",
    "wait_until_done",
]

PLAIN_INTERVAL_S = 10.0
"""seconds between two plain progress lines when stdout is not a tty."""

POLL_S = 1.0
"""seconds between two collections (done is noticed within about this long)."""


@dataclass
class Progress:
    """Where the run stands: offsets (``prompts_end``, ``generated``, ``results_end``, ``in_s3``:
    the exact done test) and prompts (``published``, ``results``, ``in_s3_records``)."""

    prompts_end: int = 0
    """the prompts topic's end offsets, summed (transaction markers included)."""
    generated: int = 0
    """the generation group's committed offsets on the prompts topic, summed."""
    results_end: int = 0
    """the completions and errors topics' end offsets, summed (one offset per record)."""
    in_s3: int = 0
    """the sink group's committed offsets on them, summed."""
    published: int = 0
    """prompts published (the producer's resume points; offsets when there are none)."""
    results: int = 0
    """completion and error records written."""
    load_samples: list[float] = field(default_factory=list)
    """the fleet's mean occupancy (0..1), one sample per collection while generating."""
    already_done: bool = False
    """the run was complete before this invocation generated anything (a re-run)."""
    halted: GateView | None = None
    """the quality gate halted the run (its reason and fix): waiting stopped there."""
    status: RunStatus | None = None
    """the last status collected."""

    @property
    def done(self) -> bool:
        return self.prompts_end > 0 and self.generated >= self.prompts_end and self.in_s3 >= self.results_end


def from_status(status: RunStatus) -> Progress:
    """The :class:`Progress` of a collected status."""
    lag = status.lag
    sink_end = status.prompts.results
    return Progress(
        prompts_end=sum(p.end_offset for p in lag.partitions),
        generated=sum(min(p.committed_offset, p.end_offset) for p in lag.partitions),
        results_end=sink_end,
        in_s3=sink_end - lag.sink.lag,
        published=status.prompts.published,
        results=status.prompts.results,
        halted=status.gate if status.state == "halted" else None,
        status=status,
    )


async def progress(settings: Settings) -> Progress:
    """The run's progress now (one collection, servers not asked).

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer.
    """
    quiet_kafka_logs()
    async with Collector(settings, probe_servers=False, timeout_s=60.0) as collector:
        return from_status(await collector.collect())


async def _halt_past_deadline(settings: Settings, status: RunStatus) -> None:
    """Halt the run when its projected finish passes ``gate.deadline`` (docs/budgets.md); a Kafka
    error is left to the next collection."""
    from launch.gate.control import halt_if_late

    p = status.prompts
    if settings.gate.deadline is None or status.state != "running":
        return
    with contextlib.suppress(TimeoutError, KafkaError, OSError):
        await halt_if_late(
            settings,
            done=p.results,
            total=p.published,
            results_per_s=status.rates.completions_per_s,
            by=f"kafkagen run@{socket.gethostname()}",
        )


def _occupancy(status: RunStatus) -> float | None:
    """The mean occupancy over the servers that tell it: 1 for a server with requests waiting (it
    runs all that its running limit or its KV cache allows; SGLang's automatic running limit is in
    the thousands, so the cache is usually what binds), else running / running limit."""
    values = [s.occupancy for s in status.servers if s.occupancy is not None]
    return sum(values) / len(values) if values else None


class _Display:
    """Live bars on a terminal, else one plain line per ``interval_s`` (and a final one); nothing
    when not ``show``."""

    def __init__(self, show: bool, interval_s: float, out: TextIO) -> None:
        self.out = out
        self.live = show and out.isatty()
        self.plain = show and not self.live
        self.interval_s = interval_s
        self._last: float | None = None
        self._bars: Bars | None = None
        if self.live:
            self._bars = Bars(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[note]}"),
                console=Console(file=out),
                transient=False,
            )
            self._gen = self._bars.add_task("generated", total=None, note="")
            self._s3 = self._bars.add_task("in S3    ", total=None, note="")
            self._bars.start()

    def show(self, status: RunStatus, *, final: bool = False) -> None:
        p = status.prompts
        if self._bars is not None:
            load = progress_line(status).split("; ", 1)[1]
            if p.results == 0:  # no S3 total yet: not "0/0"
                note = "waiting for the first results"
                self._bars.update(self._gen, total=p.published, completed=0, note=note)
                self._bars.update(self._s3, total=None, completed=0, note=load)
                return
            note = f"{status.rates.completions_per_s:.1f}/s, {eta_text(status)}"
            self._bars.update(self._gen, total=p.published, completed=min(p.results, p.published), note=note)
            self._bars.update(self._s3, total=p.results, completed=p.in_s3, note=load)
        elif self.plain:
            now = time.monotonic()
            if final or self._last is None or now - self._last >= self.interval_s:
                self._last = now
                print(f"{clock()} progress: {progress_line(status)}", file=self.out, flush=True)

    def note(self, text: str) -> None:
        """A line outside the progress (a Kafka outage), at most once per interval when plain."""
        if self._bars is not None:
            self._bars.console.print(text)
        elif self.plain:
            print(f"{clock()} {text}", file=self.out, flush=True)

    def close(self) -> None:
        if self._bars is not None:
            self._bars.stop()


async def wait_until_done(
    settings: Settings,
    timeout_s: float | None,
    show: bool,
    *,
    interval_s: float = PLAIN_INTERVAL_S,
    out: TextIO | None = None,
) -> Progress:
    """Collect every second until the run is done (or halted by its quality gate), showing the
    progress in prompts on ``out`` (default stdout; how: docs/main-job.md, "Progress").

    Returns:
        the last :class:`Progress`: done, or with ``halted`` set (the gate's reason and fix) when
        the control topic says the run is halted.

    Raises:
        DeadlineError: not done within ``timeout_s`` seconds.
        TimeoutError: Kafka unreachable when ``timeout_s`` ran out.
    """
    quiet_kafka_logs()
    display = _Display(show, interval_s, out or sys.stdout)
    samples: list[float] = []
    deadline = time.monotonic() + timeout_s if timeout_s else None
    first = True
    outage_said = 0.0
    collector = Collector(settings, servers=settings.servers)
    try:
        while True:
            try:
                status = await collector.collect()
            except (TimeoutError, KafkaError, OSError) as exc:  # e.g. the broker restarting
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"run {settings.run_id}: Kafka unreachable: {exc!r}") from None
                if time.monotonic() - outage_said >= interval_s:
                    outage_said = time.monotonic()
                    display.note(
                        f"progress: Kafka at {settings.kafka.bootstrap_servers} does not answer; waiting"
                    )
                await collector.stop()
                await asyncio.sleep(2.0)
                continue
            now = from_status(status)
            busy = _occupancy(status)
            if busy is not None and now.generated < now.prompts_end:
                samples.append(busy)
            if now.done or now.halted is not None:
                display.show(status, final=True)
                now.load_samples = samples
                now.already_done = first and now.done
                return now
            display.show(status)
            first = False
            await _halt_past_deadline(settings, status)
            if deadline is not None and time.monotonic() > deadline:
                raise DeadlineError(
                    f"run {settings.run_id} not done after {timeout_s:.0f} s: {progress_line(status)}"
                )
            await asyncio.sleep(POLL_S)
    finally:
        display.close()
        await collector.stop()
