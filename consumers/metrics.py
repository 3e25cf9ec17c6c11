"""The generation consumer's counters: its Prometheus metrics (the one owner of every
``kafkagen_*`` series a consumer exports) and the totals of its status line."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["ConsumerMetrics", "ConsumerStats"]


@dataclass
class ConsumerStats:
    """Totals since start for the status line logged every 10 s: records written, requests
    sent again, and ``started`` (monotonic seconds)."""

    completions: int = 0
    errors: int = 0
    retries: int = 0
    started: float = field(default_factory=time.monotonic)

    def status_line(self, *, in_flight: int, window: int, waiting: int, server_up: bool, kafka: str) -> str:
        """The status line: these totals (completions also per second since ``started``), the
        requests ``in_flight`` of a ``window``-request window, the prompts ``waiting`` to start,
        whether the server is up, and Kafka's state (:meth:`streams.kafka.KafkaOutage.describe`)."""
        elapsed = max(1e-9, time.monotonic() - self.started)
        return (
            f"completions {self.completions} ({self.completions / elapsed:.2f}/s), "
            f"dead letters {self.errors}, retries {self.retries}, in flight {in_flight}/{window}, "
            f"waiting {waiting}, server {'up' if server_up else 'down'}, kafka {kafka}"
        )


class ConsumerMetrics:
    """Prometheus metrics of one consumer (its own registry, so several can share a process).

    Attributes:
        registry: what ``--metrics-port`` serves.
        completions: completion records written, by ``finish_reason``.
        errors: error records written, by ``error_type``.
        quality: quality flags raised (:mod:`consumers.quality`), by ``flag``.
        retries: requests sent again after a retriable failure.
        tokens: completion tokens generated.
        in_flight, window: requests in flight and the in-flight window size (requests).
        server_up, kafka_up: 1 while the server is healthy / Kafka answers, else 0.
        output_rate: completion tokens per second over the watchdog window.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.completions = Counter(
            "kafkagen_completions", "completion records written", ["finish_reason"], registry=self.registry
        )
        self.errors = Counter(
            "kafkagen_dead_letters", "error records written", ["error_type"], registry=self.registry
        )
        self.quality = Counter(
            "kafkagen_quality_flags", "quality flags raised", ["flag"], registry=self.registry
        )
        self.retries = Counter(
            "kafkagen_retries", "requests sent again after a retriable failure", registry=self.registry
        )
        self.tokens = Counter(
            "kafkagen_completion_tokens", "completion tokens generated", registry=self.registry
        )
        self.in_flight = Gauge("kafkagen_in_flight", "requests in flight", registry=self.registry)
        self.window = Gauge("kafkagen_window", "in-flight window size", registry=self.registry)
        self.server_up = Gauge("kafkagen_server_up", "1 when the server is healthy", registry=self.registry)
        self.output_rate = Gauge(
            "kafkagen_output_tokens_per_second",
            "completion tokens per second finished over the watchdog window",
            registry=self.registry,
        )
        self.kafka_up = Gauge("kafkagen_kafka_up", "1 while Kafka answers", registry=self.registry)
