"""CPU accounting of a phase: machine-wide busy and stolen cores, the benchmark's own CPU
seconds and the local Kafka broker's (found by its listening port), read with psutil."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

__all__ = ["CpuClock", "CpuUsage", "find_broker", "process_cpu_seconds"]


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


class CpuClock:
    """Machine-wide and own-process CPU counters, read at the start and end of a phase."""

    def __init__(self, broker: psutil.Process | None, sims: Callable[[], float] = lambda: 0.0) -> None:
        self.wall = time.monotonic()
        self.machine = psutil.cpu_times()
        own = psutil.Process().cpu_times()
        self.sims = sims
        self.own = own.user + own.system + sims()
        """CPU seconds of this process and of the simulator processes (``sims``), if any."""
        self.broker_process = broker
        self.broker = process_cpu_seconds(broker)

    def since(self, clients_s: float) -> CpuUsage:
        now = CpuClock(self.broker_process, self.sims)
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


def process_cpu_seconds(proc: psutil.Process | None) -> float | None:
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
