"""Fleet benchmark (issue 4): kafkagen's generation consumers against the old job's client on a
simulated fleet of SGLang servers, in one run.

Setup
-----
* **Fleet**: ``--servers`` (7) SGLang-API simulators with the default B200 profile (16 slots,
  234–256 tok/s per request at batch 1, ``rate(b) = r1 / (1 + 0.05 (b - 1))``), all in this
  process's event loop, time-scaled by ``--time-scale`` (simulated seconds per wall second).
  They are restarted (fresh counters and warm-up) before each phase.
* **Prompts**: ``--prompts`` (20,000) GSM8K test questions (bundled, cycled), ids
  ``bench-NNNNN``, the default generation parameters (thinking on, ``max_tokens`` 4096). Their
  work is known before the run: the simulator's output is a function of the request's ``rid``,
  and both clients send the consumer's first-attempt ``rid`` (:mod:`bench.analysis`).
* **Ours**: one ``python -m consumers.generate`` process per server, one consumer group, a fresh
  7-partition prompts topic (uuid names). The prompts are published (keyed by id, on the
  partitions the producer's ``--key-by`` would give them: ``--key-by`` here, default balanced)
  only once every consumer holds exactly one partition, so the group's start-up rebalances are
  not timed (they take seconds of wall time, which the time scale would inflate
  to minutes). t0 = the first publish; the end = the last prompt's first answer
  (``CompletionRecord.timings.finished_at``).
* **Baseline**: :mod:`bench.baseline` in its own process: concurrency 48 (a semaphore),
  round-robin, prompts in memory, the same request bodies. t0 = its start; the end = its last
  answer.
* **Strong baseline** (``--phases …,strong``, issue 10): :mod:`bench.baseline`'s strong mode, the
  best a plain client can do: per server its running limit (from ``/server_info``) plus
  ``--strong-queue`` requests, least-outstanding routing, prompts in memory, the same bodies.
  Timed like the baseline. :mod:`bench.matrix` runs all three over the rate profiles of
  :mod:`bench.rates`.

Measured: makespan (wall and simulated), the ideal makespan, occupancy per server in the steady
state and over the whole run, the consumers' refill delay (a completion → the next request sent,
wall clock) against how long the standing queue lasts, CPU of the machine and of each role, and
the simulator loop's lag. Definitions are in :mod:`bench.analysis`. Run from the repository root::

    .venv/bin/python -m bench.fleet --prompts 20000 --time-scale 5

The time scale matters: the consumer's refill delay is wall-clock (since issue 10 the next
prompt is sent from the prefetch buffer as soon as an answer arrives; before, the fetch loop
blocked up to 200 ms in ``getmany``), while the standing queue lasts ``standing_queue /
completion rate`` of *simulated* time, i.e. ``1 / time_scale`` as much wall time. A high time
scale can therefore measure the harness, not the policy; the CLI prints both figures so a run
can be judged on its own. :mod:`bench.matrix` runs real speeds (time scale 1) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shlex
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import msgspec
import psutil
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocol
from aiokafka.errors import CoordinatorLoadInProgressError, GroupCoordinatorNotAvailableError

from bench.analysis import (
    Sample,
    ServerWindow,
    Work,
    first_attempt_rid,
    ideal_makespan,
    plan_work,
    refill_latencies,
    run_occupancy,
    steady_window,
    token_ideal_makespan,
)
from bench.children import Children
from consumers.client import ServerClient
from producers.prompts import input_salt, partition_for
from simulator import DEFAULT_PROFILE, SimulatedServer, SimulatorProfile
from streams.config import ConsumerSettings, KeyBy, Settings, settings_to_env
from streams.kafka import client_kwargs, consumer_kwargs, producer_kwargs
from streams.records import GenerationParams, PromptMetadata, PromptRecord, encode, key_of
from streams.topics import ensure_topics, topic_specs

REPO_ROOT = Path(__file__).resolve().parents[1]
GSM8K = REPO_ROOT / "data" / "gsm8k" / "test.jsonl"
PHASES = ("ours", "baseline", "strong")
"""The phases a run may have: ours, the fixed-concurrency baseline, the strong baseline."""
_REPORT = re.compile(r"completions (\d+) .*dead letters (\d+), retries (\d+)")


# -- prompts ----------------------------------------------------------------------------------------
def make_prompts(n: int) -> list[PromptRecord]:
    """``n`` chat prompts: the GSM8K test questions, cycled, ids ``bench-00000``…"""
    questions = [json.loads(line)["question"] for line in GSM8K.read_text().splitlines() if line.strip()]
    return [
        PromptRecord(
            id=f"bench-{i:05d}",
            messages=[{"role": "user", "content": questions[i % len(questions)]}],
            params=GenerationParams(),
            metadata=PromptMetadata(source="gsm8k/test.jsonl", line=i % len(questions) + 1),
        )
        for i in range(n)
    ]


# -- the simulated fleet -----------------------------------------------------------------------------
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


# -- results of one phase -----------------------------------------------------------------------------
@dataclass
class CpuUsage:
    """CPU used during a phase: machine-wide busy and stolen cores, and CPU seconds per role
    (``broker_s`` None when the broker's process could not be found)."""

    wall_s: float
    machine_busy_cores: float
    steal_cores: float
    cores: int
    bench_s: float
    clients_s: float
    broker_s: float | None


@dataclass
class PhaseOutcome:
    """What one phase (ours or the baseline) did."""

    name: str
    t0_epoch: float
    t0_mono: float
    first_finish: dict[str, float]
    """prompt id → epoch seconds of its first answer."""
    server_of: dict[str, int]
    """prompt id → index of the server that answered first."""
    answers: int
    failures: int
    samples: list[Sample]
    lags: list[tuple[float, float]]
    cpu: CpuUsage
    notes: list[str] = field(default_factory=list)
    refill: dict[int, tuple[int, list[float]]] = field(default_factory=dict)
    """server → (window, refill delays in wall seconds); ours only (see :func:`refill_latencies`)."""


class _MachineCpu:
    """Machine-wide and own-process CPU counters, read at the start and end of a phase."""

    def __init__(self, broker: psutil.Process | None) -> None:
        self.wall = time.monotonic()
        self.machine = psutil.cpu_times()
        own = psutil.Process().cpu_times()
        self.own = own.user + own.system
        self.broker_process = broker
        self.broker = _cpu_of(broker)

    def since(self, clients_s: float) -> CpuUsage:
        now = _MachineCpu(self.broker_process)
        m0, m1 = self.machine, now.machine

        def delta(*names: str) -> float:
            return sum(getattr(m1, n, 0.0) - getattr(m0, n, 0.0) for n in names)

        busy = delta("user", "nice", "system", "irq", "softirq")
        idle = delta("idle", "iowait")
        steal = delta("steal")
        total = busy + idle + steal
        cores = psutil.cpu_count() or 1
        broker = None if now.broker is None or self.broker is None else now.broker - self.broker
        return CpuUsage(
            wall_s=now.wall - self.wall,
            machine_busy_cores=busy / total * cores if total > 0 else 0.0,
            steal_cores=steal / total * cores if total > 0 else 0.0,
            cores=cores,
            bench_s=now.own - self.own,
            clients_s=clients_s,
            broker_s=broker,
        )


def _cpu_of(proc: psutil.Process | None) -> float | None:
    if proc is None:
        return None
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return None
    return float(t.user + t.system)


def find_broker(bootstrap: str) -> psutil.Process | None:
    """The local process listening on the first bootstrap address's port (the Kafka broker), if any."""
    try:
        port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return psutil.Process(conn.pid)
    except (psutil.Error, ValueError, IndexError):
        return None
    return None


# -- Kafka helpers ----------------------------------------------------------------------------------
class _Timings(msgspec.Struct):
    started_at: float
    finished_at: float


class _Source(msgspec.Struct):
    partition: int


class _CompletionView(msgspec.Struct):
    """The fields of a CompletionRecord the benchmark reads (msgspec skips the rest)."""

    id: str
    server: str
    timings: _Timings
    source: _Source | None = None


async def _publish(settings: Settings, prompts: Sequence[PromptRecord], key_by: KeyBy) -> None:
    """Publish ``prompts`` keyed by id, each on the partition ``python -m producers.prompts
    --key-by KEY_BY`` would give it as line ``i + 1`` of one input, yielding to the loop as it goes."""
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        topic = settings.topics.prompts
        salt = input_salt("bench")
        for i, p in enumerate(prompts):
            key = key_of(p.id)
            partition = partition_for(p, key, settings.topics.partitions, key_by, line=i + 1, salt=salt)
            await producer.send(topic, encode(p), key=key, partition=partition)
            if i % 200 == 199:
                await asyncio.sleep(0)  # the simulators share this loop
        await producer.flush()
    finally:
        await producer.stop()


async def _read_all(settings: Settings, topic: str) -> list[bytes]:
    """Every committed record value of ``topic``, from the beginning to the current end."""
    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="bench-admin"))
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    parts = {p["partition"] for t in described if not t.get("error_code") for p in t["partitions"]}
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        if not tps:
            return []
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[bytes] = []
        while any([await consumer.position(tp) < end[tp] for tp in tps]):
            batch = await consumer.getmany(timeout_ms=500, max_records=2000)
            for records in batch.values():
                out += [r.value or b"" for r in records]
        return out
    finally:
        await consumer.stop()


