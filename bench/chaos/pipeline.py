"""The chaos audit's pipeline: a 3-broker Kafka cluster and S3 of its own, SGLang-API simulators,
generation consumers, the S3 sink and the producer, each a separate OS process.

Addresses, from ``--base-port P`` (all on 127.0.0.1, all below 32768 for P < 21750): Kafka
brokers on P, P+2, P+4 (controllers one above each), S3 on P+10 (SeaweedFS's internal ports
+555, +1000, +1007 and each +10000 above it), simulators on P+20, P+21, ... The stack lives in
``<work dir>/stack`` (:class:`launch.stack.LocalStack` with that home), so it never touches
another stack; :meth:`Pipeline.stop_stack` stops it.

Processes are started by :class:`bench.children.Children` (killed with this process) and
supervised like supervisord does in production (:meth:`Pipeline.supervise`): a process that
exits on its own is recorded (:class:`Exit`) and started again, except the producer once it has
finished (exit 0, or 1 for bad lines). Faults mark what they take down on purpose
(:attr:`Pipeline.down`) so the supervisor leaves those alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import httpx
from aiokafka.errors import KafkaError

from bench.children import REPO_ROOT, Children
from launch.gate.control import change_gate
from launch.stack import LocalStack
from launch.stack.settings import load_stack_settings
from streams.audit_trace import PLANT_ENV, TRACE_ENV
from streams.config import Settings
from streams.environment import settings_to_env
from streams.runs.naming import derived_topics
from streams.topics import ensure_topics, topic_specs

KAFKA_OFFSETS: Final = (0, 2, 4)
S3_OFFSET: Final = 10
SIM_OFFSET: Final = 20
MAX_BASE_PORT: Final = 21700
"""Highest ``--base-port``: SeaweedFS's highest port is the S3 port + 11007, kept below 32768."""
CONTEXT_TOKENS: Final = 8192
"""The simulators' context length (tokens): an over-context prompt still fits a 256 KiB record."""
SLOTS: Final = 2
"""The simulators' ``--max-running-requests``: few slots, so the time scale that matches the
producer's rate is high enough for a slowed-down request to finish within ``hang_timeout_s``."""
YOUNG_S: Final = 5.0
"""Seconds after a start during which a process may not have installed its SIGTERM handler."""
STOP_GRACE_S: Final = 25.0
"""Seconds past ``shutdown_deadline_s`` a SIGTERMed process gets before the harness SIGKILLs it
(and the product fails ``pipeline_recovered``): its last commit and each closing step may wait
5 s for Kafka (``consumers/generate.py``), and Python exits in a few more."""
KAFKA_BACK_S: Final = 30.0
"""After a ``kafka_down`` fault, seconds during which an exit 3 (Kafka unavailable) of a process
started while Kafka was down is still the product's documented answer, not a failure."""
REQUEST_SIM_S: Final = 1.0
"""Simulated seconds one audit request takes with every slot busy: ~225 completion tokens (256
at most, thinking off) at 245 / (1 + 0.05 x 1) tokens/s (the default profile)."""


