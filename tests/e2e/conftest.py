"""Fixtures of the end-to-end tests: servers already running, as a user's on a GPU host."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

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
