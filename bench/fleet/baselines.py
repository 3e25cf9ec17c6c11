"""Phases "baseline" and "strong": the old job's client (:mod:`bench.baseline`) in its own
process, in fixed-concurrency or strong mode, against the restarted fleet."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from bench.analysis import first_attempt_rid
from bench.fleet.context import BenchContext, PhaseOutcome, print_progress
from bench.fleet.cpu import CpuClock
from bench.fleet.sim_fleet import Sampler
from consumers.servers import ServerClient

__all__ = ["run_baseline"]


async def run_baseline(ctx: BenchContext, *, strong: bool = False) -> PhaseOutcome:
    """Phase (b): the old job's client (:mod:`bench.baseline`) in its own process; with
    ``strong``, its strong mode instead (phase "strong": per-server running limit + queue,
    least-outstanding routing)."""
    args, fleet = ctx.args, ctx.fleet
    name = "strong" if strong else "baseline"
    await fleet.restart()
    client = ServerClient(fleet.urls[0], ctx.base.generation)
    bodies = []
    for p in ctx.prompts:
        body = client.request_body(p, first_attempt_rid(ctx.run_id, p))
        body["model"] = fleet.profile.served_model_name  # what the consumer sends after discovery
        bodies.append(body)
    await client.aclose()
    spec: dict[str, Any] = {"servers": fleet.urls, "concurrency": args.baseline_concurrency, "bodies": bodies}
    if strong:
        spec |= {
            "mode": "strong",
            "queue": args.strong_queue,
            "running_fallback": fleet.profile.max_running_requests,
        }
    inp, out = ctx.logdir / f"{name}-input.json", ctx.logdir / f"{name}-output.json"
    inp.write_text(json.dumps(spec))

    sampler = Sampler(fleet, args.sample_interval)
    await sampler.start()
    cpu = CpuClock(ctx.broker, ctx.fleet.cpu_seconds)
    proc = ctx.children.spawn(
        name,
        ["-m", "bench.baseline", "--input", str(inp), "--output", str(out)],
        {},
        ctx.logdir / f"{name}.log",
    )
    offset = time.time() - time.monotonic()
    spawned = last_print = time.monotonic()
    while proc.poll() is None:
        await asyncio.sleep(0.5)
        if time.monotonic() - last_print >= 10:
            last_print = time.monotonic()
            s = sampler.samples[-1]
            print_progress(ctx, name, s, spawned, sum(x.requests_finished for x in s.stats))
    ctx.children.procs.pop(name, None)
    if proc.returncode != 0:
        raise RuntimeError(
            f"the {name} client exited with {proc.returncode}; see {ctx.logdir / f'{name}.log'}"
        )
    result: dict[str, Any] = json.loads(out.read_text())
    usage = cpu.since(float(result["cpu_run_s"]))
    await sampler.stop()
    first: dict[str, float] = {}
    server_of: dict[str, int] = {}
    failures = 0
    for index, server, end, status, _tokens in result["requests"]:
        if status == 200:
            first[ctx.prompts[index].id] = end
            server_of[ctx.prompts[index].id] = server
        else:
            failures += 1
    t0_epoch = float(result["t0"])
    notes = ["client CPU from its t0 (after loading the prompts)"]
    if strong:
        notes.append(f"per-server limits (running + queue): {result['limits']}")
    return PhaseOutcome(
        name,
        t0_epoch,
        t0_epoch - offset,
        first,
        server_of,
        len(result["requests"]),
        failures,
        sampler.samples,
        sampler.lags,
        usage,
        notes,
    )
