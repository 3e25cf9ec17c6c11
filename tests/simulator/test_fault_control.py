"""The armed state of the faults (:mod:`simulator.fault_control`), the in-flight registry's
abort rules (:mod:`simulator.inflight`) and the prefix cache: pure, no server."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from simulator.engine import Engine, Job
from simulator.fault_control import ALL_FAULT_FIELDS, FaultControl
from simulator.inflight import InflightRequests
from simulator.prefix_cache import PrefixCache
from simulator.profile import FaultConfig


class FakeEngine:
    """The parts of :class:`Engine` the fault control and the registry call."""

    def __init__(self) -> None:
        self.clock = 0.0
        self.hang = False
        self.slow = 1.0
        self.cancelled: list[tuple[object, str]] = []

    def now(self) -> float:
        return self.clock

    def wall_seconds(self, simulated_s: float) -> float:
        return simulated_s / 1000

    def set_hang(self, hang: bool) -> None:
        self.hang = hang

    def set_slow_factor(self, factor: float) -> None:
        self.slow = factor

    def cancel(self, job: Any, reason: str) -> bool:
        self.cancelled.append((job, reason))
        return True


def armed(config: FaultConfig, engine: FakeEngine) -> FaultControl:
    control = FaultControl(config, on_crash=lambda: None)
    control.arm(cast(Engine, engine), ALL_FAULT_FIELDS)
    return control


def test_503_count_then_window() -> None:
    engine = FakeEngine()
    control = armed(FaultConfig(error_503_count=2), engine)
    assert [control.take_503(0.0) for _ in range(3)] == [True, True, False]
    control.config = FaultConfig(error_503_for_s=5.0)
    control.arm(cast(Engine, engine), {"error_503_for_s"})
    assert control.take_503(4.9) and not control.take_503(5.0)
    assert control.state(5.0, crashed=False)["state"]["error_503_window_left_s"] == 0.0


def test_crash_after_requests_counts_down_then_is_spent() -> None:
    control = armed(FaultConfig(crash_after_requests=2), FakeEngine())
    assert [control.count_request() for _ in range(4)] == [False, False, True, False]
    control.crash_spent()
    assert control.config.crash_after_requests is None and control.config.crash_after_s is None


def test_arm_hands_engine_faults_over_and_times_the_crash() -> None:
    async def scenario() -> tuple[FakeEngine, list[str], dict[str, Any]]:
        engine = FakeEngine()
        crashes: list[str] = []
        control = FaultControl(
            FaultConfig(hang=True, slow_factor=3.0, crash_after_s=10.0), lambda: crashes.append("x")
        )
        control.arm(cast(Engine, engine), ALL_FAULT_FIELDS)
        state = control.state(4.0, crashed=False)["state"]
        await asyncio.sleep(0.05)  # 10 simulated s = 0.01 wall s
        return engine, crashes, state

    engine, crashes, state = asyncio.run(scenario())
    assert engine.hang and engine.slow == 3.0
    assert state["crash_in_s"] == 6.0
    assert crashes == ["x"]


def test_abort_matching_needs_the_rid_in_flight_and_takes_its_prefix() -> None:
    engine = FakeEngine()
    jobs = {rid: cast(Job, object()) for rid in ("a", "a-1", "b")}
    inflight = InflightRequests()
    for rid, job in jobs.items():
        inflight.add(rid, job)
    assert not inflight.abort_matching("a-", cast(Engine, engine))
    assert inflight.abort_matching("a", cast(Engine, engine))
    assert engine.cancelled == [(jobs["a"], "abort_request"), (jobs["a-1"], "abort_request")]
    engine.cancelled.clear()
    assert inflight.abort_matching("a", cast(Engine, engine), sparing=jobs["a"])
    assert engine.cancelled == [(jobs["a-1"], "abort_request")]
    inflight.remove("b", cast(Job, object()))  # not the registered job: kept
    assert "b" in inflight
    inflight.remove("b", jobs["b"])
    assert "b" not in inflight


def test_prefix_cache_counts_the_longest_seen_prefix_below_the_prompt() -> None:
    cache = PrefixCache(entries=10)
    system = {"role": "system", "content": "Be brief. " * 20}
    first = [system, {"role": "user", "content": "one"}]
    assert cache.cached_tokens(first, 100) == 0
    second = [system, {"role": "user", "content": "two"}]
    cached = cache.cached_tokens(second, 100)
    assert 0 < cached < 100
    assert cache.cached_tokens(first, 5) == 4  # at most prompt_tokens - 1
    cache.clear()
    assert cache.cached_tokens(first, 100) == 0
