"""The baseline client: how the real job generated before kafkagen.

One asyncio client, a fixed total concurrency (an :class:`asyncio.Semaphore` of 48), requests
spread round-robin over the servers, prompts read from memory, no Kafka. Every prompt becomes a
task up front; a task takes the semaphore, then the next server of the round-robin cycle, then
sends its request and waits for the whole answer. That is the structure of the old job; it keeps
48 requests in flight over the fleet whatever each server could take.

Favourable to the baseline on purpose: one keep-alive connection pool sized to the concurrency
(no connection churn), the answer is parsed but not written anywhere, no retries are needed
(the simulated fleet injects no faults; a failure is counted, not retried).

Run as a separate process by :mod:`bench.fleet`::

    python -m bench.baseline --input IN.json --output OUT.json

**Strong mode** (``"mode": "strong"``): the best a plain client can do. Each server
gets its own limit, its running limit plus a standing queue (``"queue"``); the running limit is
learned as a plain client would, from ``/server_info``: the DP ranks'
``internal_states[*].effective_max_running_requests_per_dp`` summed where the server reports
them (:func:`consumers.servers.sglang.sglang_running_limit`), else the operator's figure
(``"running_fallback"``, the profile's ``max_running_requests``). Prompts are dispatched in order,
each to the server with the fewest requests outstanding that has room (:class:`LeastOutstanding`),
the moment one has room. Same bodies, no Kafka; its HTTP client is aiohttp (one keep-alive pool
of all the limits' connections), not httpx: httpx 0.28's pool spends CPU per request that grows
with the number of connections (11.6 ms per completion with 136 connections at 400 completions/s
in the first rate matrix, 1.9 ms with the fixed mode's 48), which made the "best" client the
slowest. The fixed mode keeps the old job's httpx.

``IN.json``: ``{"servers": [url, ...], "concurrency": 48, "bodies": [chat request body, ...]}``,
plus for strong mode ``"mode": "strong", "queue": 4, "running_fallback": 16``.
``OUT.json``: ``{"t0": epoch, "t_end": epoch, "cpu_s": float, "cpu_run_s": float, "limits":
[int, ...], "requests": [[index, server, end_epoch, status, completion_tokens], ...]}``;
``cpu_s`` is the whole process's CPU seconds, ``cpu_run_s`` those from t0 on (after loading the
input); ``status`` is the HTTP status, -1 for a transport error.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from consumers.servers.sglang import sglang_running_limit

__all__ = [
    "BaselineResult",
    "LeastOutstanding",
    "RequestOutcome",
    "learn_running_limit",
    "main",
    "run_baseline",
    "run_strong",
]


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """One prompt's request: which server, when its answer arrived (epoch seconds), how it went."""

    index: int
    server: int
    end_epoch: float
    status: int
    completion_tokens: int


@dataclass(slots=True)
class BaselineResult:
    """What the baseline did: start and end (epoch seconds) and every request's outcome."""

    t0: float
    t_end: float = 0.0
    requests: list[RequestOutcome] = field(default_factory=list)


class LeastOutstanding:
    """Least-outstanding routing with a cap per server (pure; no I/O).

    :meth:`acquire` picks, among the servers below their limit, the one with the fewest
    requests outstanding (ties: the most room left, then the lowest index) and counts the
    request against it; :meth:`release` counts one back.
    """

    def __init__(self, limits: Sequence[int]) -> None:
        if not limits or min(limits) < 1:
            raise ValueError(f"need at least one server and every limit >= 1, got {list(limits)}")
        self.limits = list(limits)
        self.outstanding = [0] * len(limits)

    def acquire(self) -> int | None:
        """The server the next request goes to, or None when every server is at its limit."""
        room = [k for k, (n, cap) in enumerate(zip(self.outstanding, self.limits, strict=True)) if n < cap]
        if not room:
            return None
        k = min(room, key=lambda k: (self.outstanding[k], self.outstanding[k] - self.limits[k], k))
        self.outstanding[k] += 1
        return k

    def release(self, server: int) -> None:
        """One request to ``server`` has ended."""
        if self.outstanding[server] < 1:
            raise ValueError(f"server {server} has no request outstanding")
        self.outstanding[server] -= 1


def learn_running_limit(server_info: dict[str, Any] | None, fallback: int) -> int:
    """A server's running limit as a plain client learns it from SGLang's ``/server_info``
    (:func:`consumers.servers.sglang.sglang_running_limit`: the DP ranks'
    ``effective_max_running_requests_per_dp`` summed), else ``fallback``."""
    limit = sglang_running_limit(server_info or {})
    return limit if limit is not None and limit > 0 else fallback


def _client(max_connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(3600.0, connect=10.0))


async def _send(
    client: httpx.AsyncClient, url: str, index: int, server: int, body: dict[str, Any]
) -> RequestOutcome:
    """One request, waited for in full; a transport error is status -1."""
    status, tokens = -1, 0
    try:
        resp = await client.post(f"{url}/v1/chat/completions", json=body)
        status = resp.status_code
        if status == 200:
            tokens = int(resp.json()["usage"]["completion_tokens"])
    except httpx.HTTPError:
        pass
    return RequestOutcome(index, server, time.time(), status, tokens)


