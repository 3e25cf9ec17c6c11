"""How many requests a generation consumer keeps in flight against its one inference server.

:class:`WindowPolicy` fills every slot plus a small standing queue, never more: it follows the
server's gauges (running and queued requests, KV-cache usage) when it reports them, and adapts by
AIMD from completions and overloads when it does not. Pure and deterministic: the caller passes
the time (``now``, seconds, any monotonic clock).

Design: docs/consumer.md, "The in-flight window".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["WindowConfig", "WindowPolicy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowConfig:
    """Settings of :class:`WindowPolicy`. Sizes count requests; times are seconds.

    Raises:
        ValueError: from the constructor when a value is out of range.
    """

    min_size: int = 1
    max_size: int = 256
    """hard cap, whatever the server reports."""
    max_running: int | None = None
    """the server's concurrent slots (SGLang ``max_running_requests``, llama.cpp slots); None: unknown."""
    target_queue: int = 4
    """requests to keep waiting on the server so a freed slot is refilled without a round trip."""
    initial_size: int = 8
    """starting window when ``max_running`` is unknown."""
    max_token_usage: float = 0.9
    """KV-cache usage (fraction of the pool, ``sglang:token_usage``) above which the window does
    not grow past ``running + target_queue``."""
    increase_step: int = 1
    decrease_factor: float = 0.5
    cooldown_s: float = 10.0
    metrics_stale_s: float = 30.0
    """gauges older than this no longer steer; completions do (AIMD)."""
    max_latency_s: float | None = None
    """a mean request latency above this counts as overload (e.g. 0.8 × the request timeout)."""
    latency_alpha: float = 0.2
    """weight of the newest latency in the exponential moving average."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_size <= self.max_size:
            raise ValueError(f"need 1 <= min_size <= max_size, got {self.min_size}, {self.max_size}")
        if self.max_running is not None and self.max_running < 1:
            raise ValueError(f"max_running must be >= 1, got {self.max_running}")
        if self.target_queue < 0 or self.increase_step < 1 or self.initial_size < 1:
            raise ValueError("target_queue must be >= 0, increase_step and initial_size >= 1")
        if not 0.0 < self.decrease_factor < 1.0:
            raise ValueError(f"decrease_factor must be in (0, 1), got {self.decrease_factor}")
        if not 0.0 < self.latency_alpha <= 1.0:
            raise ValueError(f"latency_alpha must be in (0, 1], got {self.latency_alpha}")
        if self.cooldown_s < 0 or self.metrics_stale_s < 0:
            raise ValueError("cooldown_s and metrics_stale_s must be >= 0")
        if not 0.0 < self.max_token_usage <= 1.0:
            raise ValueError(f"max_token_usage must be in (0, 1], got {self.max_token_usage}")
        if self.max_latency_s is not None and self.max_latency_s <= 0:
            raise ValueError(f"max_latency_s must be > 0, got {self.max_latency_s}")

    @property
    def cap(self) -> int:
        """The largest window: ``max_size``, and ``max_running + target_queue`` when known."""
        if self.max_running is None:
            return self.max_size
        return max(self.min_size, min(self.max_size, self.max_running + self.target_queue))

    @property
    def initial(self) -> int:
        """The starting window: ``max_running + target_queue`` if known, else ``initial_size``; clamped."""
        start = self.initial_size if self.max_running is None else self.max_running + self.target_queue
        return max(self.min_size, min(self.cap, start))


class WindowPolicy:
    """The adaptive in-flight window of one consumer: read :attr:`size`, feed it observations."""

    def __init__(self, config: WindowConfig | None = None) -> None:
        self.config = config if config is not None else WindowConfig()
        self._size = self.config.initial
        self._last_overload = -math.inf
        self._last_metrics = -math.inf
        self._completions = 0
        self._latency: float | None = None

    @property
    def size(self) -> int:
        """Requests to keep in flight now; always within ``[min_size, cap]``."""
        return self._size

    @property
    def latency_s(self) -> float | None:
        """Exponential moving average of request latency in seconds; None before any completion."""
        return self._latency

    def observe_metrics(
        self,
        running: int | None,
        queued: int | None,
        now: float,
        *,
        in_flight: int | None = None,
        token_usage: float | None = None,
    ) -> None:
        """Steer by the server's gauges: running and waiting requests (summed over DP ranks) and
        the KV-cache usage (fraction 0..1; None: not reported). ``in_flight``: the requests this
        consumer has outstanding; below the window, a short queue does not grow it. ``None``
        gauges (a server without ``--enable-metrics``) are ignored.

        Raises:
            ValueError: a count is negative.
        """
        if running is None or queued is None:
            return
        if running < 0 or queued < 0 or (in_flight is not None and in_flight < 0):
            raise ValueError(f"negative count: running={running} queued={queued} in_flight={in_flight}")
        self._last_metrics = now
        target = self.config.target_queue
        kv_full = token_usage is not None and token_usage >= self.config.max_token_usage
        if queued > target:
            self._set(min(self._size, running + target))
        elif kv_full:
            if in_flight is None or in_flight >= self._size or self._size > running + target:
                self._set(running + target)
        elif queued < target and not self._cooling(now):
            if in_flight is not None and in_flight < self._size:
                return
            max_running = self.config.max_running
            free = running if max_running is None else min(running, max(0, max_running - running))
            self._set(max(self._size, running + max(free, 1) + target))

    def observe_completion(self, latency_s: float, now: float) -> None:
        """Count a successful request that took ``latency_s`` seconds (sent → full response).

        Raises:
            ValueError: ``latency_s`` is negative or not finite.
        """
        if not (math.isfinite(latency_s) and latency_s >= 0):
            raise ValueError(f"latency_s must be finite and >= 0, got {latency_s}")
        alpha = self.config.latency_alpha
        previous = self._latency
        self._latency = latency_s if previous is None else alpha * latency_s + (1 - alpha) * previous
        limit = self.config.max_latency_s
        if limit is not None and self._latency > limit:
            self.observe_overload(now)
            return
        if now - self._last_metrics <= self.config.metrics_stale_s or self._cooling(now):
            return
        self._completions += 1
        if self._completions >= self._size:
            self._completions = 0
            self._set(self._size + self.config.increase_step)

    def observe_overload(self, now: float) -> None:
        """The server refused or failed a request for load (503/429, queue full, timeout).

        Multiplies the window by ``decrease_factor`` (rounded down), at most once per ``cooldown_s``.
        """
        if self._cooling(now):
            return
        self._last_overload = now
        self._completions = 0
        self._set(math.floor(self._size * self.config.decrease_factor))

    def _cooling(self, now: float) -> bool:
        return now - self._last_overload < self.config.cooldown_s

    def _set(self, size: int) -> None:
        self._size = max(self.config.min_size, min(self.config.cap, size))
