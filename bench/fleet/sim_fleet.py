"""The simulated fleet: ``n`` SGLang-API simulators in the benchmark's own event loop, or each in a
process of its own (:mod:`bench.fleet.sim_worker`: for fleets whose answers one event loop cannot
keep up with), and the sampler that snapshots their stats and measures the loop's lag while a
phase runs."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import pickle
import socket
import time
from dataclasses import fields
from pathlib import Path

import aiohttp

from bench.analysis import Sample
from bench.children import Children
from simulator import SimulatedServer, SimulatorProfile, SimulatorStats

__all__ = ["Sampler", "SimFleet"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SimFleet:
    """``n`` SGLang-API simulators: in this event loop, or with ``processes`` one process each."""

    def __init__(
        self, n: int, profile: SimulatorProfile, time_scale: float, *, processes: bool = False
    ) -> None:
        self.profile = profile
        self.time_scale = time_scale
        self.processes = processes
        self.servers = (
            [] if processes else [SimulatedServer(profile, time_scale=time_scale, port=0) for _ in range(n)]
        )
        self._ports = [free_port() for _ in range(n)] if processes else []
        self._children = Children()
        self._names = [f"sim-{k}" for k in range(n)] if processes else []
        self._http: aiohttp.ClientSession | None = None

    @property
    def urls(self) -> list[str]:
        """Base URLs, in server order."""
        if self.processes:
            return [f"http://127.0.0.1:{port}" for port in self._ports]
        return [s.url for s in self.servers]

    async def start(self) -> None:
        """Start every server (ports are chosen now and kept across restarts)."""
        if self.processes:
            self._http = aiohttp.ClientSession()
            await self._spawn()
            return
        for s in self.servers:
            await s.start()

    async def restart(self) -> None:
        """Fresh engines on the same ports: counters, clocks and warm-up start again."""
        if self.processes:
            self._children.terminate(self._names, grace_s=20)
            await self._spawn()
            return
        for s in self.servers:
            await s.restart()

    async def stop(self) -> None:
        """Stop every server that runs."""
        if self.processes:
            self._children.terminate_all(grace_s=20)
            if self._http is not None:
                await self._http.close()
            return
        for s in self.servers:
            if s.running:
                await s.stop()

    async def sample(self) -> Sample:
        """Every server's stats, now (a process's from its ``/simulator/stats``)."""
        if not self.processes:
            return Sample(time.monotonic(), tuple(s.stats() for s in self.servers))
        stats = await asyncio.gather(*(self._stats(url) for url in self.urls))
        return Sample(time.monotonic(), tuple(stats))

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the simulator processes so far (0 in this event loop)."""
        return self._children.cpu_seconds(self._names)

    async def _stats(self, url: str) -> SimulatorStats:
        assert self._http is not None
        async with self._http.get(f"{url}/simulator/stats") as response:
            response.raise_for_status()
            data = await response.json()
        return SimulatorStats(**{f.name: data[f.name] for f in fields(SimulatorStats)})

    async def _spawn(self) -> None:
        blob = base64.b64encode(pickle.dumps(self.profile)).decode()
        for name, port in zip(self._names, self._ports, strict=True):
            argv = ["-m", "bench.fleet.sim_worker", str(port), str(self.time_scale), blob]
            self._children.spawn(name, argv, {}, Path(os.devnull))
        deadline = time.monotonic() + 60
        for url in self.urls:
            while True:
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    await self._stats(url)
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"simulator process at {url} did not answer in 60 s")
                await asyncio.sleep(0.1)


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

    async def start(self) -> None:
        """Start sampling (call from the running loop)."""
        self.samples.append(await self.fleet.sample())
        self._tasks = [asyncio.create_task(self._sample()), asyncio.create_task(self._lag())]

    async def mark(self) -> Sample:
        """Take a snapshot now (e.g. exactly at t0) and keep it."""
        s = await self.fleet.sample()
        self.samples.append(s)
        return s

    async def stop(self) -> None:
        """Stop sampling after one last snapshot."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.mark()

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.mark()

    async def _lag(self) -> None:
        period = 0.02
        while True:
            before = time.monotonic()
            await asyncio.sleep(period)
            now = time.monotonic()
            self.lags.append((now, max(0.0, now - before - period)))
