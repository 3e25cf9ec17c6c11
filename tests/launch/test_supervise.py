"""supervisord supervision: programs get the environment, restart after SIGKILL, stop on shutdown."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from launch.stack.process import wait_until
from launch.supervise import Program, Supervisor
from streams.errors import ConfigError


def _wait(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    assert wait_until(check, timeout_s=timeout_s, interval_s=0.1), "timed out"


def test_program_restarts_after_sigkill_and_stops_on_shutdown(tmp_path: Path) -> None:
    script = "import os, time; print('token', os.environ['KAFKAGEN_TEST_VALUE'], flush=True); time.sleep(300)"
    supervisor = Supervisor(tmp_path / "sv", {"KAFKAGEN_TEST_VALUE": 'a "quoted" 100% value'})
    supervisor.start([Program("sleeper", (sys.executable, "-c", script), stop_wait_s=5)], cwd=tmp_path)
    try:
        _wait(lambda: supervisor.states().get("sleeper") == "RUNNING")
        first = supervisor.pid("sleeper")
        assert first > 0
        os.kill(first, signal.SIGKILL)
        _wait(lambda: supervisor.pid("sleeper") not in (0, first))
        second = supervisor.pid("sleeper")
        log = supervisor.log_dir / "sleeper.log"
        # started twice, each time with the environment intact
        _wait(lambda: log.read_text().count('token a "quoted" 100% value') == 2)
        assert "100% value" not in supervisor.conf.read_text()  # settings are not written to disk
    finally:
        supervisor.shutdown()
    assert not supervisor.running()
    assert not psutil.pid_exists(second) or psutil.Process(second).status() == psutil.STATUS_ZOMBIE


def test_starting_again_replaces_a_supervisord_whose_programs_take_time_to_stop(tmp_path: Path) -> None:
    """The re-run of a job whose terminal went away: its supervisord still runs, and its program
    (a consumer draining in-flight requests) takes seconds to stop. Starting the job again must
    wait for the old supervisord to be gone, then start the new one (it used to fail to bind the
    socket the old one still held)."""
    slow = (
        "import signal, sys, time; "
        "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(3), sys.exit(0))); "
        "print('up', flush=True); time.sleep(300)"
    )
    first = Supervisor(tmp_path / "sv")
    first.start([Program("drainer", (sys.executable, "-c", slow), stop_wait_s=20)], cwd=tmp_path)
    _wait(lambda: first.states().get("drainer") == "RUNNING")
    old = first.pid("drainer")
    again = Supervisor(tmp_path / "sv")  # a new invocation of the same job
    try:
        again.start([Program("drainer", (sys.executable, "-c", slow), stop_wait_s=20)], cwd=tmp_path)
        _wait(lambda: again.states().get("drainer") == "RUNNING")
        assert again.pid("drainer") not in (0, old)
        assert not psutil.pid_exists(old) or psutil.Process(old).status() == psutil.STATUS_ZOMBIE
    finally:
        again.shutdown()
    assert not again.running()


def test_arguments_reach_the_program_exactly_as_given(tmp_path: Path) -> None:
    """supervisord's config parser drops an inline comment (' ;' or ' #', even inside quotes) and
    expands '%': a model path such as '/models/My Model ;v2 #3' must still arrive whole."""
    args = ["/models/My Model ;v2 #3", "100% it's", 'say "hi"', "a=b", "tab\t;x", "#first", ";semi"]
    script = "import json, sys, time; print('args', json.dumps(sys.argv[1:]), flush=True); time.sleep(300)"
    supervisor = Supervisor(tmp_path / "sv")
    supervisor.start([Program("echo", (sys.executable, "-c", script, *args), stop_wait_s=5)], cwd=tmp_path)
    try:
        log = supervisor.log_dir / "echo.log"
        _wait(lambda: log.exists() and "args " in log.read_text())
        line = next(line for line in log.read_text().splitlines() if line.startswith("args "))
        assert json.loads(line.removeprefix("args ")) == args
    finally:
        supervisor.shutdown()


def test_an_argument_with_a_newline_is_refused_before_supervisord_starts(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path / "sv")
    with pytest.raises(ConfigError, match="newline"):
        supervisor.write_config([Program("p", (sys.executable, "-c", "print(1)\nprint(2)"))], tmp_path)


def test_shutdown_after_supervisord_was_sigkilled_stops_what_it_left_running(tmp_path: Path) -> None:
    """A SIGKILLed supervisord leaves its programs running (reparented to init); shutdown (what
    the main job calls at its end) must still stop them, and only them."""
    script = "import time; time.sleep(300)"
    supervisor = Supervisor(tmp_path / "sv")
    other = Supervisor(tmp_path / "other")
    programs = [Program(f"p{i}", (sys.executable, "-c", script), stop_wait_s=5) for i in range(2)]
    supervisor.start(programs, cwd=tmp_path)
    other.start([Program("keep", (sys.executable, "-c", script), stop_wait_s=5)], cwd=tmp_path)
    try:
        _wait(lambda: set(supervisor.states().values()) == {"RUNNING"} and other.pid("keep") > 0)
        pids = {supervisor.pid("p0"), supervisor.pid("p1")}
        kept = other.pid("keep")
        os.kill(int((supervisor.home / "supervisord.pid").read_text()), signal.SIGKILL)
        _wait(lambda: not supervisor.running())
        assert all(psutil.pid_exists(p) for p in pids)  # what a SIGKILLed supervisord leaves
        assert {p.pid for p in supervisor.orphans()} == pids
        supervisor.shutdown(stop_wait_s=5)
        assert not any(
            psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids
        )
        assert other.pid("keep") == kept  # another supervisord's program is not touched
    finally:
        other.shutdown()
        supervisor.shutdown(stop_wait_s=5)
