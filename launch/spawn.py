"""Starting a child process: the one place kafkagen (and its benchmarks) calls ``Popen``.

Two lifetimes, both with stdin closed and stdout and stderr appended to one log file:

* ``detach=True`` (the local stack's services): a session of its own, so the process outlives
  the terminal and the command that started it (``setsid``; stopped later by pid file).
* ``detach=False`` (a benchmark's or a test harness's children): killed with its parent
  (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, prctl(2)), so a crashed harness leaves nothing
  running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["spawn"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when its parent dies (Linux only; elsewhere a no-op)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    detach: bool,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` with output appended to ``log`` and ``env`` over this process's environment.

    Raises:
        OSError: the executable cannot be run (the caller words the error for its user).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            start_new_session=detach,
            close_fds=True,
            preexec_fn=None if detach or sys.platform != "linux" else _die_with_parent,
        )
