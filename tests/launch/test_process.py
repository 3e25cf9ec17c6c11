"""The stack's process records: a recorded service is found again by pid and kernel start time,
whatever the wall clock does, and a recycled pid is never taken for it."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from launch.stack.process import ProcessManager, ServiceSpec, start_ticks


def _sleeper(manager: ProcessManager) -> int:
    sleep = shutil.which("sleep")
    assert sleep is not None
    pid, started = manager.start(ServiceSpec("sleeper", (sleep, "60")))
    assert started
    return pid


def test_a_recorded_service_is_found_by_its_kernel_start_time(tmp_path: Path) -> None:
    manager = ProcessManager(tmp_path)
    pid = _sleeper(manager)
    try:
        lines = manager.pid_path("sleeper").read_text().splitlines()
        assert lines[0] == str(pid)
        assert lines[1] == start_ticks(pid) and lines[1].isdigit()
        proc = manager.process("sleeper")
        assert proc is not None and proc.pid == pid
        assert manager.status("sleeper").running
    finally:
        assert manager.stop("sleeper", timeout_s=5)
    assert manager.process("sleeper") is None


def test_a_pid_with_another_start_time_is_a_stranger(tmp_path: Path) -> None:
    manager = ProcessManager(tmp_path)
    pid = _sleeper(manager)
    try:
        path = manager.pid_path("sleeper")
        ticks = int(start_ticks(pid))
        path.write_text(f"{pid}\n{ticks + 1}\n\n")
        assert manager.process("sleeper") is None, "a recycled pid must not be taken for the service"
        assert not manager.kill("sleeper"), "kill never signals a stranger"
        assert os.path.exists(f"/proc/{pid}")
        path.write_text(f"{pid}\n{ticks}\n\n")
        assert manager.process("sleeper") is not None
    finally:
        assert manager.kill("sleeper")
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert start_ticks(pid) == "", "a reaped process has no start time"
