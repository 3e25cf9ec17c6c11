"""Fixtures of the generation consumer's process tests: fast-failing settings, a simulated server
and the test's consumer fleet (SIGKILLed at the end)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from simulator import SimulatedServer
from streams.config import Settings
from tests.consumers.support import TIME_SCALE, Fleet


@pytest.fixture
def cs(settings: Settings) -> Settings:
    """Settings with short group timings and fast failure detection for tests, and the quality
    gate's judging off: these tests check delivery with synthetic prompts whose tiny budgets
    (``max_tokens`` 50 with thinking on) are meant to be cut, which the gate would rightly halt
    (a halt written by hand is still obeyed). The gate's own tests turn it on
    (``tests/consumers/test_fleet_gate.py``)."""
    consumer = settings.consumer.model_copy(
        update={
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
            "commit_interval_s": 0.3,
            "down_after_failures": 3,
            "down_grace_s": 3.0,
            "hang_timeout_s": 4.0,
            "retry_initial_s": 0.1,
            "retry_max_s": 0.5,
            "shutdown_deadline_s": 10.0,
        }
    )
    gate = settings.gate.model_copy(update={"enabled": False})
    return settings.model_copy(update={"consumer": consumer, "gate": gate})


@pytest.fixture
async def sim() -> AsyncIterator[SimulatedServer]:
    async with SimulatedServer(time_scale=TIME_SCALE) as server:
        yield server


@pytest.fixture
def fleet(cs: Settings, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(cs, tmp_path)
    yield f
    f.stop_all()
