"""Child processes of a benchmark, the one place bench starts them: ``python`` (or any program)
from the repository root, output to a log file or a pipe, optionally killed with their parent
(Linux ``PR_SET_PDEATHSIG``), and ended by pid, never by name.

:func:`start` starts one, through :func:`launch.spawn.spawn` (the project's one ``Popen``);
:class:`Children` keeps named, long-running children and ends them; :func:`run_captured` runs a
program to completion and returns its output; :func:`wait_with_usage` waits for one child and
returns its own resource usage.

Every child runs in the benchmark's process group (no new session), so a terminal's Ctrl-C
reaches it too.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

import psutil

from launch.spawn import Stream, spawn

__all__ = ["REPO_ROOT", "Children", "python_argv", "repo_commit", "run_captured", "start", "wait_with_usage"]

REPO_ROOT = Path(__file__).resolve().parents[1]


def repo_commit() -> str:
    """The commit the children run from, for a result's label: the short ``HEAD`` of
    :data:`REPO_ROOT`, ``-dirty`` with uncommitted changes; ``unknown`` without git. Take it when
    the children start: a commit made while they run is not what they run."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = ["git", "status", "--porcelain"]
        dirty = subprocess.run(status, cwd=REPO_ROOT, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty.stdout.strip() else "")


def python_argv(args: Sequence[str]) -> list[str]:
    """``[<this interpreter>, *args]``: e.g. ``python_argv(["-m", "sinks.s3"])``."""
    return [sys.executable, *args]


def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdout: Stream = None,
    stderr: Stream = None,
    stdin: Stream = subprocess.DEVNULL,
    die_with_parent: bool = True,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in the repository root.

    Args:
        argv: the program and its arguments (:func:`python_argv` for a Python module).
        env: the child's whole environment (None: the benchmark's).
        stdout, stderr, stdin: where the child's streams go (see :data:`Stream`).
        die_with_parent: SIGKILL the child when the benchmark dies (Linux only).

    Raises:
        OSError: the program cannot be started.
    """
    return spawn(
        argv,
        env=env,
        replace_env=env is not None,
        cwd=REPO_ROOT,
        die_with_parent=die_with_parent,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
    )


def run_captured(argv: Sequence[str], *, timeout_s: float) -> str:
    """Run ``argv`` in the current directory to completion; its standard output as text.

    Raises:
        subprocess.CalledProcessError: it exited with a non-zero status.
        subprocess.TimeoutExpired: it ran longer than ``timeout_s`` seconds (it is killed).
    """
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=timeout_s).stdout


def wait_with_usage(proc: subprocess.Popen[bytes]) -> resource.struct_rusage:
    """Wait for ``proc`` (setting its ``returncode``) and return the resources it alone used
    (``os.wait4``: CPU seconds in ``ru_utime``/``ru_stime``, peak RSS in KiB in ``ru_maxrss``)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage


class Children:
    """Processes this benchmark started; :meth:`terminate_all` ends them (only them, by pid)."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []

    def spawn(
        self, name: str, args: Sequence[str], env: dict[str, str], log: Path
    ) -> subprocess.Popen[bytes]:
        """Start ``python <args>`` in the repository root with the benchmark's environment plus
        ``env``, output appended to ``log``, killed with the benchmark."""
        out = log.open("ab")
        self._logs.append(out)
        proc = start(
            python_argv(args),
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.procs[name] = proc
        return proc

    def cpu_seconds(self, names: Sequence[str]) -> float:
        """User + system CPU seconds used so far by the named processes that still run."""
        total = 0.0
        for name in names:
            with contextlib.suppress(psutil.Error, KeyError):
                t = psutil.Process(self.procs[name].pid).cpu_times()
                total += t.user + t.system
        return total

    def terminate(self, names: Sequence[str], grace_s: float) -> dict[str, int | None]:
        """SIGTERM the named processes, wait up to ``grace_s`` for all, SIGKILL the rest.

        Returns each one's exit status (negative: killed by that signal)."""
        procs = {n: self.procs[n] for n in names if n in self.procs}
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + grace_s
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for n in procs:
            del self.procs[n]
        return {n: p.returncode for n, p in procs.items()}

    def terminate_all(self, grace_s: float = 10.0) -> None:
        """End every process still running and close the log files."""
        self.terminate(list(self.procs), grace_s)
        for f in self._logs:
            f.close()
        self._logs.clear()
