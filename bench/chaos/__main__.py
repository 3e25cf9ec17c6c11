"""``python -m bench.chaos --seed S --faults N``: run the pipeline under a seeded schedule of faults,
then audit what it produced.

Steps: start a 3-broker Kafka cluster and S3 of the audit's own (``<work dir>/stack``), the
simulators, one consumer per simulator and the sink; write the input (``<work dir>/input.jsonl``,
with poison lines) and start the producer, rate-limited so it publishes over the first 60 % of
the fault window (``--duration`` seconds); inject the faults of :func:`bench.chaos.schedule.make_schedule`
one after the other while sampling both groups' commits every second; then clear every fault,
let the pipeline drain (every prompt generated, every result in S3), stop the processes, export
the run (``python -m sinks.export``) and run the checks of :mod:`bench.chaos.audit` over what Kafka,
S3, the export and the producer's report hold.

Prints the fault table (time, kind, target, outcome), the checks and a summary line, and writes
``<work dir>/report.json``. Two verdicts: the product's checks (data and guarantees) and the
harness's (every fault injected on time and undone as planned). Exit status: 0 when every check
passed, 1 when a product check failed, 3 when only the harness failed, 2 on bad arguments or when
the stack could not start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.chaos.audit import Check, audit, duplicates_per_partition, harness_check
from bench.chaos.collect import collect
from bench.chaos.faults import FaultOutcome, run_fault
from bench.chaos.inputs import write_inputs
from bench.chaos.monitor import Monitor
from bench.chaos.pipeline import (
    CONTEXT_TOKENS,
    MAX_BASE_PORT,
    Pipeline,
    audit_settings,
    load_factor,
    time_scale_for,
)
from bench.chaos.report import FAULT_HEADER, check_lines, fault_row, summary_line, write_json
from bench.chaos.schedule import Fault, Shape, make_schedule
from streams.audit_trace import PLANTS
from streams.config import Settings, load_settings
from streams.errors import KafkagenError

PUBLISH_SHARE = 0.6
"""Share of the fault window during which the producer publishes."""
LATE_S = 10.0
"""A fault injected this many seconds after its time (times the load factor) is a harness problem."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="seed of the schedule and the input (default 1)")
    parser.add_argument(
        "--faults",
        type=int,
        default=11,
        help="faults to inject (default 11: every kind once; 0: none, e.g. with --plant)",
    )
    parser.add_argument("--prompts", type=int, default=2000, help="valid input prompts (default 2000)")
    parser.add_argument(
        "--duration", type=float, default=200.0, help="seconds of the fault window (default 200)"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        help="the simulators' simulated seconds per wall second (default: what makes them serve --load "
        "times the producer's rate)",
    )
    parser.add_argument(
        "--load",
        type=float,
        default=1.1,
        help="the producer's rate over the simulators' capacity (default 1.1: a small backlog keeps "
        "every consumer saturated)",
    )
    parser.add_argument("--servers", type=int, default=3, help="simulators (default 3)")
    parser.add_argument(
        "--consumers", type=int, default=3, help="base consumers, one per simulator (default 3)"
    )
    parser.add_argument("--drain-timeout", type=float, default=300.0, help="seconds to drain (default 300)")
    parser.add_argument("--work-dir", type=Path, help="folder for the stack, logs, input, dataset, report")
    parser.add_argument(
        "--base-port",
        type=int,
        default=21000,
        help="first port (Kafka P, P+2, P+4; S3 P+10; simulators P+20..)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the stack (Kafka, S3) running at the end")
    parser.add_argument(
        "--overlap",
        action="store_true",
        help="the harsher schedule: faults overlap, Kafka down past the session timeout, S3 down for 5 "
        "minutes, a broker and a consumer killed together (bench/chaos/schedule.py)",
    )
    parser.add_argument(
        "--plant",
        action="append",
        choices=PLANTS,
        default=[],
        help="make the product break a guarantee on purpose, to see the audit catch it (repeatable)",
    )
    return parser