def load_factor() -> float:
    """How much slower than idle this host runs now: the 1-minute load average per CPU, at least
    1. The harness's waits are multiplied by it, so an overloaded machine is not read as a
    product failure."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def time_scale_for(rate: float, servers: int, load: float) -> float:
    """The simulators' time scale at which ``servers`` of them serve ``load`` times ``rate``
    requests a second: a load just under 1 keeps a small backlog, so every consumer's window stays
    full (the throughput watchdog judges only saturated servers) and the run still drains soon
    after the producer ends."""
    return load * rate * REQUEST_SIM_S / (servers * SLOTS)


@dataclass(frozen=True)
class Exit:
    """A process that exited on its own: name, exit status, when (monotonic s), end of its log."""

    name: str
    status: int | None
    at: float
    log_tail: str


def audit_settings(
    base: Settings, *, work_dir: Path, base_port: int, run_id: str, servers: int, publish_rate: float
) -> Settings:
    """``base`` pointed at the audit's own stack and tuned so that faults show within seconds.

    Kafka records at most 256 KiB; topics named after ``run_id``; ``servers`` simulators; thinking
    off and 256 tokens (fast simulated answers); consumer timeouts of seconds instead of minutes
    (down grace 8 s, hang 6 s, watchdog window 10 s / collapse 5 s / hold 12 s, session 10 s,
    shutdown 15 s), ``max_uncommitted`` 32 (so the duplicate bound is tight) and commits every
    second; the producer publishes ``publish_rate`` records a second in transactions of 50; the
    sink writes objects of 200 records and flushes after 2 s idle.

    Raises:
        ValueError: ``base_port`` outside 1024..:data:`MAX_BASE_PORT`.
    """
    if not 1024 <= base_port <= MAX_BASE_PORT:
        raise ValueError(
            f"--base-port must be in 1024..{MAX_BASE_PORT} (ports stay below 32768), not {base_port}"
        )
    kafka = base.kafka.model_copy(
        update={
            "bootstrap_servers": ",".join(f"127.0.0.1:{base_port + o}" for o in KAFKA_OFFSETS),
            "max_message_bytes": 256 * 1024,
        }
    )
    topics = base.topics.model_copy(
        update={
            **derived_topics(run_id),
            "producer_progress": f"{run_id}.producer-progress",
            "replication_factor": None,
        }
    )
    s3 = base.s3.model_copy(
        update={"endpoint_url": f"http://127.0.0.1:{base_port + S3_OFFSET}", "prefix": "chaos"}
    )
    generation = base.generation.model_copy(
        update={"max_tokens": 256, "chat_template_kwargs": {"enable_thinking": False}}
    )
    # The audit checks delivery: 256 tokens cut ~60% of the simulator's answers by design, which
    # the quality gate (docs/gate.md) would rightly halt; it still runs, reports and obeys halts.
    gate = base.gate.model_copy(update={"enabled": False})
    consumer = base.consumer.model_copy(
        update={
            "max_uncommitted": 32,
            "commit_interval_s": 1.0,
            "down_grace_s": 8.0,
            "hang_timeout_s": 6.0,
            "retry_initial_s": 0.5,
            "retry_max_s": 4.0,
            "startup_timeout_s": 300.0,
            "shutdown_deadline_s": 15.0,
            "watchdog_window_s": 10.0,
            "watchdog_collapse_s": 5.0,
            "watchdog_hold_s": 12.0,
            "session_timeout_ms": 10000,
            "heartbeat_interval_ms": 1000,
        }
    )
    producer = base.producer.model_copy(
        update={"checkpoint_every": 50, "checkpoint_interval_s": 2.0, "max_records_per_s": publish_rate}
    )
    sink = base.sink.model_copy(
        update={
            "instance_id": f"{run_id}-sink",
            "flush_records": 200,
            "idle_flush_s": 2.0,
            "retry_max_s": 2.0,
            "shutdown_deadline_s": 10.0,
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 30000,
            "heartbeat_interval_ms": 1000,
        }
    )
    return base.model_copy(
        update={
            "run_id": run_id,
            "kafka": kafka,
            "topics": topics,
            "s3": s3,
            "generation": generation,
            "gate": gate,
            "servers": [f"http://127.0.0.1:{base_port + SIM_OFFSET + i}" for i in range(servers)],
            "consumer": consumer,
            "producer": producer,
            "sink": sink,
            "home": str(work_dir / "stack"),
        }
    )


@dataclass
class Pipeline:
    """The processes of one audit run.

    Args:
        settings: from :func:`audit_settings`.
        work_dir: logs go to ``<work_dir>/logs``.
        input_path: the producer's input.
        consumers: base consumers ``generate-<i>``, consumer ``i`` on simulator ``i % servers``.
        time_scale: the simulators' ``--time-scale``.
        plants: violations the consumers and the sink commit on purpose
            (:data:`streams.audit_trace.PLANTS`), to see the audit catch them.

    Every process traces what it does into :attr:`trace_dir` (:mod:`streams.audit_trace`).
    """

    settings: Settings
    work_dir: Path
    input_path: Path
    consumers: int
    time_scale: float
    plants: tuple[str, ...] = ()
    children: Children = field(default_factory=Children)
    commands: dict[str, list[str]] = field(default_factory=dict)
    """process name -> ``python`` arguments; a restart runs the same."""
    down: set[str] = field(default_factory=set)
    """processes a fault stopped on purpose: the supervisor does not restart them."""
    exits: list[Exit] = field(default_factory=list)
    producer_status: int | None = None
    """the producer's exit status once it finished (0, or 1: bad lines)."""
    spawned: dict[str, float] = field(default_factory=dict)
    """process name -> monotonic seconds of its latest start."""
    halted: bool = False
    """a ``gate_halt`` fault halted the run and has not resumed it yet (the drain resumes it)."""
    kafka_down_until: float = 0.0
    """monotonic seconds until which all of Kafka is (or just was) down on purpose."""
    kafka_down_since: float = float("inf")
    """monotonic seconds when the latest ``kafka_down`` fault began."""
    outage_exits: list[Exit] = field(default_factory=list)
    """exits 3 while all of Kafka was down: the documented answer of a producer (the same
    command, run again, resumes exactly once) and of a consumer or sink that starts without Kafka
    (README: exit 3, unreachable), restarted like any exit."""

    def __post_init__(self) -> None:
        self.stack = LocalStack(self.settings, load_stack_settings().pinned_to(REPO_ROOT))
        self.trace_dir = self.work_dir / "trace"
        self.env = {
            **settings_to_env(self.settings),
            TRACE_ENV: str(self.trace_dir),
            PLANT_ENV: ",".join(self.plants),
        }
        self.log_dir = self.work_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()

    # -- names ----------------------------------------------------------------------------------
    @property
    def servers(self) -> list[str]:
        return list(self.settings.servers)

    def sim_name(self, i: int) -> str:
        return f"sim-{i}"

    def instance_id(self, name: str) -> str:
        """The static membership id of consumer ``name``: ``<run id>-<name>``."""
        return f"{self.settings.run_id}-{name}"

    def sigterm_problem(self, name: str, status: int | None, sent_at: float) -> tuple[str | None, str | None]:
        """(product problem, harness problem) of ``name`` ending with ``status`` after a SIGTERM
        sent at ``sent_at`` (monotonic s): not 0 is the product's, except death by the signal itself
        (-15) within :data:`YOUNG_S` of a start: Python had not installed its handler yet, a race
        of the harness's restart and the fault, as a supervisor's would be; and an exit 3 of a
        process started while all of Kafka was down, which found no Kafka at start (its documented
        answer, counted with :attr:`outage_exits`)."""
        if status == 0:
            return None, None
        spawned = self.spawned.get(name, float("-inf"))
        if status == 3 and spawned >= self.kafka_down_since and time.monotonic() < self.kafka_down_until:
            self.outage_exits.append(Exit(name, status, time.monotonic(), self.log_tail(name)))
            return None, None
        age = sent_at - spawned
        if status == -signal.SIGTERM and age < YOUNG_S:
            return None, f"{name} got its SIGTERM {age:.1f} s after it started, before its handler"
        return f"{name} exited {status} on SIGTERM", None

    @property
    def stop_grace_s(self) -> float:
        """Seconds a SIGTERMed consumer gets to exit (:data:`STOP_GRACE_S`)."""
        return self.settings.consumer.shutdown_deadline_s + STOP_GRACE_S

    def running(self, name: str) -> bool:
        proc = self.children.procs.get(name)
        return proc is not None and proc.poll() is None

    def pid(self, name: str) -> int | None:
        proc = self.children.procs.get(name)
        return proc.pid if proc is not None and proc.poll() is None else None

    # -- start ----------------------------------------------------------------------------------
    async def start_stack(self) -> None:
        """Start the 3 brokers and S3 (waits until each is ready) and create the run's topics.

        Raises:
            StackError, ServiceNotReadyError: a service could not start (see :meth:`LocalStack.up`).
        """
        await asyncio.to_thread(self.stack.up, ["kafka", "s3"])
        specs = topic_specs(self.settings)
        await ensure_topics(self.settings, [specs["prompts"], specs["completions"], specs["errors"]])

    def spawn(self, name: str) -> None:
        """Start process ``name`` from its command (main thread only: children die with the thread
        that forked them)."""
        self.spawned[name] = time.monotonic()
        self.down.discard(name)
        self.children.spawn(name, self.commands[name], self.env, self.log_dir / f"{name}.log")

    def add_simulator(self, i: int) -> None:
        port = int(self.servers[i].rsplit(":", 1)[1])
        self.commands[self.sim_name(i)] = [
            "-m",
            "simulator",
            "--port",
            str(port),
            "--time-scale",
            str(self.time_scale),
            "--context-length",
            str(CONTEXT_TOKENS),
            "--max-running-requests",
            str(SLOTS),
            "--seed",
            str(i),
        ]
        self.spawn(self.sim_name(i))

    def add_consumer(self, name: str, server: int) -> None:
        self.commands[name] = [
            "-m",
            "consumers.generate",
            "--server",
            self.servers[server % len(self.servers)],
            "--instance-id",
            self.instance_id(name),
        ]
        self.spawn(name)

    def add_sink(self) -> None:
        self.commands["sink"] = ["-m", "sinks.s3"]
        self.spawn("sink")

    def add_producer(self) -> None:
        self.commands["producer"] = [
            "-m",
            "producers.prompts",
            str(self.input_path),
            "--bad-lines",
            str(self.bad_lines_path),
            "--no-progress",
        ]
        self.spawn("producer")

    @property
    def bad_lines_path(self) -> Path:
        return self.work_dir / "bad-lines.jsonl"

    async def wait_healthy(self, i: int, timeout_s: float = 60.0) -> bool:
        """Wait until simulator ``i`` answers ``GET /health`` with 200; False after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.servers[i]}/health")).status_code == 200:
                        return True
                await asyncio.sleep(0.3)
        return False

    async def set_faults(self, i: int, faults: dict[str, object] | None) -> bool:
        """``POST /simulator/faults`` (``None``: ``DELETE``, clear all) on simulator ``i``, up to
        3 tries of 5 s; True when it answered 200."""
        url = f"{self.servers[i]}/simulator/faults"
        async with httpx.AsyncClient(timeout=5.0) as client:
            for _ in range(3):
                try:
                    resp = await (client.delete(url) if faults is None else client.post(url, json=faults))
                    if resp.status_code == 200:
                        return True
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.5)
        return False

    async def set_gate(self, action: Literal["halt", "resume"], timeout_s: float) -> bool:
        """Halt or resume the run on its control topic (:func:`launch.gate.control.change_gate`),
        asking again while Kafka does not answer, for up to ``timeout_s`` seconds; True when done
        (or already so)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await change_gate(self.settings, action, "fault audit", by="bench.chaos")
            except (KafkaError, TimeoutError, OSError):
                if time.monotonic() > deadline:
                    return False
                await asyncio.sleep(1.0)
                continue
            self.halted = action == "halt"
            return True

    # -- stop -----------------------------------------------------------------------------------
    def kill(self, name: str) -> int | None:
        """SIGKILL ``name`` now and reap it; returns its pid (None: it was not running)."""
        self.down.add(name)
        proc = self.children.procs.get(name)
        if proc is None or proc.poll() is not None:
            return None
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        return proc.pid

    async def terminate(self, name: str, grace_s: float) -> int | None:
        """SIGTERM ``name`` and wait up to ``grace_s`` seconds (then SIGKILL); its exit status."""
        self.down.add(name)
        proc = self.children.procs.get(name)
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                await asyncio.wait_for(asyncio.to_thread(proc.wait), grace_s)
            except TimeoutError:
                proc.kill()
                await asyncio.to_thread(proc.wait, 10)
        return proc.returncode

    async def stop_all(self) -> dict[str, int | None]:
        """SIGTERM every process (consumers and sink drain), in parallel; exit statuses."""
        names = [n for n in self.children.procs if self.running(n)]
        grace = self.stop_grace_s
        statuses = await asyncio.gather(*(self.terminate(n, grace) for n in names))
        self.children.terminate_all(5.0)
        return dict(zip(names, statuses, strict=True))

    def stop_stack(self) -> None:
        """Stop the brokers and S3 of this audit's stack, all at once (SIGTERM, SIGKILL after 30 s)."""
        names = self.stack.names(["kafka", "s3"])
        with ThreadPoolExecutor(len(names)) as pool:
            list(pool.map(self.stack.processes.stop, names))

    # -- supervision ----------------------------------------------------------------------------
    def log_tail(self, name: str, chars: int = 1500) -> str:
        path = self.log_dir / f"{name}.log"
        try:
            return path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def check_exits(self) -> list[Exit]:
        """Record and restart processes that exited on their own (the producer only until it
        finished); returns the exits found now."""
        found = []
        for name, proc in list(self.children.procs.items()):
            if name in self.down or name not in self.commands or proc.poll() is None:
                continue  # a one-shot child (the export) is awaited by whoever started it
            status = proc.returncode
            if name == "producer" and status in (0, 1):
                self.producer_status = status
                self.down.add(name)
                continue
            exit_ = Exit(name, status, time.monotonic(), self.log_tail(name))
            if status == 3 and exit_.at < self.kafka_down_until:
                self.outage_exits.append(exit_)
            else:
                self.exits.append(exit_)
                found.append(exit_)
            self.spawn(name)
        return found

    async def supervise(self, interval_s: float = 1.0) -> None:
        """:meth:`check_exits` every ``interval_s`` seconds, until cancelled."""
        while True:
            self.check_exits()
            await asyncio.sleep(interval_s)

    async def run_export(self, to: Path, timeout_s: float = 300.0) -> tuple[int, str]:
        """``python -m sinks.export`` on the run into ``to``: (exit status, its output). With
        ``--allow-missing``: a run with ids missing is published all the same, so that the audit
        names each missing id (``dataset_exactly_once``) instead of finding no dataset; every other
        problem still fails the export."""
        argv = ["-m", "sinks.export", "--run-id", self.settings.run_id, "--to", str(to), "--allow-missing"]
        log = self.log_dir / "export.log"
        proc = self.children.spawn("export", argv, self.env, log)
        try:
            status = await asyncio.wait_for(asyncio.to_thread(proc.wait), timeout_s)
        except TimeoutError:
            proc.kill()
            status = -9
        self.children.procs.pop("export", None)
        return status, log.read_text(errors="replace")
