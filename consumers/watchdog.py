"""Output-rate watchdog: notices a server whose throughput collapses while it still answers.

:class:`ThroughputWatchdog` compares the server's output rate (completion tokens per second over
``window_s``) with its own recent saturated peak: saturated and below ``baseline / factor`` for
``collapse_s`` seconds on end is a collapse, on which the consumer gives up its partitions. Pure
and deterministic: the caller passes the time (``now``, seconds, any monotonic clock).

Design: docs/consumer.md, "Collapsed output rate".
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["ThroughputWatchdog", "WatchdogConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchdogConfig:
    """Settings of :class:`ThroughputWatchdog`; times in seconds.

    Raises:
        ValueError: from the constructor when a value is out of range.
    """

    window_s: float = 300.0
    factor: float = 5.0
    collapse_s: float = 300.0
    baseline_s: float = 3600.0
    min_in_flight: int = 1

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.collapse_s < 0 or self.baseline_s < self.window_s:
            raise ValueError("need window_s > 0, collapse_s >= 0 and baseline_s >= window_s")
        if self.factor <= 1:
            raise ValueError(f"factor must be above 1, got {self.factor}")
        if self.min_in_flight < 1:
            raise ValueError(f"min_in_flight must be at least 1, got {self.min_in_flight}")


class ThroughputWatchdog:
    """Tracks one server's output rate (tokens/s) against its own recent saturated peak."""

    def __init__(self, config: WatchdogConfig, now: float) -> None:
        self.config = config
        self._finished: deque[tuple[float, int]] = deque()
        """(time, completion tokens) of finished requests within the window."""
        self._tokens_in_window = 0
        self._peaks: deque[tuple[float, float]] = deque()
        """(time, rate) of saturated windows within ``baseline_s``, rates descending."""
        self._saturated_since: float | None = None
        self._low_since: float | None = None
        self._started = now

    def observe(self, now: float, completion_tokens: int) -> None:
        """A request finished with ``completion_tokens`` tokens."""
        self._finished.append((now, completion_tokens))
        self._tokens_in_window += completion_tokens

    def rate(self, now: float) -> float:
        """Completion tokens per second over the last ``window_s`` (or since start, if shorter)."""
        self._expire(now)
        span = min(self.config.window_s, max(now - self._started, 1e-9))
        return self._tokens_in_window / span

    @property
    def baseline(self) -> float | None:
        """The highest saturated-window rate within ``baseline_s``; None before the first one."""
        return self._peaks[0][1] if self._peaks else None

    def check(self, now: float, in_flight: int) -> bool:
        """Update with the requests in flight now; return True when the server has collapsed.

        Call it every few seconds. A check with fewer than ``min_in_flight`` requests in flight
        ends saturation (and any collapse episode).
        """
        cfg = self.config
        if in_flight < cfg.min_in_flight:
            self._saturated_since = None
            self._low_since = None
            return False
        if self._saturated_since is None:
            self._saturated_since = now
        if now - self._saturated_since < cfg.window_s:
            return False
        rate = self.rate(now)
        while self._peaks and self._peaks[0][0] < now - cfg.baseline_s:
            self._peaks.popleft()
        baseline = self.baseline
        if baseline is not None and rate < baseline / cfg.factor:
            if self._low_since is None:
                self._low_since = now
            return now - self._low_since >= cfg.collapse_s
        self._low_since = None
        while self._peaks and self._peaks[-1][1] <= rate:  # keep rates descending
            self._peaks.pop()
        self._peaks.append((now, rate))
        return False

    def low(self) -> bool:
        """Whether the rate is below the threshold now (a collapse episode is under way)."""
        return self._low_since is not None

    def reset(self, now: float) -> None:
        """Forget the window and the current episode (after giving up the partitions); keep the
        baseline, so a server that comes back as slow is caught again."""
        self._finished.clear()
        self._tokens_in_window = 0
        self._saturated_since = None
        self._low_since = None
        self._started = now

    def _expire(self, now: float) -> None:
        cutoff = now - self.config.window_s
        while self._finished and self._finished[0][0] < cutoff:
            self._tokens_in_window -= self._finished.popleft()[1]
