"""Child processes of a benchmark: started from the repository root with a log file each, killed
with their parent (Linux ``PR_SET_PDEATHSIG``), and ended by pid, never by name."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import psutil

REPO_ROOT = Path(__file__).resolve().parents[1]


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL us if the benchmark dies (Linux ``PR_SET_PDEATHSIG``)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


class Children:
    """Processes this benchmark started; :meth:`terminate_all` ends them (only them, by pid)."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []

    def spawn(
        self, name: str, args: Sequence[str], env: dict[str, str], log: Path
    ) -> subprocess.Popen[bytes]:
        """Start ``python <args>`` in the repository root, output to ``log``."""
        out = log.open("ab")
        self._logs.append(out)
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=REPO_ROOT,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
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
