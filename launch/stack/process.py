"""Detached service processes with pid files: start, stop, status, port checks.

A service runs in its own session (``setsid``), so it outlives the shell that started it; its pid
is kept in ``<home>/run/<name>.pid``, its output in ``<home>/logs/<name>.log``. ``stop`` only
signals a recorded pid whose start time in clock ticks since boot (``/proc/<pid>/stat`` field 22,
proc(5)) still matches. Why not the wall-clock start time: docs/local-stack.md, "Processes".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from launch.spawn import spawn
from streams.errors import StackError

__all__ = [
    "ProcessManager",
    "ProcessStatus",
    "ServiceSpec",
    "port_owner",
    "start_ticks",
    "wait_until",
    "which_or_raise",
]


@dataclass(frozen=True)
class ServiceSpec:
    """How to run one service process.

    Attributes:
        name: short unique name, used for the pid and log file names (``kafka``, ``s3``, ``llm-30000``).
        argv: the command line; ``argv[0]`` must be an absolute path or on PATH.
        ports: TCP ports on 127.0.0.1 the service will listen on; checked free before start.
        env: extra environment variables (merged over the current environment).
        cwd: working directory.
    """

    name: str
    argv: tuple[str, ...]
    ports: tuple[int, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: Path | None = None


@dataclass(frozen=True)
class ProcessStatus:
    """What a pid file says and whether that process still runs."""

    name: str
    pid: int | None
    running: bool
    log: Path


class ProcessManager:
    """Starts and stops detached service processes recorded under ``home``."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.run_dir = home / "run"
        self.log_dir = home / "logs"

    def pid_path(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def process(self, name: str) -> psutil.Process | None:
        """The live process recorded for ``name``, or ``None`` (no pid file, dead, or pid reused)."""
        path = self.pid_path(name)
        try:
            pid_text, marker, *_ = [*path.read_text().splitlines(), "", ""]
            pid = int(pid_text)
        except (OSError, ValueError):
            return None
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
        except psutil.Error:
            return None
        # A recycled pid has another start time: never signal a stranger.
        if marker.strip() and marker.strip() != start_ticks(pid):
            return None
        return proc

    def recorded_ports(self, name: str) -> tuple[int, ...]:
        """The ports the recorded process of ``name`` was started with (empty if unknown)."""
        try:
            lines = self.pid_path(name).read_text().splitlines()
        except OSError:
            return ()
        return tuple(int(p) for p in lines[2].split()) if len(lines) > 2 else ()

    def status(self, name: str) -> ProcessStatus:
        proc = self.process(name)
        return ProcessStatus(name, proc.pid if proc else None, proc is not None, self.log_path(name))

    def start(self, spec: ServiceSpec) -> tuple[int, bool]:
        """Start ``spec`` detached unless it already runs.

        Returns:
            ``(pid, started)``: ``started`` is False when the recorded process was already running.

        Raises:
            StackError: a port is taken by another process (naming its pid and command), or the
                executable cannot be run.
        """
        existing = self.process(spec.name)
        if existing is not None:
            ports = self.recorded_ports(spec.name)
            if ports and ports != spec.ports:  # pid files of older versions record no ports
                raise StackError(
                    f"{spec.name} is already running (pid {existing.pid}) on port(s) "
                    f"{', '.join(map(str, ports)) or '?'}, not {', '.join(map(str, spec.ports))} as now "
                    f"configured; stop it first: python -m launch.stack down"
                )
            return existing.pid, False
        for port in spec.ports:
            owner = port_owner(port)
            if owner is not None:
                raise StackError(
                    f"{spec.name}: port {port} on 127.0.0.1 is taken by {owner}; stop it, or configure "
                    f"another port (see README, Configuration)"
                )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            proc = spawn(spec.argv, log=self.log_path(spec.name), env=spec.env, cwd=spec.cwd, detach=True)
        except OSError as exc:
            raise StackError(f"{spec.name}: cannot run {spec.argv[0]}: {exc}") from None
        port_list = " ".join(map(str, spec.ports))
        self.pid_path(spec.name).write_text(f"{proc.pid}\n{start_ticks(proc.pid)}\n{port_list}\n")
        return proc.pid, True

    def stop(self, name: str, timeout_s: float = 30.0) -> bool:
        """SIGTERM the recorded process group, SIGKILL it after ``timeout_s`` seconds.

        Returns:
            True when a running process was stopped, False when none was running.
        """
        proc = self.process(name)
        self.pid_path(name).unlink(missing_ok=True)
        if proc is None:
            return False
        _signal_group(proc, signal.SIGTERM)
        _, alive = psutil.wait_procs([proc], timeout=timeout_s)
        if alive:
            _signal_group(proc, signal.SIGKILL)
            psutil.wait_procs(alive, timeout=10)
        return True

    def kill(self, name: str) -> bool:
        """SIGKILL the recorded process at once (for crash tests). Returns False if none ran."""
        proc = self.process(name)
        if proc is None:
            return False
        _signal_group(proc, signal.SIGKILL)
        psutil.wait_procs([proc], timeout=10)
        self.pid_path(name).unlink(missing_ok=True)
        return True

    def tail(self, name: str, lines: int = 20) -> str:
        """The last ``lines`` lines of a service's log ('' when it has none)."""
        try:
            data = self.log_path(name).read_bytes()[-64 * 1024 :]
        except OSError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def start_ticks(pid: int) -> str:
    """Start time of process ``pid`` in clock ticks since boot, as text (field 22 of
    ``/proc/<pid>/stat``, proc(5)): fixed for the process's lifetime, whatever the wall clock
    does. ``""`` when the process is gone or ``/proc`` cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # The command name (field 2) is in parentheses and may itself hold spaces or ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else ""


def _signal_group(proc: psutil.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(os.getpgid(proc.pid), sig)
    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)


def port_owner(port: int) -> str | None:
    """Describe the process listening on TCP ``port`` ("pid 1234 (java)"), or None when it is free."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.Error:
        conns = []
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            if conn.pid is None:
                return "another process"
            try:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
            except psutil.Error:
                return f"pid {conn.pid}"
    return None


def wait_until(check: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.25) -> bool:
    """Poll ``check()`` until it returns True or ``timeout_s`` seconds pass; return the last result."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def which_or_raise(candidates: Sequence[Path | str], what: str, hint: str) -> str:
    """The first existing executable among ``candidates`` (paths or names on PATH).

    Raises:
        StackError: none exists: ``"<what> not found: <hint>"``.
    """
    for cand in candidates:
        found = shutil.which(str(cand))
        if found:
            return found
    raise StackError(f"{what} not found: {hint}")
