"""The run status against a real pipeline: the main job (``python -m launch.run``) on two SGLang-API
simulators already running, 100 real prompts, consumers and sink under supervisord, the export.

Its progress when stdout is not a tty is a handful of plain lines counting prompts (100, not the
107 offsets of the prompts topic, transaction markers included), with no aiokafka log line; then
``kafkagen status --json`` matches what happened (published == 100, every result in S3, lag 0,
both consumers listed with the partitions they hold, the export's report), and ``status
--watch`` writes one plain line per interval when not on a tty."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launch.scale.policy import instance_id
from launch.stack import LocalStack
from launch.supervise import Supervisor
from producers.sample import DEMO_FILE
from tests.helpers import REPO_ROOT, simulators, unused_port

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[str]]:
    """Two simulators (8 slots each, 20x real time) on free ports: a user's servers."""
    args = ("--time-scale", "20", "--max-running-requests", "8", "--served-model-name", "sim-qwen3")
    base = unused_port(2)
    with simulators(tmp_path, 2, *args, ports=(base, base + 1)) as urls:
        yield urls


def _on_a_terminal(argv: list[str], *, until: Callable[[str], bool], timeout_s: float) -> str:
    """What ``argv`` writes on a pseudo-terminal until that text satisfies ``until`` (or
    ``timeout_s`` seconds pass, or it closes the terminal), then interrupted (SIGINT)."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdin=secondary, stdout=secondary, stderr=secondary)
    os.close(secondary)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not until(b"".join(chunks).decode("utf-8", "replace")):
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    chunks.append(os.read(primary, 65536))
                except OSError:  # the process closed the terminal
                    break
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        while select.select([primary], [], [], 0.2)[0]:
            try:
                data = os.read(primary, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(primary)
        if proc.poll() is None:
            proc.kill()
    return b"".join(chunks).decode("utf-8", "replace")


def _status(run_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launch.cli", "status", "--run-id", run_id, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_status_and_progress_on_a_real_pipeline(
    local_stack: LocalStack, kafka: str, s3: str, servers: list[str], tmp_path: Path, unique: str
) -> None:
    run_id = f"e2e-status-{unique}"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(DEMO_FILE)]
    for url in servers:
        args += ["--server", url]
    args += [
        "--server-timeout",
        "60",
        "--to",
        str(tmp_path / "dataset"),
        "--timeout",
        "480",
        "--keep-running",
    ]
    supervisor = Supervisor(local_stack.home / "runs" / run_id)
    try:
        done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=540, check=False)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-4000:]

        # the progress: a handful of plain lines in prompts, each after its time, then the summary
        lines = done.stdout.splitlines()
        progress = [line for line in lines if re.match(r"\d\d:\d\d:\d\d progress: ", line)]
        assert 1 <= len(progress) <= 12, output
        assert all(
            re.match(
                r"\d\d:\d\d:\d\d progress: generated \d+/100(?: \(\d+ errors\))?, "
                r"(?:in S3 \d+/\d+, |waiting for the first results; )",
                p,
            )
            for p in progress
        ), progress
        assert re.match(r"\d\d:\d\d:\d\d progress: generated 100/100", progress[-1]), progress
        assert "/107" not in output and "offset" not in "\n".join(progress)
        assert "aiokafka" not in output and "GroupCoordinator" not in output, output
        first = lines.index(progress[0])
        last = lines.index(progress[-1])
        assert lines[first : last + 1] == progress, "nothing but progress lines between them, no blank line"
        assert len(output.splitlines()) < 60, output

        # the status document matches what happened
        status = _status(run_id, "--json")
        assert status.returncode == 0, status.stderr
        doc = json.loads(status.stdout)
        assert doc["schema_version"] == 1 and doc["state"] == "done", doc
        p = doc["prompts"]
        assert (p["published"], p["published_exact"]) == (100, True)
        assert p["results"] >= 100 and p["in_s3"] == p["results"], p  # a handover may generate one twice
        assert p["completions"] + p["errors"] == p["results"] and p["remaining"] == 0
        assert p["exported"] == 100 and doc["export"]["ids"] == 100
        lag = doc["lag"]
        assert lag["total"] == 0 and lag["sink"] == {"lag": 0, "members": 1}
        assert sum(x["end_offset"] for x in lag["partitions"]) > 100, "offsets include transaction markers"
        members = {c["member"]: c["partitions"] for c in lag["consumers"]}
        assert set(members) == {instance_id(run_id, url) for url in servers}, lag["consumers"]
        assert sorted(q for ps in members.values() for q in ps) == list(range(7))
        assert {x["owner"] for x in lag["partitions"]} == set(members)

        # --watch, not on a tty: one plain line per interval
        watch = subprocess.Popen(
            [sys.executable, "-m", "launch.cli", "status", "--run-id", run_id, "--watch", "--interval", "1"],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert watch.stdout is not None
        lines = [watch.stdout.readline() for _ in range(3)]  # one a second: the event is each line
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=30)
        assert watch.returncode == 130, err
        out = "".join(lines) + out
        watched = out.splitlines()
        assert 3 <= len(watched) <= 5, out
        for line in watched:
            assert re.match(rf"\d\d:\d\d:\d\d run {re.escape(run_id)} done: published 100, ", line), line
        assert "Traceback" not in err, err

        # --watch on a terminal: one live view, redrawn in place (rich Live), not lines appended
        screen = _on_a_terminal(
            [
                sys.executable,
                "-m",
                "launch.cli",
                "status",
                "--run-id",
                run_id,
                "--watch",
                "--interval",
                "0.5",
            ],
            # three views drawn: the event waited for (a loaded machine starts the command slowly)
            until=lambda screen: screen.count("generation consumers") >= 3,
            timeout_s=90,
        )
        assert screen.count("generation consumers") >= 3, screen[-2000:]
        assert "\x1b[1A" in screen or "\x1b[2K" in screen, "the view is redrawn in place"
        assert "Traceback" not in screen, screen[-2000:]
    finally:
        supervisor.shutdown()
