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

``IN.json``: ``{"servers": [url, ...], "concurrency": 48, "bodies": [chat request body, ...]}``.
``OUT.json``: ``{"t0": epoch, "t_end": epoch, "cpu_s": float, "requests": [[index, server,
end_epoch, status, completion_tokens], ...]}``; ``status`` is the HTTP status, -1 for a
transport error.
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

import httpx

__all__ = ["BaselineResult", "RequestOutcome", "main", "run_baseline"]


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
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(3600.0, connect=10.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        result = BaselineResult(t0=time.time())

        async def one(index: int, body: dict[str, Any]) -> None:
            async with semaphore:
                server = next(cycle)
                status, tokens = -1, 0
                try:
                    resp = await client.post(f"{servers[server]}/v1/chat/completions", json=body)
                    status = resp.status_code
                    if status == 200:
                        tokens = int(resp.json()["usage"]["completion_tokens"])
                except httpx.HTTPError:
                    pass
                result.requests.append(RequestOutcome(index, server, time.time(), status, tokens))

        await asyncio.gather(*(one(i, body) for i, body in enumerate(bodies)))
        result.t_end = max((r.end_epoch for r in result.requests), default=result.t0)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.baseline --input IN.json --output OUT.json``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.baseline", description=__doc__.split("\n")[0])
    parser.add_argument("--input", type=Path, required=True, help="servers, concurrency and bodies (JSON)")
    parser.add_argument("--output", type=Path, required=True, help="where to write the outcome (JSON)")
    args = parser.parse_args(argv)
    spec = json.loads(args.input.read_text())
    bodies: list[dict[str, Any]] = spec["bodies"]
    result = asyncio.run(run_baseline(bodies, spec["servers"], concurrency=int(spec["concurrency"])))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = {
        "t0": result.t0,
        "t_end": result.t_end,
        "cpu_s": usage.ru_utime + usage.ru_stime,
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