async def _send_aiohttp(
    session: aiohttp.ClientSession, url: str, index: int, server: int, body: dict[str, Any]
) -> RequestOutcome:
    """:func:`_send` over aiohttp."""
    status, tokens = -1, 0
    try:
        async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
            status = resp.status
            if status == 200:
                tokens = int((await resp.json())["usage"]["completion_tokens"])
    except (aiohttp.ClientError, TimeoutError):
        pass
    return RequestOutcome(index, server, time.time(), status, tokens)


async def run_baseline(
    bodies: Sequence[dict[str, Any]], servers: Sequence[str], *, concurrency: int = 48
) -> BaselineResult:
    """Send every body once, ``concurrency`` at a time in total, round-robin over ``servers``.

    Args:
        bodies: ``/v1/chat/completions`` request bodies, in prompt order.
        servers: base URLs of the inference servers.
        concurrency: requests in flight over the whole fleet (the old job's fixed 48).

    Returns:
        The start time, the time the last answer arrived, and each request's outcome.
    """
    if concurrency < 1 or not servers:
        raise ValueError("need concurrency >= 1 and at least one server")
    semaphore = asyncio.Semaphore(concurrency)
    cycle: Iterator[int] = itertools.cycle(range(len(servers)))
    async with _client(concurrency) as client:
        result = BaselineResult(t0=time.time())

        async def one(index: int, body: dict[str, Any]) -> None:
            async with semaphore:
                server = next(cycle)
                result.requests.append(await _send(client, servers[server], index, server, body))

        await asyncio.gather(*(one(i, body) for i, body in enumerate(bodies)))
        result.t_end = max((r.end_epoch for r in result.requests), default=result.t0)
    return result


async def run_strong(
    bodies: Sequence[dict[str, Any]], servers: Sequence[str], limits: Sequence[int]
) -> BaselineResult:
    """Send every body once, in order, each to the least-outstanding server below its limit.

    Args:
        bodies: ``/v1/chat/completions`` request bodies, in prompt order.
        servers: base URLs of the inference servers.
        limits: requests outstanding per server at most (running limit + standing queue).
    """
    router = LeastOutstanding(limits)
    room = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=sum(limits), limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=3600.0, connect=10.0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        result = BaselineResult(t0=time.time())

        async def one(index: int, server: int, body: dict[str, Any]) -> None:
            try:
                result.requests.append(await _send_aiohttp(session, servers[server], index, server, body))
            finally:
                router.release(server)
                room.set()

        tasks: set[asyncio.Task[None]] = set()
        for index, body in enumerate(bodies):
            while (server := router.acquire()) is None:
                room.clear()
                await room.wait()
            task = asyncio.create_task(one(index, server, body))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        while tasks:
            await asyncio.gather(*tasks)
        result.t_end = max((r.end_epoch for r in result.requests), default=result.t0)
    return result


async def _server_infos(servers: Sequence[str]) -> list[dict[str, Any] | None]:
    """Each server's ``/server_info`` JSON, None where it does not answer one."""
    out: list[dict[str, Any] | None] = []
    async with httpx.AsyncClient(timeout=10.0) as client:
        for url in servers:
            try:
                resp = await client.get(f"{url}/server_info")
                out.append(resp.json() if resp.status_code == 200 else None)
            except (httpx.HTTPError, ValueError):
                out.append(None)
    return out


async def _run(spec: dict[str, Any]) -> tuple[BaselineResult, list[int], float]:
    """The run ``spec`` asks for, the per-server limits (strong mode) and CPU seconds at t0."""
    bodies: list[dict[str, Any]] = spec["bodies"]
    servers: list[str] = spec["servers"]
    if spec.get("mode", "fixed") == "strong":
        infos = await _server_infos(servers)
        fallback = int(spec["running_fallback"])
        limits = [learn_running_limit(info, fallback) + int(spec["queue"]) for info in infos]
        cpu0 = _cpu_s()
        return await run_strong(bodies, servers, limits), limits, cpu0
    cpu0 = _cpu_s()
    return await run_baseline(bodies, servers, concurrency=int(spec["concurrency"])), [], cpu0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.baseline --input IN.json --output OUT.json``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.baseline", description=__doc__.split("\n")[0])
    parser.add_argument("--input", type=Path, required=True, help="servers, concurrency and bodies (JSON)")
    parser.add_argument("--output", type=Path, required=True, help="where to write the outcome (JSON)")
    args = parser.parse_args(argv)
    spec = json.loads(args.input.read_text())
    result, limits, cpu0 = asyncio.run(_run(spec))
    cpu = _cpu_s()
    out = {
        "t0": result.t0,
        "t_end": result.t_end,
        "cpu_s": cpu,
        "cpu_run_s": cpu - cpu0,
        "limits": limits,
        "requests": [
            [r.index, r.server, r.end_epoch, r.status, r.completion_tokens] for r in result.requests
        ],
    }
    args.output.write_text(json.dumps(out))
    failed = sum(1 for r in result.requests if r.status != 200)
    print(f"baseline: {len(result.requests)} requests, {failed} failed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
