"""Fixtures of the end-to-end tests: servers already running, as a user's on a GPU host."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from launch.supervise import Supervisor
from streams.config import Settings
from tests.helpers import simulators

SIMULATOR_ARGS = ("--time-scale", "50", "--max-running-requests", "8", "--served-model-name", "sim-qwen3")
"""A simulator at 50 times real time with 8 slots."""


@pytest.fixture
def user_servers(tmp_path: Path) -> Iterator[list[str]]:
    """Two simulators already listening, as a user's SGLang servers on a GPU host. Ports: any free
    ones, or ``KAFKAGEN_TEST_SERVER_PORT`` and the next one when set (a machine shared with other
    test runs that must keep to its own ports)."""
    base = int(os.environ.get("KAFKAGEN_TEST_SERVER_PORT", "0"))
    with simulators(tmp_path, 2, *SIMULATOR_ARGS, ports=(base, base + 1) if base else ()) as urls:
        yield urls


def fleets_started_by(nodeid: str, runs: Path) -> list[Path]:
    """The folders (``<runs>/<run id>``) of the runs whose supervisord still runs and was started by
    the test ``nodeid``: its processes inherit ``PYTEST_CURRENT_TEST`` ("<nodeid> (<phase>)"), so
    another xdist worker's fleets are not among them."""
    found = []
    for home in sorted(p for p in runs.glob("*") if p.is_dir()):
        proc = Supervisor(home).process()
        try:
            test = proc.environ().get("PYTEST_CURRENT_TEST", "") if proc is not None else ""
        except psutil.Error:  # gone meanwhile
            continue
        if test.rsplit(" ", 1)[0] == nodeid:
            found.append(home)
    return found


@pytest.fixture(autouse=True)
def _fleets_stopped(request: pytest.FixtureRequest, base_settings: Settings) -> Iterator[None]:
    """After each test, the fleets it started are stopped. A run's fleet outlives its main job by
    design (a re-run adopts it), so a test that failed before stopping its own left consumers
    running into the tests after it (CI once found four, 35 min later)."""
    yield
    for home in fleets_started_by(request.node.nodeid, Path(base_settings.home) / "runs"):
        Supervisor(home).shutdown()