async def _delete_topics(settings: Settings, names: Sequence[str]) -> None:
    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="bench-admin"))
    await admin.start()
    try:
        await admin.delete_topics(list(names))
    finally:
        await admin.close()


# -- phases -------------------------------------------------------------------------------------------
@dataclass
class BenchContext:
    """Everything both phases share."""

    args: argparse.Namespace
    fleet: SimFleet
    prompts: list[PromptRecord]
    work: list[Work]
    run_id: str
    base: Settings
    logdir: Path
    children: Children
    broker: psutil.Process | None = None
    created_topics: list[str] = field(default_factory=list)


def _progress(ctx: BenchContext, name: str, sample: Sample, t0_mono: float, done: int) -> None:
    running = sum(s.running for s in sample.stats)
    queued = sum(s.queued for s in sample.stats)
    sim = (sample.mono - t0_mono) * ctx.fleet.time_scale
    print(
        f"  [{name}] {sample.mono - t0_mono:6.0f} s wall = {sim:7.0f} s simulated: "
        f"{done}/{len(ctx.prompts)} finished, running {running}, queued {queued}",
        file=sys.stderr,
        flush=True,
    )


async def _group_assignment(settings: Settings, group: str) -> tuple[str, list[set[int]]]:
    """The group's state as the broker sees it, and each member's partitions."""
    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="bench-admin"))
    await admin.start()
    try:
        responses = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    described = responses[0].to_object()["groups"][0]
    members = [
        {tp.partition for tp in ConsumerProtocol.ASSIGNMENT.decode(m["member_assignment"]).partitions()}
        if m["member_assignment"]
        else set()
        for m in described["members"]
    ]
    return str(described["state"]), members


