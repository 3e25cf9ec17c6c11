from __future__ import annotations

import random

import pytest

from consumers.health import HealthConfig, ServerHealth
from streams.retry import Backoff


def test_down_after_consecutive_failures_and_up_again() -> None:
    h = ServerHealth(HealthConfig(down_after_failures=3, down_grace_s=10), now=0)
    assert not h.record_failure(1, "refused")
    h.record_success(2)  # a success resets the count
    assert not h.record_failure(3, "refused")
    assert not h.record_failure(4, "refused")
    assert h.record_failure(5, "refused")
    assert h.is_down
    assert "3 consecutive failures" in h.down_reason
    assert not h.should_leave(14.9)
    assert h.should_leave(15.0)
    h.mark_up(16)
    assert not h.is_down
    assert not h.should_leave(100)


def test_hung_only_with_requests_in_flight() -> None:
    h = ServerHealth(HealthConfig(hang_timeout_s=30), now=0)
    assert not h.hung(29.9, in_flight=4)
    assert h.hung(30, in_flight=4)
    assert not h.hung(1000, in_flight=0)
    h.record_success(40)
    assert not h.hung(60, in_flight=4)


def test_mark_down_keeps_the_first_time() -> None:
    h = ServerHealth(HealthConfig(down_grace_s=5), now=0)
    h.mark_down(10, "hung")
    h.mark_down(12, "again")
    assert h.down_since == 10
    assert h.down_reason == "hung"


def test_backoff_doubles_with_jitter_and_caps() -> None:
    """The consumer's retry waits (:class:`streams.retry.Backoff`, which it uses since it left
    consumers.health)."""
    b = Backoff(initial_s=1, max_s=8)
    rng = random.Random(7)
    for attempt, ceiling in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 8), (10, 8)]:
        d = b.delay(attempt, rng)
        assert ceiling / 2 <= d <= ceiling
    with pytest.raises(ValueError, match="1-based"):
        b.delay(0)


def test_failures_of_requests_sent_before_the_server_came_back_do_not_mark_it_down() -> None:
    """Read timeouts of requests queued behind a slow server arrive after a probe found it able to
    generate again: stale evidence, so the server does not flap down and up once per timeout."""
    h = ServerHealth(HealthConfig(down_after_failures=2), now=0)
    assert not h.record_failure(10, "timeout", sent_at=1)
    assert h.record_failure(11, "timeout", sent_at=2)
    h.mark_up(12)
    for t in range(13, 20):
        assert not h.record_failure(t, "timeout", sent_at=5), "a stale failure counted"
    assert h.consecutive_failures == 0
    assert not h.record_failure(20, "timeout", sent_at=12.5)
    assert h.record_failure(21, "timeout", sent_at=13)
