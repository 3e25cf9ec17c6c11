"""Phase "ours": one ``python -m consumers.generate`` process per simulated server, one consumer
group, a fresh topic per run; the prompts are published once the group has settled, and the
phase ends when every prompt's first answer is in the completions topic."""

from __future__ import annotations

import asyncio
import re
import shlex
import sys
import time
import uuid
from collections.abc import Sequence

import msgspec
from aiokafka.errors import CoordinatorLoadInProgressError, GroupCoordinatorNotAvailableError

from bench.analysis import ideal_makespan, refill_latencies
from bench.fleet.context import BenchContext, PhaseOutcome, print_progress
from bench.fleet.cpu import CpuClock, CpuUsage
from bench.fleet.kafka_io import CompletionView, group_assignment, publish_prompts, read_all_values
from bench.fleet.sim_fleet import Sampler
from streams.config import Settings
from streams.environment import settings_to_env
from streams.topics import ensure_topics, topic_specs

__all__ = ["PERIODIC_REPORT", "run_ours", "wait_group_ready"]

PERIODIC_REPORT = re.compile(r"completions (\d+) .*dead letters (\d+), retries (\d+)")
"""The consumer's periodic log line: completions, dead letters and retries so far."""


async def wait_group_ready(
    ctx: BenchContext, settings: Settings, group: str, names: Sequence[str], timeout_s: float
) -> None:
    """Wait until the broker reports the group Stable with every consumer holding exactly one
    partition, all partitions covered, for 2 s in a row (the consumers' logs cannot tell: their
    repeat filter holds back a second "assigned partitions" line within 10 s)."""
    parts = ctx.args.servers
    deadline = time.monotonic() + timeout_s
    stable_since: float | None = None
    while True:
        for name in names:
            proc = ctx.children.procs[name]
            if proc.poll() is not None:
                tail = (ctx.logdir / f"{name}.log").read_text()[-2000:]
                raise RuntimeError(f"consumer {name} exited with {proc.returncode}:\n{tail}")
        try:
            state, members = await group_assignment(settings, group)
        except (GroupCoordinatorNotAvailableError, CoordinatorLoadInProgressError):
            state, members = "no coordinator yet", []  # a fresh broker creates __consumer_offsets
        ready = (
            state == "Stable"
            and len(members) == len(names)
            and all(len(m) == 1 for m in members)
            and set().union(*members) == set(range(parts))
        )
        now = time.monotonic()
        if ready:
            stable_since = stable_since or now
            if now - stable_since >= 2.0:
                return
        else:
            stable_since = None
        if now > deadline:
            raise RuntimeError(f"the consumer group did not settle in {timeout_s:.0f} s: {state} {members}")
        await asyncio.sleep(0.5)


