"""The simulated fleet: ``n`` SGLang-API simulators in the benchmark's own event loop, and the
sampler that snapshots their stats and measures the loop's lag while a phase runs."""

from __future__ import annotations

import asyncio
import contextlib
import time

from bench.analysis import Sample
from simulator import SimulatedServer, SimulatorProfile

__all__ = ["Sampler", "SimFleet"]


class SimFleet:
    """``n`` SGLang-API simulators in this event loop."""

    def __init__(self, n: int, profile: SimulatorProfile, time_scale: float) -> None:
        self.profile = profile
        self.time_scale = time_scale
        self.servers = [SimulatedServer(profile, time_scale=time_scale, port=0) for _ in range(n)]

    @property
    def urls(self) -> list[str]:
        """Base URLs, in server order."""
        return [s.url for s in self.servers]

    async def start(self) -> None:
        """Start every server (ports are chosen now and kept across restarts)."""
        for s in self.servers:
            await s.start()

    async def restart(self) -> None:
        """Fresh engines on the same ports: counters, clocks and warm-up start again."""
        for s in self.servers:
            await s.restart()

    async def stop(self) -> None:
        """Stop every server that runs."""
        for s in self.servers:
            if s.running:
                await s.stop()

    def sample(self) -> Sample:
        """Every server's stats, now."""
        return Sample(time.monotonic(), tuple(s.stats() for s in self.servers))


class Sampler:
    """Snapshots the fleet every ``interval_s`` wall seconds and measures the event loop's lag
    (how late a 20 ms sleep wakes up: the delay the simulators add to every answer)."""

    def __init__(self, fleet: SimFleet, interval_s: float) -> None:
        self.fleet = fleet
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.lags: list[tuple[float, float]] = []
        """(monotonic time, lag in seconds) pairs."""
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start sampling (call from the running loop)."""
        self.samples.append(self.fleet.sample())
        self._tasks = [asyncio.create_task(self._sample()), asyncio.create_task(self._lag())]

    def mark(self) -> Sample:
        """Take a snapshot now (e.g. exactly at t0) and keep it."""
        s = self.fleet.sample()
        self.samples.append(s)
        return s

    async def stop(self) -> None:
        """Stop sampling after one last snapshot."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.mark()

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.mark()

    async def _lag(self) -> None:
        period = 0.02
        while True:
            before = time.monotonic()
            await asyncio.sleep(period)
            now = time.monotonic()
            self.lags.append((now, max(0.0, now - before - period)))
