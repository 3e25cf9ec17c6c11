"""Starting a child process: the one place kafkagen (and its benchmarks) calls ``Popen``.

Both lifetimes close stdin and append stdout and stderr to one log file. ``detach=True`` (the
local stack's services): a session of its own (``setsid``), so the process outlives the terminal
and the command that started it (stopped later by pid file). ``detach=False`` (a benchmark's or a
test harness's children): killed with its parent (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``,
prctl(2)), so a crashed harness leaves nothing running.
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
from typing import IO

__all__ = ["Stream", "spawn"]

_PR_SET_PDEATHSIG = 1
_LINUX = sys.platform == "linux"


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when its parent dies (Linux only; elsewhere a no-op)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


Stream = IO[bytes] | int | None
"""Where a child's stream goes: an open file, ``subprocess.DEVNULL``/``PIPE``/``STDOUT``, or
``None`` (the parent's own)."""


def spawn(
    argv: Sequence[str],
    *,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    replace_env: bool = False,
    cwd: Path | str | None = None,
    detach: bool = False,
    die_with_parent: bool = True,
    stdin: Stream = subprocess.DEVNULL,
    stdout: Stream = None,
    stderr: Stream = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv``; with ``log``, stdout and stderr are appended to that file.

    Args:
        env: variables over this process's environment (the whole environment with
            ``replace_env``).
        detach: a session of its own (the stack's services); implies not ``die_with_parent``.
        die_with_parent: SIGKILL the child when this process dies (Linux only).
        stdin, stdout, stderr: the streams when there is no ``log`` (:data:`Stream`).

    Raises:
        OSError: the executable cannot be run (the caller words the error for its user).
    """
    out: IO[bytes] | None = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        out = log.open("ab")
        stdout, stderr = out, subprocess.STDOUT
    try:
        return subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=dict(env or {}) if replace_env else {**os.environ, **(env or {})},
            start_new_session=detach,
            close_fds=True,
            preexec_fn=_die_with_parent
            if die_with_parent and not detach and sys.platform == "linux"
            else None,
        )
    finally:
        if out is not None:
            out.close()
