from __future__ import annotations

import pytest

from consumers.watchdog import ThroughputWatchdog, WatchdogConfig

CFG = WatchdogConfig(window_s=10, factor=5, collapse_s=20, baseline_s=100)


def _run(w: ThroughputWatchdog, start: float, end: float, tokens_per_s: float, in_flight: int) -> bool:
    """Feed one finished 100-token request every 100/tokens_per_s seconds, checking every second;
    return whether a collapse was reported."""
    collapsed = False
    t, next_done = start, start + 100 / tokens_per_s
    while t < end:
        while next_done <= t:
            w.observe(next_done, 100)
            next_done += 100 / tokens_per_s
        collapsed |= w.check(t, in_flight)
        t += 1
    return collapsed


def test_a_lasting_collapse_below_the_recent_peak_is_reported() -> None:
    w = ThroughputWatchdog(CFG, now=0)
    assert not _run(w, 0, 60, tokens_per_s=1000, in_flight=16)
    assert w.baseline == pytest.approx(1000, rel=0.1)
    assert not _run(w, 60, 75, tokens_per_s=10, in_flight=16), "reported before collapse_s passed"
    assert w.low()
    assert _run(w, 75, 95, tokens_per_s=10, in_flight=16)


def test_a_short_dip_is_only_low_not_collapsed() -> None:
    w = ThroughputWatchdog(CFG, now=0)
    _run(w, 0, 60, tokens_per_s=1000, in_flight=16)
    assert not _run(w, 60, 75, tokens_per_s=10, in_flight=16)
    assert not _run(w, 75, 120, tokens_per_s=1000, in_flight=16)
    assert not w.low()


def test_the_tail_of_a_run_is_not_a_collapse() -> None:
    """Few requests in flight (the input ran out): the rate falls, but says nothing of the server."""
    w = ThroughputWatchdog(CFG, now=0)
    _run(w, 0, 60, tokens_per_s=1000, in_flight=16)
    assert not _run(w, 60, 200, tokens_per_s=5, in_flight=0)


def test_no_baseline_no_verdict_and_reset_keeps_the_baseline() -> None:
    w = ThroughputWatchdog(CFG, now=0)
    assert not _run(w, 0, 100, tokens_per_s=1, in_flight=16), "slow from the start: nothing to compare"
    w = ThroughputWatchdog(CFG, now=0)
    _run(w, 0, 60, tokens_per_s=1000, in_flight=16)
    w.reset(60)
    assert w.baseline is not None
    assert _run(w, 60, 100, tokens_per_s=10, in_flight=16)


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="factor"):
        WatchdogConfig(factor=1)
    with pytest.raises(ValueError, match="baseline_s"):
        WatchdogConfig(window_s=100, baseline_s=10)
