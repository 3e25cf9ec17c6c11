"""Injecting the schedule's faults into the running pipeline and undoing each.

:func:`run_fault` waits for the fault's time, injects it, waits ``hold_s``, undoes it and returns
a :class:`FaultOutcome`: when it really happened, what it hit (pid, the partitions the target
owned), whether injecting and undoing worked (the harness) and what the product did wrong meanwhile
(a graceful stop that did not exit 0). A failure to inject or undo is an outcome, not an exception,
so one broken fault does not stop the audit. Faults of an overlapping schedule run concurrently,
one task each; the schedule never gives two of them the same target at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from bench.chaos.monitor import Monitor
from bench.chaos.pipeline import KAFKA_BACK_S, YOUNG_S, Pipeline, load_factor
from bench.chaos.schedule import SETTLE_S, Fault, holds


@dataclass
class FaultOutcome:
    """What one fault did.

    Attributes:
        fault: the scheduled fault.
        at_s / undone_s: seconds after the window opened when it was injected and undone.
        ok: injected and undone as planned (the harness's part).
        outcome: one line: what happened.
        product_problem: what the product did wrong (None: nothing), e.g. a SIGTERM exit status.
        owned: prompts partitions the target consumer(s) owned when it was injected.
        moved: partition handovers the monitor saw from injection to undo (SIGKILLs included).
    """

    fault: Fault
    at_s: float = 0.0
    undone_s: float = 0.0
    ok: bool = True
    outcome: str = ""
    product_problem: str | None = None
    owned: list[int] = field(default_factory=list)
    moved: int = 0


def _consumers_on(pipeline: Pipeline, server: int) -> list[str]:
    """Names of the running consumers whose server is simulator ``server``."""
    url = pipeline.servers[server]
    return [n for n, cmd in pipeline.commands.items() if cmd[1] == "consumers.generate" and url in cmd]


async def run_fault(
    fault: Fault,
    pipeline: Pipeline,
    monitor: Monitor,
    t0: float,
    locks: dict[str, asyncio.Lock] | None = None,
) -> FaultOutcome:
    """Inject ``fault`` at ``t0 + fault.at_s`` (monotonic seconds), undo it ``hold_s`` later.

    ``locks`` (target -> lock, shared by the faults of one run) keeps two faults off one target
    at once when an undo runs late (a restart that waits for readiness): the later fault waits,
    and its lateness shows in :attr:`FaultOutcome.at_s`.
    """
    await asyncio.sleep(max(0.0, t0 + fault.at_s - time.monotonic()))
    held = [] if locks is None else [locks.setdefault(name, asyncio.Lock()) for name in sorted(holds(fault))]
    async with contextlib.AsyncExitStack() as stack:
        for lock in held:  # in name order: no two faults wait for each other
            await stack.enter_async_context(lock)
        out = FaultOutcome(fault, at_s=time.monotonic() - t0)
        before = sum(monitor.handovers.values())
        try:
            await _inject_and_undo(fault, pipeline, monitor, out)
        except Exception as exc:  # an outcome to report, never the end of the audit
            out.ok = False
            out.outcome += f"; failed: {type(exc).__name__}: {exc}"
        out.undone_s = time.monotonic() - t0
        if held:  # brokers and S3 need a while to be ready again, a restarted process to install
            # its SIGTERM handler: the next fault on the same target waits
            await asyncio.sleep(SETTLE_S.get(fault.kind, YOUNG_S))
    out.moved = sum(monitor.handovers.values()) - before
    out.outcome = out.outcome.lstrip("; ") + f"; {out.moved} partition handovers"
    return out


async def _inject_and_undo(fault: Fault, pipeline: Pipeline, monitor: Monitor, out: FaultOutcome) -> None:
    kind, target, hold = fault.kind, fault.target, fault.hold_s
    if kind in ("producer_kill", "consumer_kill", "sink_kill"):
        if target.startswith("generate"):
            out.owned = monitor.owned_by(pipeline.instance_id(target))
        pid = pipeline.kill(target)
        if pid is None:
            if not (target == "producer" and pipeline.producer_status is not None):
                pipeline.down.discard(target)  # it died on its own: the supervisor restarts it
            out.outcome = f"{target} was not running: nothing to kill"
            return
        monitor.add_handovers(out.owned)
        await asyncio.sleep(hold)
        pipeline.spawn(target)
        out.outcome = f"SIGKILL pid {pid}, restarted after {hold:.1f} s"
        if out.owned:
            out.outcome += f" (owned partitions {out.owned})"
    elif kind == "consumer_stop":
        out.owned = monitor.owned_by(pipeline.instance_id(target))
        sent_at = time.monotonic()
        status = await pipeline.terminate(target, pipeline.stop_grace_s)
        out.product_problem, harness = pipeline.sigterm_problem(target, status, sent_at)
        if harness is not None:
            out.ok, out.outcome = False, f"{harness}; "
        await asyncio.sleep(hold)
        pipeline.spawn(target)
        out.outcome += f"SIGTERM: exit {status}; started again after {hold:.1f} s (owned {out.owned})"
    elif kind == "scale_out":
        extra = [f"extra-{fault.index}-{j}" for j in range(int(fault.params["extra"]))]
        for j, name in enumerate(extra):
            pipeline.add_consumer(name, j)
        joined = {pipeline.instance_id(n) for n in extra}
        wait_s = 60 * load_factor()  # Python processes start slowly on a busy host
        for _ in range(int(wait_s / 0.5)):
            if joined <= monitor.members:
                break
            await asyncio.sleep(0.5)
        if not joined <= monitor.members:
            out.product_problem = f"extra consumers not all in the group after {wait_s:.0f} s"
        await asyncio.sleep(hold)
        owners = {monitor.owners.get(p) for p in range(pipeline.settings.topics.partitions)}
        idle = sum(1 for n in extra if pipeline.instance_id(n) not in owners)
        total = len(
            [
                n
                for n in pipeline.commands
                if pipeline.running(n) and "consumers.generate" in pipeline.commands[n]
            ]
        )
        statuses = await asyncio.gather(*(pipeline.terminate(n, pipeline.stop_grace_s) for n in extra))
        for name in extra:
            del pipeline.commands[name]
        if any(s != 0 for s in statuses):
            out.product_problem = f"extra consumers exited {statuses} on SIGTERM"
        out.outcome = (
            f"{len(extra)} extra consumers {'did NOT all join' if out.product_problem else 'joined'} "
            f"({total} in all for {pipeline.settings.topics.partitions} partitions, {idle} extras idle) "
            f"for {hold:.1f} s, then SIGTERM: exits {sorted(set(statuses), key=str)}"
        )
    elif kind == "server_crash":
        server = int(target.split("-")[1])
        out.owned = sorted(
            p for n in _consumers_on(pipeline, server) for p in monitor.owned_by(pipeline.instance_id(n))
        )
        if fault.params.get("mode"):
            pipeline.down.add(target)
            await pipeline.set_faults(server, {"crash_after_s": 0})
            how = "crash fault"
        else:
            pipeline.kill(target)
            how = "SIGKILL"
        await asyncio.sleep(hold)
        if pipeline.running(target):
            out.ok = False
            how += " (still running)"
            pipeline.kill(target)
        pipeline.spawn(target)
        healthy = await pipeline.wait_healthy(server)
        out.ok = out.ok and healthy
        out.outcome = f"{how}; restarted after {hold:.1f} s, {'healthy' if healthy else 'NOT healthy'}"
    elif kind in ("server_hang", "server_slow", "server_503"):
        server = int(target.split("-")[1])
        out.owned = sorted(
            p for n in _consumers_on(pipeline, server) for p in monitor.owned_by(pipeline.instance_id(n))
        )
        scale = pipeline.time_scale
        on: dict[str, object]
        off: dict[str, object]
        if kind == "server_hang":
            on, off = {"hang": True}, {"hang": False}
        elif kind == "server_slow":
            on, off = {"slow_factor": fault.params["slow_factor"]}, {"slow_factor": 1.0}
        else:  # simulated seconds: the 503 window lasts hold_s of wall time
            on, off = {"error_503_for_s": hold * scale}, {"error_503_for_s": 0.0}
        set_ok = await pipeline.set_faults(server, on)
        await asyncio.sleep(hold)
        clear_ok = await pipeline.set_faults(server, off)
        out.ok = set_ok and clear_ok
        out.outcome = f"{on} for {hold:.1f} s, cleared" + (
            "" if out.ok else " (the simulator did not answer)"
        )
    elif kind == "broker_kill":
        killed = await asyncio.to_thread(pipeline.stack.kill, target)
        await asyncio.sleep(hold)
        started = time.monotonic()
        await asyncio.to_thread(pipeline.stack.up, [target])
        out.ok = killed
        out.outcome = f"SIGKILL, restarted after {hold:.1f} s, ready {time.monotonic() - started:.1f} s later"
    elif kind == "broker_consumer_kill":
        consumer = f"generate-{int(fault.params['consumer'])}"
        out.owned = monitor.owned_by(pipeline.instance_id(consumer))
        pid = pipeline.kill(consumer)
        killed = await asyncio.to_thread(pipeline.stack.kill, target)
        monitor.add_handovers(out.owned)
        await asyncio.sleep(hold)
        pipeline.spawn(consumer)
        await asyncio.to_thread(pipeline.stack.up, [target])
        out.ok = killed
        out.outcome = (
            f"SIGKILL {target} and {consumer} (pid {pid}, owned {out.owned}), restarted after {hold:.1f} s"
        )
    elif kind == "kafka_down":
        names = pipeline.stack.names(["kafka"])
        pipeline.kafka_down_until = float("inf")
        pipeline.kafka_down_since = time.monotonic()
        try:
            all_killed = [await asyncio.to_thread(pipeline.stack.kill, n) for n in names]
            await asyncio.sleep(hold)
            started = time.monotonic()
            await asyncio.to_thread(pipeline.stack.up, ["kafka"])
        finally:
            pipeline.kafka_down_until = time.monotonic() + KAFKA_BACK_S
        out.ok = all(all_killed)
        out.outcome = (
            f"SIGKILL every broker ({', '.join(names)}) for {hold:.1f} s, ready "
            f"{time.monotonic() - started:.1f} s after restart"
        )
    elif kind == "gate_halt":
        halted = await pipeline.set_gate("halt", 60 * load_factor())
        await asyncio.sleep(hold)
        resumed = await pipeline.set_gate("resume", 300 * load_factor())
        out.ok = halted and resumed
        out.outcome = (
            f"run {'halted' if halted else 'NOT halted'} fleet-wide for {hold:.1f} s, "
            f"{'resumed' if resumed else 'NOT resumed'}"
        )
    elif kind == "s3_down":
        await asyncio.to_thread(pipeline.stack.down, ["s3"])
        await asyncio.sleep(hold)
        started = time.monotonic()
        await asyncio.to_thread(pipeline.stack.up, ["s3"])
        out.outcome = f"S3 stopped for {hold:.1f} s, ready {time.monotonic() - started:.1f} s after restart"
    else:
        raise ValueError(f"unknown fault kind {kind!r}")