async def _wait_group_ready(
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
            state, members = await _group_assignment(settings, group)
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


async def run_ours(ctx: BenchContext) -> PhaseOutcome:
    """Phase (a): one generation consumer process per server, one group, a fresh topic."""
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
    consumer = ctx.base.consumer.model_copy(update={"group": group})
    settings = ctx.base.model_copy(update={"topics": topics, "consumer": consumer, "run_id": ctx.run_id})
    specs = topic_specs(settings)
    ctx.created_topics += [topics.prompts, topics.completions, topics.errors]
    await ensure_topics(settings, [specs["prompts"], specs["completions"], specs["errors"]])
    await fleet.restart()
    env = settings_to_env(settings)
    extra = shlex.split(args.consumer_args)
    names = [f"consumer-{k}" for k in range(args.servers)]
    for k, (name, url) in enumerate(zip(names, fleet.urls, strict=True)):
        cmd = ["-m", "consumers.generate", "--server", url, "--group", group, "--instance-id", f"{group}-{k}"]
        ctx.children.spawn(name, [*cmd, *extra], env, ctx.logdir / f"{name}.log")
    print(f"  [ours] {args.servers} consumers starting (group {group})", file=sys.stderr, flush=True)
    await _wait_group_ready(ctx, settings, group, names, timeout_s=180)

    sampler = Sampler(fleet, args.sample_interval)
    sampler.start()
    clients0 = ctx.children.cpu_seconds(names)
    cpu = _MachineCpu(ctx.broker)
    t0_epoch, t0_mono = time.time(), time.monotonic()
    sampler.mark()
    await _publish(settings, ctx.prompts, args.key_by)
    print(f"  [ours] published {len(ctx.prompts)} prompts", file=sys.stderr, flush=True)

    n = len(ctx.prompts)
    expected_wall = ideal_makespan(ctx.work, args.servers, fleet.profile.max_running_requests) / (
        fleet.time_scale
    )
    deadline = time.monotonic() + 4 * expected_wall + 120
    last_print = time.monotonic()
    views: list[_CompletionView] = []
    decoder = msgspec.json.Decoder(_CompletionView)
    usage: CpuUsage | None = None
    while True:
        await asyncio.sleep(0.5)
        s = sampler.samples[-1]
        finished = sum(x.requests_finished for x in s.stats)
        idle = all(x.running == 0 and x.queued == 0 for x in s.stats)
        if time.monotonic() - last_print >= 10:
            last_print = time.monotonic()
            _progress(ctx, "ours", s, t0_mono, finished)
        if finished >= n and idle:
            if usage is None:  # the fleet went idle: stop the CPU clock before reading back
                usage = cpu.since(ctx.children.cpu_seconds(names) - clients0)
            views = [decoder.decode(v) for v in await _read_all(settings, topics.completions)]
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
    errors = len(await _read_all(settings, topics.errors))
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
    notes = [f"consumer exit statuses: {sorted(set(statuses.values()), key=str)}"]
    retries = warnings = revokes = 0
    for name in names:
        text = (ctx.logdir / f"{name}.log").read_text(errors="replace")
        found = _REPORT.findall(text)
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
        "ours",
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
    )


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
    sampler.start()
    cpu = _MachineCpu(ctx.broker)
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
            _progress(ctx, name, s, spawned, sum(x.requests_finished for x in s.stats))
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