async def run_ours(ctx: BenchContext, *, lend: bool = True) -> PhaseOutcome:
    """Phase (a): one generation consumer process per server, one group, a fresh topic; with
    ``lend`` False, tail lending off (phase "unlent": docs/consumer.md, "Tail lending")."""
    phase = "ours" if lend else "unlent"
    args, fleet = ctx.args, ctx.fleet
    uid = uuid.uuid4().hex[:10]
    group = f"bench-{uid}"
    topics = ctx.base.topics.model_copy(
        update={
            "prompts": f"bench-prompts-{uid}",
            "completions": f"bench-completions-{uid}",
            "errors": f"bench-errors-{uid}",
            "producer_progress": f"bench-progress-{uid}",
            "partitions": args.servers,
        }
    )
    consumer = ctx.base.consumer.model_copy(update={"group": group, "lend": lend})
    settings = ctx.base.model_copy(update={"topics": topics, "consumer": consumer, "run_id": ctx.run_id})
    specs = topic_specs(settings)
    ctx.created_topics += [topics.prompts, topics.completions, topics.errors]
    await ensure_topics(settings, [specs["prompts"], specs["completions"], specs["errors"]])
    await fleet.restart()
    env = settings_to_env(settings)
    extra = shlex.split(args.consumer_args)
    names = [f"{'consumer' if lend else 'unlent'}-{k}" for k in range(args.servers)]
    for k, (name, url) in enumerate(zip(names, fleet.urls, strict=True)):
        cmd = ["-m", "consumers.generate", "--server", url, "--group", group, "--instance-id", f"{group}-{k}"]
        ctx.children.spawn(name, [*cmd, *extra], env, ctx.logdir / f"{name}.log")
    print(f"  [{phase}] {args.servers} consumers starting (group {group})", file=sys.stderr, flush=True)
    await wait_group_ready(ctx, settings, group, names, timeout_s=180)

    sampler = Sampler(fleet, args.sample_interval)
    await sampler.start()
    clients0 = ctx.children.cpu_seconds(names)
    cpu = CpuClock(ctx.broker, ctx.fleet.cpu_seconds)
    t0_epoch, t0_mono = time.time(), time.monotonic()
    await sampler.mark()
    await publish_prompts(settings, ctx.prompts, args.key_by)
    print(f"  [{phase}] published {len(ctx.prompts)} prompts", file=sys.stderr, flush=True)

    n = len(ctx.prompts)
    expected_wall = ideal_makespan(ctx.work, args.servers, fleet.profile.max_running_requests) / (
        fleet.time_scale
    )
    deadline = time.monotonic() + 4 * expected_wall + 120
    last_print = time.monotonic()
    views: list[CompletionView] = []
    decoder = msgspec.json.Decoder(CompletionView)
    usage: CpuUsage | None = None
    while True:
        await asyncio.sleep(0.5)
        s = sampler.samples[-1]
        finished = sum(x.requests_finished for x in s.stats)
        idle = all(x.running == 0 and x.queued == 0 for x in s.stats)
        if time.monotonic() - last_print >= 10:
            last_print = time.monotonic()
            print_progress(ctx, phase, s, t0_mono, finished)
        if finished >= n and idle:
            if usage is None:  # the fleet went idle: stop the CPU clock before reading back
                usage = cpu.since(ctx.children.cpu_seconds(names) - clients0)
            views = [decoder.decode(v) for v in await read_all_values(settings, topics.completions)]
            if {v.id for v in views} >= {p.id for p in ctx.prompts}:
                break
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"ours did not finish in time: {finished}/{n} finished on the servers, "
                f"{len({v.id for v in views})} distinct ids in {len(views)} completion records"
            )
    assert usage is not None
    await sampler.stop()

    statuses = ctx.children.terminate(names, grace_s=60)
    errors = len(await read_all_values(settings, topics.errors))
    first: dict[str, float] = {}
    server_of: dict[str, int] = {}
    index = {url: k for k, url in enumerate(fleet.urls)}
    for v in sorted(views, key=lambda v: v.timings.finished_at):
        if v.id not in first:
            first[v.id] = v.timings.finished_at
            server_of[v.id] = index[v.server]
    refill = {
        k: refill_latencies(
            [v.timings.started_at for v in views if index[v.server] == k],
            [v.timings.finished_at for v in views if index[v.server] == k],
        )
        for k in range(args.servers)
    }
    lent = sum(1 for v in views if v.consumer is not None and v.consumer != f"{group}-{index[v.server]}")
    notes = [f"consumer exit statuses: {sorted(set(statuses.values()), key=str)}"]
    retries = warnings = revokes = 0
    for name in names:
        text = (ctx.logdir / f"{name}.log").read_text(errors="replace")
        found = PERIODIC_REPORT.findall(text)
        if found:
            retries += int(found[-1][2])
        warnings += text.count(" WARNING ") + text.count(" ERROR ")
        revokes += text.count("revoked partitions")
    # The consumers' logs pass a repeated message template once per 10 s: lower bounds.
    notes.append(f"retries (consumers' last periodic report): {retries}")
    notes.append(f"warning/error log lines: {warnings}")
    notes.append(f"'revoked partitions' log lines incl. start-up: {revokes}")
    if args.keep_topics:
        ctx.created_topics = [t for t in ctx.created_topics if t not in (topics.prompts, topics.completions)]
    return PhaseOutcome(
        phase,
        t0_epoch,
        t0_mono,
        first,
        server_of,
        len(views),
        errors,
        sampler.samples,
        sampler.lags,
        usage,
        notes,
        refill,
        lent,
    )
