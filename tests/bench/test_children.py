"""bench's one owner of child processes (:mod:`bench.children`): no Kafka, short-lived children."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.children import REPO_ROOT, Children, python_argv, run_captured, start, wait_with_usage

pytestmark = pytest.mark.timeout(30)


def test_start_runs_from_the_repository_root_with_the_given_env(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    code = "import os, sys; print(os.getcwd()); print(os.environ.get('BENCH_X')); sys.exit(3)"
    with log.open("wb") as out:
        proc = start(python_argv(["-c", code]), env={"BENCH_X": "y"}, stdout=out)
    usage = wait_with_usage(proc)
    assert proc.returncode == 3
    assert usage.ru_maxrss > 0
    assert log.read_text().splitlines() == [str(REPO_ROOT), "y"]


def test_run_captured_returns_stdout_and_raises_on_failure() -> None:
    assert run_captured([sys.executable, "-c", "print('hi')"], timeout_s=20) == "hi\n"
    with pytest.raises(subprocess.CalledProcessError):
        run_captured([sys.executable, "-c", "raise SystemExit(1)"], timeout_s=20)


def test_children_append_to_their_log_and_are_terminated_by_name(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    log.write_text("before\n")
    children = Children()
    children.spawn("quick", ["-c", "print('ran')"], {}, log)
    children.procs["quick"].wait(20)
    children.spawn("sleeper", ["-c", "import time; time.sleep(60)"], {}, tmp_path / "sleeper.log")
    statuses = children.terminate(["sleeper"], grace_s=5)
    assert statuses["sleeper"] is not None and statuses["sleeper"] < 0
    assert "sleeper" not in children.procs
    children.terminate_all(1.0)
    assert children.procs == {}
    assert log.read_text() == "before\nran\n"