async def run_phase(ctx: BenchContext, phase: str) -> PhaseOutcome:
    """Run the phase named (one of :data:`PHASES`) on a restarted fleet."""
    if phase == "ours":
        return await run_ours(ctx)
    return await run_baseline(ctx, strong=phase == "strong")


# -- report ---------------------------------------------------------------------------------------------
@dataclass
class PhaseReport:
    """The figures of one phase."""

    outcome: PhaseOutcome
    makespan_wall: float
    makespan_sim: float
    windows: list[ServerWindow | None]
    steady: float | None
    run_occ: list[float]
    work_per_server: list[float]
    prompts_per_server: list[int]
    lags: list[float]
    """the simulator loop's lag samples (s) between t0 and the end of the makespan."""
    refill: list[float] = field(default_factory=list)
    """ours: every server's refill delays (wall s), pooled."""
    queue_cover_s: float | None = None
    """ours: wall seconds the standing queue lasts at the steady completion rate (mean of servers)."""


def report(ctx: BenchContext, o: PhaseOutcome) -> PhaseReport:
    """Makespan, steady-state and whole-run occupancy, and per-server work of one phase."""
    scale = ctx.fleet.time_scale
    slots = ctx.fleet.profile.max_running_requests
    n = ctx.args.servers
    end = max(o.first_finish.values(), default=o.t0_epoch)
    makespan_wall = end - o.t0_epoch
    makespan_sim = makespan_wall * scale
    windows = [
        steady_window(o.samples, k, t0_mono=o.t0_mono, warmup_s=ctx.args.warmup_s, time_scale=scale)
        for k in range(n)
    ]
    used = span = 0.0
    for w in windows:
        if w is not None:
            used += w.occupancy * w.span_s
            span += w.span_s
    start = [s for s in o.samples if s.mono <= o.t0_mono + 1e-9]
    first = start[-1] if start else o.samples[0]
    last = o.samples[-1]
    run_occ = [run_occupancy(first.stats[k], last.stats[k], makespan_sim) for k in range(n)]
    service = {w.prompt_id: w.service_s for w in ctx.work}
    work = [0.0] * n
    count = [0] * n
    for pid, k in o.server_of.items():
        work[k] += service[pid] / slots
        count[k] += 1
    lags = [lag for t, lag in o.lags if o.t0_mono <= t <= o.t0_mono + makespan_wall]
    refill: list[float] = []
    covers: list[float] = []
    for k, (window, delays) in o.refill.items():
        refill += delays
        w = windows[k]
        if w is None or window <= slots:
            continue
        a, b = o.t0_epoch + w.start_s / scale, o.t0_epoch + w.end_s / scale
        done = sum(1 for pid, t in o.first_finish.items() if o.server_of[pid] == k and a <= t <= b)
        if done:
            covers.append((window - slots) / (done / (b - a)))
    return PhaseReport(
        o,
        makespan_wall,
        makespan_sim,
        windows,
        used / span if span else None,
        run_occ,
        work,
        count,
        lags,
        refill,
        statistics.fmean(covers) if covers else None,
    )


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def print_report(ctx: BenchContext, reports: Sequence[PhaseReport], wall_total: float) -> None:
    """Markdown tables on stdout: the comparison, then one per-server table per phase."""
    a = ctx.args
    fleet = ctx.fleet
    p = fleet.profile
    slots = p.max_running_requests
    scale = fleet.time_scale
    ideal = ideal_makespan(ctx.work, a.servers, slots)
    ideal_tok = token_ideal_makespan(ctx.work, a.servers, p)
    tokens = sum(w.completion_tokens for w in ctx.work)
    print()
    print(
        f"Fleet: {a.servers} simulated servers ({p.name}: {slots} slots, {p.decode_tok_s_min:g}–"
        f"{p.decode_tok_s_max:g} tok/s at batch 1, {p.total_throughput(slots):.0f} tok/s at full batch), "
        f"time scale {fleet.time_scale:g}; {len(ctx.prompts)} prompts, {tokens:,} completion tokens "
        f"(mean {tokens / len(ctx.prompts):.0f}); machine: {psutil.cpu_count()} cores."
    )
    print(
        f"Ideal makespan (total full-batch service time / {a.servers * slots} slots): "
        f"{ideal:.0f} s simulated (token-based: {ideal_tok:.0f} s). "
        f"Steady state: from t0 + {a.warmup_s:g} s to each server's last arrival."
    )
    print()
    cols = [r.outcome.name for r in reports]
    rows: list[tuple[str, list[str]]] = [
        ("prompts completed", [f"{len(r.outcome.first_finish)}/{len(ctx.prompts)}" for r in reports]),
        ("answers received (incl. duplicates)", [str(r.outcome.answers) for r in reports]),
        ("failures / dead letters", [str(r.outcome.failures) for r in reports]),
        ("makespan, wall", [f"{r.makespan_wall:.1f} s" for r in reports]),
        ("makespan, simulated", [f"{r.makespan_sim:.0f} s" for r in reports]),
        ("makespan / ideal", [f"{r.makespan_sim / ideal:.3f}" for r in reports]),
        (
            "busiest server's work / ideal",
            [f"{max(r.work_per_server) / ideal:.3f}" for r in reports],
        ),
        (
            "makespan / busiest server's work",
            [
                f"{r.makespan_sim / max(r.work_per_server):.3f}" if max(r.work_per_server) > 0 else "n/a"
                for r in reports
            ],
        ),
        ("steady-state occupancy (fleet)", [_pct(r.steady) for r in reports]),
        (
            "steady-state occupancy, min server",
            [_pct(min((w.occupancy for w in r.windows if w), default=None)) for r in reports],
        ),
        (
            "steady-state mean running + queued / server",
            [
                f"{statistics.fmean([w.occupancy * slots + w.mean_queued for w in r.windows if w]):.2f}"
                if any(r.windows)
                else "n/a"
                for r in reports
            ],
        ),
        ("whole-run occupancy (fleet)", [_pct(statistics.fmean(r.run_occ)) for r in reports]),
        (
            "machine CPU busy (steal), cores",
            [
                f"{r.outcome.cpu.machine_busy_cores:.2f} ({r.outcome.cpu.steal_cores:.2f}) "
                f"of {r.outcome.cpu.cores}"
                for r in reports
            ],
        ),
        (
            "CPU cores: simulators / clients / broker",
            [
                f"{r.outcome.cpu.bench_s / r.outcome.cpu.wall_s:.2f} / "
                f"{r.outcome.cpu.clients_s / r.outcome.cpu.wall_s:.2f} / "
                + (
                    "?"
                    if r.outcome.cpu.broker_s is None
                    else f"{r.outcome.cpu.broker_s / r.outcome.cpu.wall_s:.2f}"
                )
                for r in reports
            ],
        ),
        (
            "client refill delay p50 / p90 / p99 (wall)",
            [
                f"{1000 * _quantile(r.refill, 0.5):.0f} / {1000 * _quantile(r.refill, 0.9):.0f} / "
                f"{1000 * _quantile(r.refill, 0.99):.0f} ms"
                if r.refill
                else "n/a"
                for r in reports
            ],
        ),
        (
            "standing queue lasts (wall / simulated)",
            [
                f"{1000 * r.queue_cover_s:.0f} ms / {r.queue_cover_s * scale:.1f} s"
                if r.queue_cover_s
                else "n/a"
                for r in reports
            ],
        ),
        (
            "simulator loop lag p50 / p99 / max",
            [
                f"{1000 * _quantile(r.lags, 0.5):.0f} / {1000 * _quantile(r.lags, 0.99):.0f} / "
                f"{1000 * max(r.lags, default=0):.0f} ms"
                for r in reports
            ],
        ),
    ]
    if len(reports) == 2:
        ratio = reports[1].makespan_sim / reports[0].makespan_sim
        rows.insert(5, (f"makespan ratio {cols[1]} / {cols[0]}", [f"{ratio:.3f}", ""]))
    print("| metric | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for label, values in rows:
        print(f"| {label} | " + " | ".join(values) + " |")
    for r in reports:
        print()
        print(f"{r.outcome.name}: per server ({'; '.join(r.outcome.notes)})")
        print()
        print(
            "| server | prompts | work (s) | steady window (s) | steady occupancy | mean queued | "
            "all slots busy | whole-run occupancy |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for k in range(a.servers):
            w = r.windows[k]
            window = f"{w.start_s:.0f}–{w.end_s:.0f}" if w else "n/a"
            print(
                f"| {k} | {r.prompts_per_server[k]} | {r.work_per_server[k]:.0f} | {window} | "
                f"{_pct(w.occupancy if w else None)} | {f'{w.mean_queued:.2f}' if w else 'n/a'} | "
                f"{_pct(w.full_fraction if w else None)} | {_pct(r.run_occ[k])} |"
            )
    print()
    print(f"Benchmark wall time: {wall_total:.0f} s (logs: {ctx.logdir})")


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- main -----------------------------------------------------------------------------------------------
def add_phase_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every phase reads from ``ctx.args`` (shared with :mod:`bench.matrix`)."""
    parser.add_argument(
        "--key-by",
        choices=get_args(KeyBy),
        default="balanced",
        help="how the prompts are spread over the partitions, as in producers.prompts (default %(default)s)",
    )
    parser.add_argument("--baseline-concurrency", type=int, default=48, help="default %(default)s")
    parser.add_argument(
        "--strong-queue",
        type=int,
        default=ConsumerSettings().standing_queue,
        help="strong baseline: requests queued per server beyond its running limit (default: the "
        "consumer's standing queue, %(default)s)",
    )
    parser.add_argument("--sample-interval", type=float, default=0.25, help="wall seconds between snapshots")
    parser.add_argument(
        "--consumer-args",
        default="",
        help="extra flags for every consumer, e.g. '--consumer.standing-queue 8'",
    )
    parser.add_argument("--logdir", type=Path, help="where logs go (default: a new temporary directory)")
    parser.add_argument(
        "--keep-topics", action="store_true", help="do not delete the run's topics at the end"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.fleet",
        description="Generation consumers vs. the old job's client on a simulated SGLang fleet (issue 4).",
    )
    parser.add_argument("--prompts", type=int, default=20_000, help="prompts (default %(default)s)")
    parser.add_argument("--servers", type=int, default=7, help="simulated servers (default %(default)s)")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=5.0,
        help="simulated seconds per wall second (default %(default)s)",
    )
    parser.add_argument(
        "--phases",
        default="ours,baseline",
        help="comma-separated: ours, baseline (fixed concurrency), strong (per-server limit + queue, "
        "least-outstanding routing) (default %(default)s)",
    )
    parser.add_argument(
        "--warmup-s", type=float, default=60.0, help="simulated seconds after t0 left out of the steady state"
    )
    add_phase_arguments(parser)
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument(
        "--run-id",
        default="bench-fleet",
        help="run id: the simulator's outputs follow from it (via the rid), so a fixed run id gives "
        "every run the same work (default %(default)s); topics and group get fresh uuid names anyway",
    )
    return parser


def cancel_on_signals() -> None:
    """SIGTERM and SIGHUP cancel the current task, so its ``finally`` clean-up runs."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if task is not None:
            loop.add_signal_handler(sig, task.cancel)


def run_main(
    amain: Callable[[argparse.Namespace], Coroutine[Any, Any, int]], args: argparse.Namespace
) -> int:
    """``asyncio.run(amain(args))``; 130 when interrupted."""
    try:
        return asyncio.run(amain(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: child processes stopped, simulators down", file=sys.stderr)
        return 130


async def amain(args: argparse.Namespace) -> int:
    """Run the phases and print the report; every process and topic is cleaned up on the way out."""
    cancel_on_signals()
    started = time.monotonic()
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not set(phases) <= set(PHASES) or not phases:
        raise SystemExit(f"--phases: expected some of {', '.join(PHASES)}, got {args.phases!r}")
    logdir = args.logdir or Path(tempfile.mkdtemp(prefix="kafkagen-bench-"))
    logdir.mkdir(parents=True, exist_ok=True)
    run_id = args.run_id
    profile = DEFAULT_PROFILE
    prompts = make_prompts(args.prompts)
    base = Settings()
    print(f"planning the work of {len(prompts)} prompts…", file=sys.stderr, flush=True)
    work = plan_work(prompts, profile, base.generation, run_id)
    fleet = SimFleet(args.servers, profile, args.time_scale)
    ctx = BenchContext(args, fleet, prompts, work, run_id, base, logdir, Children())
    ctx.broker = find_broker(base.kafka.bootstrap_servers)
    reports: list[PhaseReport] = []
    try:
        await fleet.start()
        ideal = ideal_makespan(work, args.servers, profile.max_running_requests)
        print(
            f"fleet up ({', '.join(fleet.urls)}); ideal makespan {ideal:.0f} s simulated = "
            f"{ideal / args.time_scale:.0f} s wall; logs in {logdir}",
            file=sys.stderr,
            flush=True,
        )
        for phase in phases:
            outcome = await run_phase(ctx, phase)
            reports.append(report(ctx, outcome))
            r = reports[-1]
            print(
                f"  [{phase}] done: makespan {r.makespan_wall:.1f} s wall = {r.makespan_sim:.0f} s simulated "
                f"({r.makespan_sim / ideal:.3f} × ideal), steady occupancy {_pct(r.steady)}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        ctx.children.terminate_all()
        await fleet.stop()
        if ctx.created_topics:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(_delete_topics(base, ctx.created_topics), 30)
    print_report(ctx, reports, time.monotonic() - started)
    if args.json:
        args.json.write_text(json.dumps(_as_json(ctx, reports), indent=2))
    return 0


def _as_json(ctx: BenchContext, reports: Sequence[PhaseReport]) -> dict[str, Any]:
    slots = ctx.fleet.profile.max_running_requests
    ideal = ideal_makespan(ctx.work, ctx.args.servers, slots)
    return {
        "prompts": len(ctx.prompts),
        "servers": ctx.args.servers,
        "time_scale": ctx.fleet.time_scale,
        "ideal_makespan_s": ideal,
        "phases": {
            r.outcome.name: {
                "makespan_wall_s": r.makespan_wall,
                "makespan_s": r.makespan_sim,
                "makespan_over_ideal": r.makespan_sim / ideal,
                "busiest_server_work_s": max(r.work_per_server),
                "steady_occupancy": r.steady,
                "steady_occupancy_per_server": [w.occupancy if w else None for w in r.windows],
                "whole_run_occupancy_per_server": r.run_occ,
                "machine_busy_cores": r.outcome.cpu.machine_busy_cores,
                "answers": r.outcome.answers,
                "failures": r.outcome.failures,
            }
            for r in reports
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (130 when interrupted)."""
    return run_main(amain, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
