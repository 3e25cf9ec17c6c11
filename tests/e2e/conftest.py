"""Fixtures of the end-to-end tests: servers already running, as a user's on a GPU host."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT


def _simulator(port: int, log: Path) -> tuple[subprocess.Popen[str], str]:
    """Start ``python -m simulator`` on ``port`` (0: any free one); returns it and its URL."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simulator",
            "--port",
            str(port),
            "--time-scale",
            "50",
            "--max-running-requests",
            "8",
            "--served-model-name",
            "sim-qwen3",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the simulator prints its URL once it listens
    match = re.search(r"http://127\.0\.0\.1:\d+", line)
    assert match, f"simulator printed {line!r}; see {log}"
    return proc, match.group(0)


@pytest.fixture
def user_servers(tmp_path: Path) -> Iterator[list[str]]:
    """Two simulators already listening, as a user's SGLang servers on a GPU host. Ports: any free
    ones, or ``KAFKAGEN_TEST_SERVER_PORT`` and the next one when set (a machine shared with other
    test runs that must keep to its own ports)."""
    base = int(os.environ.get("KAFKAGEN_TEST_SERVER_PORT", "0"))
    procs: list[subprocess.Popen[str]] = []
    urls = []
    try:
        for i in range(2):
            proc, url = _simulator(base + i if base else 0, tmp_path / f"sim-{i}.log")
            procs.append(proc)
            urls.append(url)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(20)