def say(text: str) -> None:
    print(text, flush=True)


DRAIN_CAP = 4
"""The drain may take ``DRAIN_CAP`` times ``--drain-timeout`` while its commits keep advancing."""


async def wait_while_progressing(
    done: Callable[[], Awaitable[bool]],
    progress: Callable[[], int],
    *,
    stall_s: float,
    cap_s: float,
    interval_s: float = 1.0,
) -> str | None:
    """Poll ``done`` until true, for as long as ``progress()`` keeps changing: a pipeline that
    drains slowly (a backlog on one consumer) is not one that is stuck. Returns ``None`` once
    done, else why not: ``progress`` unchanged for ``stall_s`` seconds, or ``cap_s`` seconds in all."""
    start = last_at = time.monotonic()
    last = progress()
    while True:
        if await done():
            return None
        now = time.monotonic()
        if (current := progress()) != last:
            last, last_at = current, now
        if now - last_at >= stall_s:
            return f"no commit advanced for {stall_s:.0f} s and the commits do not reach the topics' ends"
        if now - start >= cap_s:
            return f"still draining {cap_s:.0f} s after it started (commits advancing)"
        await asyncio.sleep(interval_s)


async def _wait(check: Any, timeout_s: float, interval_s: float = 1.0) -> bool:
    """Poll the async ``check`` until true; False after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(interval_s)
    return False


async def run(args: argparse.Namespace) -> int:
    """The audit (module docstring); returns the exit status. SIGTERM cancels it: the processes
    and (without ``--keep``) the stack are stopped all the same."""
    started = time.monotonic()
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="kafkagen-chaos-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    run_id = f"chaos-{args.seed}-{uuid.uuid4().hex[:6]}"
    publish_s = PUBLISH_SHARE * args.duration
    base = load_settings(Settings)
    probe = audit_settings(
        base, work_dir=work, base_port=args.base_port, run_id=run_id, servers=args.servers, publish_rate=1.0
    )
    plan = write_inputs(
        work / "input.jsonl",
        args.prompts,
        args.seed,
        max_message_bytes=probe.kafka.max_message_bytes,
        context_tokens=CONTEXT_TOKENS,
    )
    rate = len(plan.valid) / publish_s
    time_scale = args.time_scale or time_scale_for(rate, args.servers, 1 / args.load)
    settings = audit_settings(
        base,
        work_dir=work,
        base_port=args.base_port,
        run_id=run_id,
        servers=args.servers,
        publish_rate=rate,
    )
    shape = Shape(
        consumers=args.consumers, servers=args.servers, brokers=3, partitions=settings.topics.partitions
    )
    schedule = make_schedule(
        args.seed, args.faults, window_s=args.duration, publish_s=publish_s, shape=shape, overlap=args.overlap
    )
    say(
        f"chaos seed {args.seed}: run {run_id}, {len(plan.valid)} valid prompts, "
        f"{len(plan.bad)} poison lines, {len(schedule)} faults over {args.duration:.0f} s"
        f"{' (overlapping)' if args.overlap else ''}, simulators at time scale {time_scale:.2f}; "
        f"work dir {work}" + (f"; PLANTED: {', '.join(args.plant)}" if args.plant else "")
    )
    pipeline = Pipeline(settings, work, plan.path, args.consumers, time_scale, plants=tuple(args.plant))
    monitor = Monitor(settings)
    tasks: list[asyncio.Task[None]] = []
    outcomes: list[FaultOutcome] = []
    problems: list[str] = []  # the product's
    harness: list[str] = []
    try:
        say(f"starting Kafka ({settings.kafka.bootstrap_servers}) and S3 ({settings.s3.endpoint_url})")
        await pipeline.start_stack()
        for i in range(args.servers):
            pipeline.add_simulator(i)
        for i in range(args.servers):
            if not await pipeline.wait_healthy(i):
                raise KafkagenError(
                    f"simulator {i} did not start:\n{pipeline.log_tail(pipeline.sim_name(i))}"
                )
        for i in range(args.consumers):
            pipeline.add_consumer(f"generate-{i}", i)
        pipeline.add_sink()
        tasks = [asyncio.create_task(monitor.run()), asyncio.create_task(pipeline.supervise())]

        async def assigned() -> bool:
            return len(monitor.owners) == settings.topics.partitions

        if not await _wait(assigned, 180 * load_factor()):  # the product failing to start fails the audit
            problem = (
                f"the consumer group never settled: {len(monitor.owners)} of {settings.topics.partitions} "
                f"partitions owned after 180 s; see {pipeline.log_dir}/generate-*.log"
            )
            checks = [Check("pipeline_recovered", False, problem, [problem])]
            summary = summary_line(args.seed, [], checks, time.monotonic() - started)
            say(problem)
            say(summary)
            write_json(
                work / "report.json",
                header={"seed": args.seed, "run_id": run_id, "work_dir": str(work)},
                outcomes=[],
                exits=pipeline.exits,
                checks=checks,
                stats={},
                summary=summary,
            )
            return 1
        say(f"pipeline up after {time.monotonic() - started:.0f} s; starting the producer and the faults")
        say(FAULT_HEADER)
        t0 = time.monotonic()
        pipeline.add_producer()

        locks: dict[str, asyncio.Lock] = {}

        async def one(fault: Fault) -> FaultOutcome:
            outcome = await run_fault(fault, pipeline, monitor, t0, locks)
            say(fault_row(outcome))
            return outcome

        outcomes = sorted(await asyncio.gather(*(one(f) for f in schedule)), key=lambda o: o.fault.index)
        for o in outcomes:
            what = f"fault {o.fault.index} ({o.fault.kind} {o.fault.target})"
            if not o.ok:
                harness.append(f"{what}: {o.outcome}")
            late = o.at_s - o.fault.at_s
            if late > LATE_S * load_factor():
                harness.append(f"{what} injected {late:.1f} s late")
            if o.product_problem:
                problems.append(f"{what}: {o.product_problem}")
        drained, not_ready = await drain(pipeline, monitor, args.drain_timeout, t0)
        problems += drained
        harness += not_ready
        statuses = await pipeline.stop_all()
        problems += [
            f"{n} exited with {s} on SIGTERM at the end" for n, s in statuses.items() if s not in (0, None)
        ]
        problems += [
            f"{e.name} exited on its own with status {e.status} at {e.at - t0:.1f} s; end of its log: "
            f"{e.log_tail[-300:]!r}"
            for e in pipeline.exits
        ]
        await monitor.final()
        dataset = work / "dataset"
        export_status, export_out = await pipeline.run_export(dataset)
        if export_status != 0:
            say(export_out[-3000:])
        data = await collect(
            settings,
            plan,
            monitor,
            dataset=dataset,
            bad_lines=pipeline.bad_lines_path,
            traces=pipeline.trace_dir,
            export_status=export_status,
            run_problems=problems,
            harness_problems=harness,
        )
        checks = audit(data)
        wall = time.monotonic() - started
        say("checks:")
        for line in check_lines(checks):
            say(line)
        summary = summary_line(args.seed, outcomes, checks, wall)
        say(summary)
        dups = duplicates_per_partition(data.results)
        stats = {
            "prompts_records": len(data.prompts),
            "completions_records": sum(r.kind == "completion" for r in data.results),
            "error_records": sum(r.kind == "error" for r in data.results),
            "duplicates": sum(dups.values()),
            "duplicates_per_partition": dups,
            "handovers": dict(monitor.handovers),
            "traced_processes": len(data.traces),
            "exits_3_in_kafka_outages": dict(Counter(e.name for e in pipeline.outage_exits)),
            "objects": len(data.objects),
            "commit_samples": {"generate": len(monitor.generate), "sink": len(monitor.sink)},
            "sample_failures": monitor.failures,
            "dataset": {
                "completions": sum(data.dataset_completions.values()),
                "errors": len(data.dataset_errors),
            },
        }
        header = {
            "seed": args.seed,
            "faults_requested": args.faults,
            "prompts": args.prompts,
            "duration_s": args.duration,
            "time_scale": time_scale,
            "run_id": run_id,
            "work_dir": str(work),
            "wall_s": round(wall, 1),
            "max_uncommitted": settings.consumer.max_uncommitted,
            "overlap": args.overlap,
            "plants": args.plant,
        }
        write_json(
            work / "report.json",
            header=header,
            outcomes=outcomes,
            exits=pipeline.exits,
            checks=checks,
            stats=stats,
            summary=summary,
        )
        say(f"report: {work / 'report.json'}")
        if not all(c.ok for c in checks if not harness_check(c.name)):
            return 1
        return 0 if all(c.ok for c in checks) else 3
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        pipeline.children.terminate_all(5.0)
        if not args.keep:
            await asyncio.to_thread(pipeline.stop_stack)


async def drain(
    pipeline: Pipeline, monitor: Monitor, timeout_s: float, t0: float
) -> tuple[list[str], list[str]]:
    """Clear every fault, bring every process up, wait for the producer and then until the
    groups' commits reach the topics' ends, for ``timeout_s`` times the load factor. Returns the
    product's problems (empty: drained) and the harness's (a simulator it could not restore)."""
    problems, harness = [], []
    for i in range(len(pipeline.servers)):
        name = pipeline.sim_name(i)
        if not pipeline.running(name):
            pipeline.spawn(name)
        if not await pipeline.wait_healthy(i) or not await pipeline.set_faults(i, None):
            harness.append(f"simulator {i} not healthy or its faults not cleared for the drain")
    for name in list(pipeline.down):
        if name != "producer" and name in pipeline.commands:
            pipeline.spawn(name)
    with contextlib.suppress(Exception):
        await asyncio.to_thread(pipeline.stack.up, ["kafka", "s3"])
    if pipeline.halted and not await pipeline.set_gate("resume", 120):
        harness.append("the run stayed halted: the drain could not resume it")
    start = time.monotonic()
    timeout_s *= load_factor()

    async def published() -> bool:
        return pipeline.producer_status is not None

    if not await _wait(published, timeout_s):
        problems.append(f"the producer did not finish within {timeout_s:.0f} s of the drain")
        return problems, harness
    if pipeline.producer_status not in (0, 1):
        problems.append(f"the producer ended with status {pipeline.producer_status}")
    left = timeout_s - (time.monotonic() - start)
    stalled = await wait_while_progressing(
        monitor.drained, monitor.progress, stall_s=max(left, 10.0), cap_s=DRAIN_CAP * timeout_s
    )
    if stalled is not None:
        problems.append(f"not drained after the last fault: {stalled}")
    say(
        f"drained at {time.monotonic() - t0:.0f} s, "
        f"{time.monotonic() - start:.0f} s after the last fault was undone"
    )
    return problems, harness


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 1024 <= args.base_port <= MAX_BASE_PORT:
        parser.error(
            f"--base-port must be in 1024..{MAX_BASE_PORT}: SeaweedFS's highest port is the base port "
            "+ 11017 "
            "(S3 at +10, its volume server +1007 above, gRPC +10000 above that), and every port must stay "
            "below Linux's ephemeral range (32768), where outgoing connections could take it"
        )
    if min(args.prompts, args.servers, args.consumers, args.load) <= 0 or (args.time_scale or 1) <= 0:
        parser.error("--prompts, --servers, --consumers, --load and --time-scale must be positive")
    try:  # the schedule is pure: check it before anything starts
        make_schedule(
            args.seed, args.faults, window_s=args.duration, publish_s=1.0, shape=Shape(), overlap=args.overlap
        )
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # outages are expected here
    try:
        return asyncio.run(run(args))
    except (asyncio.CancelledError, KeyboardInterrupt):
        print("interrupted: processes and stack stopped", file=sys.stderr)
        return 130
    except KafkagenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
