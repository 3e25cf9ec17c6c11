"""Fixtures of the end-to-end tests: servers already running, as a user's on a GPU host."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import start_simulator


def _simulator(port: int, log: Path) -> tuple[subprocess.Popen[str], str]:
    """A simulator at 50 times real time with 8 slots on ``port`` (0: any free one)."""
    args = ("--time-scale", "50", "--max-running-requests", "8", "--served-model-name", "sim-qwen3")
    return start_simulator(log, *args, port=port)


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
