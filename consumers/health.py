"""Server health verdicts: pure policy, no I/O. (The retry backoff is :class:`streams.retry.Backoff`.)

:class:`ServerHealth` says whether one server is **down** (consecutive retriable failures, or
marked), **hung** (requests in flight and none finished for ``hang_timeout_s``) or down long
enough to **leave** the group (``down_grace_s``); a failure of a request sent before the server was
last marked up is stale evidence and counts for nothing. Times are seconds from any monotonic
clock, passed in by the caller.

Design: docs/consumer.md, "Server trouble".
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HealthConfig", "ServerHealth"]


@dataclass(frozen=True)
class HealthConfig:
    """Thresholds: a count of failures and durations in seconds."""

    down_after_failures: int = 3
    down_grace_s: float = 60.0
    hang_timeout_s: float = 600.0


class ServerHealth:
    """Tracks one server's consecutive failures, progress and down time."""

    def __init__(self, config: HealthConfig, now: float) -> None:
        self.config = config
        self.consecutive_failures = 0
        self.down_since: float | None = None
        self.down_reason = ""
        self.last_progress = now
        self.up_since = now

    @property
    def is_down(self) -> bool:
        return self.down_since is not None

    def record_success(self, now: float) -> None:
        """A request finished with a usable answer (or a non-retriable verdict from the server)."""
        self.consecutive_failures = 0
        self.last_progress = now

    def record_progress(self, now: float) -> None:
        """The server showed it is generating (a generation probe passed) although none of the
        requests in flight has finished: they are long, not stuck; the hang clock restarts."""
        self.last_progress = now

    def record_failure(self, now: float, reason: str, *, sent_at: float | None = None) -> bool:
        """A retriable failure of a request sent at ``sent_at`` (same clock as ``now``; None:
        unknown). Returns True when the server is (now) down. A request sent before the last
        :meth:`mark_up` is stale evidence and changes nothing."""
        if sent_at is not None and sent_at < self.up_since:
            return self.is_down
        self.consecutive_failures += 1
        self.last_progress = now
        if self.down_since is None and self.consecutive_failures >= self.config.down_after_failures:
            self.mark_down(now, f"{self.consecutive_failures} consecutive failures, last: {reason}")
        return self.is_down

    def mark_down(self, now: float, reason: str) -> None:
        """Declare the server down (idempotent: the first ``down_since`` is kept)."""
        if self.down_since is None:
            self.down_since = now
            self.down_reason = reason

    def mark_up(self, now: float) -> None:
        """The server generated again (a health probe passed)."""
        self.down_since = None
        self.down_reason = ""
        self.consecutive_failures = 0
        self.last_progress = now
        self.up_since = now

    def hung(self, now: float, in_flight: int) -> bool:
        """True when requests are in flight and nothing finished for ``hang_timeout_s`` seconds."""
        return in_flight > 0 and now - self.last_progress >= self.config.hang_timeout_s

    def should_leave(self, now: float) -> bool:
        """True when the server has been down for longer than ``down_grace_s`` seconds."""
        return self.down_since is not None and now - self.down_since >= self.config.down_grace_s
