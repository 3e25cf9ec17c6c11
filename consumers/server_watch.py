"""The consumer's view of its inference server: up or down, hung or generating, collapsed or
not, and its load, which sizes the in-flight window.

:class:`ServerWatch` acts on the verdicts of :mod:`consumers.health` and :mod:`consumers.watchdog`:
a server down sends nothing new and is probed in the background until it passes; a hung one's
requests are abandoned; one down for ``down_grace_s``, or collapsed, makes the consumer leave its
group. Times are monotonic seconds.

Design: docs/consumer.md, "Server trouble".
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Literal

from consumers.health import HealthConfig, ServerHealth
from consumers.metrics import ConsumerMetrics
from consumers.servers import ServerClient, ServerLoad
from consumers.watchdog import ThroughputWatchdog, WatchdogConfig
from consumers.window import WindowPolicy
from streams.config import ConsumerSettings

__all__ = ["DownVerdict", "ServerWatch"]

log = logging.getLogger("kafkagen.generate")

_PROBE_INTERVAL_S = 2.0
_LOAD_INTERVAL_S = 2.0
_LOAD_INTERVAL_SHARED_S = 0.5
"""while shared requests are out: the places their finished copies leave are seen sooner
(SGLang refreshes its gauges every ``decode_log_interval`` decode steps, docs/sglang.md)."""

DownVerdict = Literal["up", "leave"]
"""What :meth:`ServerWatch.poll_down` asks of the consumer: rejoin (the server is up again) or
leave the group (down too long)."""


class ServerWatch:
    """Health, hang probe, output-rate watchdog and load readings of one server.

    Args:
        client: the server's client (its probes and ``/metrics``).
        cfg: the consumer settings (thresholds in failures and seconds).
        metrics: the consumer's metrics (``kafkagen_generate_server_up``, the output rate).
        server_url: the server's base URL, for log lines.

    Attributes:
        ok: set while requests may be sent (the server is up).
        abandon: set (then replaced) when the server is declared down: requests in flight are
            abandoned as retriable failures.
        last_load: the server's last ``/metrics`` reading (None before one, or without metrics).
    """

    def __init__(
        self, client: ServerClient, cfg: ConsumerSettings, metrics: ConsumerMetrics, server_url: str
    ) -> None:
        self.client = client
        self.cfg = cfg
        self.metrics = metrics
        self.server_url = server_url
        self.health = ServerHealth(
            HealthConfig(cfg.down_after_failures, cfg.down_grace_s, cfg.hang_timeout_s), time.monotonic()
        )
        self.watchdog = ThroughputWatchdog(
            WatchdogConfig(
                window_s=cfg.watchdog_window_s,
                factor=cfg.watchdog_factor,
                collapse_s=cfg.watchdog_collapse_s,
                baseline_s=max(3600.0, cfg.watchdog_window_s),
            ),
            time.monotonic(),
        )
        self.ok = asyncio.Event()
        self.abandon = asyncio.Event()
        self._probe: asyncio.Task[bool] | None = None
        """health probe of a server marked down."""
        self._hang_probe: asyncio.Task[bool] | None = None
        """generation probe of a server whose in-flight requests have not finished for a while."""
        self._next_probe = 0.0
        self._hold_until = 0.0
        """while the server is down for a throughput collapse: no health probe before this time."""
        self._give_up = False
        """leave the group at once, without waiting for ``down_grace_s``."""
        self.last_load: ServerLoad | None = None
        self.last_load_at = -math.inf
        """when :attr:`last_load` was read (monotonic seconds)."""

    @property
    def is_down(self) -> bool:
        """Whether the server is down (nothing new is sent)."""
        return self.health.is_down

    def mark_ready(self) -> None:
        """Discovery found the server ready: requests may be sent."""
        self.ok.set()
        self.metrics.server_up.set(1)

    def record_success(self, now: float) -> None:
        """A request finished with a usable answer (or a non-retriable verdict) at ``now``."""
        self.health.record_success(now)

    def record_failure(self, now: float, reason: str, *, sent_at: float) -> None:
        """A retriable failure of a request sent at ``sent_at``; stop sending if the server is
        now down (:meth:`consumers.health.ServerHealth.record_failure`)."""
        if self.health.record_failure(now, reason, sent_at=sent_at):
            self.ok.clear()
            self.metrics.server_up.set(0)

    def observe_output(self, now: float, completion_tokens: int) -> None:
        """An answer with ``completion_tokens`` came in: the server's output rate counts at the
        answer (a Kafka stall is not a collapse)."""
        self.watchdog.observe(now, completion_tokens)

    def check_hung(self, in_flight: int) -> None:
        """Requests in flight and none finished for ``hang_timeout_s``: the server's generation
        probe tells long generations (passed: they count as progressing) from a wedged engine
        (failed: marked down). SGLang's ``/health_generate`` passes under a full batch of long
        generations (sglang 0.5 ``entrypoints/http_server.py`` ``health_generate``,
        ``managers/scheduler_output_processor_mixin.py`` ``DEFAULT_FORCE_STREAM_INTERVAL``;
        docs/consumer.md, "Server trouble")."""
        now = time.monotonic()
        if self.health.is_down or not self.health.hung(now, in_flight):
            if self._hang_probe is not None:  # its verdict is about a moment that has passed
                self._hang_probe.cancel()
                self._hang_probe = None
            return
        if self._hang_probe is None:
            self._hang_probe = asyncio.create_task(
                self.client.healthy(timeout_s=min(30.0, self.cfg.hang_timeout_s))
            )
            return
        if not self._hang_probe.done():
            return
        probe, self._hang_probe = self._hang_probe, None
        if not probe.cancelled() and probe.exception() is None and probe.result():
            self.health.record_progress(time.monotonic())
            log.info(
                "server %s: %d requests in flight, none finished for %.0f s, but it is generating; not hung",
                self.server_url,
                in_flight,
                self.cfg.hang_timeout_s,
            )
            return
        self.declare_down(
            f"hung: {in_flight} requests in flight, none finished for "
            f"{self.cfg.hang_timeout_s:.0f} s, and its generation probe failed"
        )

    def declare_down(self, reason: str) -> None:
        """Mark the server down for ``reason``: stop starting work and abandon what is in flight
        (each abandoned prompt is retried within its ``max_attempts``)."""
        self.health.mark_down(time.monotonic(), reason)
        self.ok.clear()
        self.metrics.server_up.set(0)
        self.abandon.set()
        self.abandon = asyncio.Event()

    def check_throughput(self, in_flight: int, window_size: int) -> None:
        """Feed the output-rate watchdog (:mod:`consumers.watchdog`) with the ``in_flight``
        requests of a ``window_size`` window; on a lasting collapse, mark the server down and
        give up the partitions at once, for ``watchdog_hold_s``."""
        if self.health.is_down:
            return
        now = time.monotonic()
        saturated = in_flight if in_flight >= max(1, window_size // 2) else 0
        was_low = self.watchdog.low()
        collapsed = self.watchdog.check(now, saturated)
        rate, baseline = self.watchdog.rate(now), self.watchdog.baseline or 0.0
        self.metrics.output_rate.set(rate)
        if self.watchdog.low() and not was_low:
            log.warning(
                "server %s output %.1f tokens/s, below 1/%g of its recent peak %.1f tokens/s; "
                "giving up its partitions if this lasts %.0f s",
                self.server_url,
                rate,
                self.cfg.watchdog_factor,
                baseline,
                self.cfg.watchdog_collapse_s,
            )
        if not collapsed:
            return
        self.declare_down(
            f"throughput collapsed: {rate:.1f} tokens/s for {self.cfg.watchdog_collapse_s:.0f} s against a "
            f"recent peak of {baseline:.1f}; out of the group for {self.cfg.watchdog_hold_s:.0f} s",
        )
        self._hold_until = now + self.cfg.watchdog_hold_s
        self._give_up = True
        self.watchdog.reset(now)

    def poll_down(self, *, member: bool) -> DownVerdict | None:
        """While the server is down: probe it every few seconds in the background. ``"up"``
        when a probe passed (resume, rejoin the group); ``"leave"`` when the consumer is a group
        ``member`` and the server was down for ``down_grace_s`` (or its throughput collapsed);
        else None."""
        now = time.monotonic()
        if self._probe is None and now >= max(self._next_probe, self._hold_until):
            if self._next_probe == 0.0:
                log.warning("server %s down: %s; pausing", self.server_url, self.health.down_reason)
            self._next_probe = now + _PROBE_INTERVAL_S
            self._probe = asyncio.create_task(
                self.client.healthy(timeout_s=min(30.0, self.cfg.hang_timeout_s))
            )
        if self._probe is not None and self._probe.done():
            probe, self._probe = self._probe, None
            if not probe.cancelled() and probe.exception() is None and probe.result():
                self.health.mark_up(time.monotonic())
                self._next_probe = 0.0
                self.ok.set()
                self.metrics.server_up.set(1)
                log.info("server %s healthy again; resuming", self.server_url)
                return "up"
        if member and (self._give_up or self.health.should_leave(time.monotonic())):
            self._give_up = False
            return "leave"
        return None

    def cancel_probes(self) -> None:
        """Stop the probes in progress (the consumer is closing)."""
        for probe in (self._probe, self._hang_probe):
            if probe is not None:
                probe.cancel()

    async def watch_load(
        self,
        window: Callable[[], WindowPolicy],
        in_flight: Callable[[], int],
        sharing: Callable[[], bool] = lambda: False,
    ) -> None:
        """Feed ``window()`` from the server's ``/metrics`` every 2 s, every 0.5 s while
        ``sharing()`` (shared requests are out: docs/consumer.md, "Parallel samples"); ``in_flight()``:
        the consumer's requests in flight. A reading that fails (a malformed or impossible one;
        an unreachable server reads as no reading) is logged and skipped; the watcher never dies."""
        failures = 0
        while True:
            if not self.health.is_down:
                try:
                    load = await self.client.load()
                    self.last_load = load
                    self.last_load_at = time.monotonic()
                    if load is not None:
                        window().observe_metrics(
                            load.running,
                            load.queued,
                            time.monotonic(),
                            in_flight=in_flight(),
                            token_usage=load.token_usage,
                        )
                except Exception as exc:  # one bad reading must not stop the window adapting
                    failures += 1
                    if failures == 1 or failures % 30 == 0:
                        log.warning(
                            "reading %s/metrics failed (%d times): %r", self.server_url, failures, exc
                        )
            await asyncio.sleep(_LOAD_INTERVAL_SHARED_S if sharing() else _LOAD_INTERVAL_S)
