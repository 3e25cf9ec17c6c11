"""The generation consumer's counters: its Prometheus metrics (the one owner of every
``kafkagen_generate_*`` series, ``docs/metrics.md``) and the totals of its status line."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["LATENCY_BUCKETS_S", "ConsumerMetrics", "ConsumerStats"]

LATENCY_BUCKETS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0)
"""Upper bounds (seconds) of the request latency histogram: one LLM request takes from under a
second (a short answer) to many minutes (a long reasoning trace at a full batch)."""


@dataclass
class ConsumerStats:
    """Totals since start for the status line logged every 10 s: records written, requests
    sent again, and ``started`` (monotonic seconds)."""

    completions: int = 0
    errors: int = 0
    retries: int = 0
    reused: int = 0
    """completions copied from ``consumer.reuse_from``'s run instead of generated."""
    invalid_retries: int = 0
    """answers asked for again for breaking their structured output (``consumer.retry_invalid``)."""
    shared_requests: int = 0
    """requests that answered several samples of one prompt at once (``consumer.parallel_samples``)."""
    lent: int = 0
    """prompts answered by other members' idle servers (:mod:`consumers.lending`)."""
    started: float = field(default_factory=time.monotonic)

    def status_line(self, *, in_flight: int, window: int, waiting: int, server_up: bool, kafka: str) -> str:
        """The status line: these totals (completions also per second since ``started``), the
        requests ``in_flight`` of a ``window``-request window, the prompts ``waiting`` to start,
        whether the server is up, and Kafka's state (:meth:`streams.kafka.KafkaOutage.describe`)."""
        elapsed = max(1e-9, time.monotonic() - self.started)
        return (
            f"completions {self.completions} ({self.completions / elapsed:.2f}/s), "
            f"dead letters {self.errors}, retries {self.retries}"
            + (f", reused {self.reused}" if self.reused else "")
            + (f", invalid answers asked again {self.invalid_retries}" if self.invalid_retries else "")
            + (f", requests shared by samples {self.shared_requests}" if self.shared_requests else "")
            + (f", lent to idle servers {self.lent}" if self.lent else "")
            + f", in flight {in_flight}/{window}, "
            f"waiting {waiting}, server {'up' if server_up else 'down'}, kafka {kafka}"
        )


class ConsumerMetrics:
    """Prometheus metrics of one consumer (its own registry, so several can share a process), every
    series labelled ``run``, ``server`` (the server's base URL) and ``instance`` (the static member
    id); the names and meanings are listed in ``docs/metrics.md``.

    Args:
        run: the run id; server: the server's base URL; instance: the consumer's instance id.

    Attributes:
        registry: what ``--metrics-port`` serves.
        retries: requests sent again after a retriable failure (``.inc()``).
        in_flight, window, slots: requests in flight, the in-flight window size and the server's
            concurrent slots (requests; ``.set()``).
        server_up, kafka_up: 1 while the server is healthy / Kafka answers, else 0.
        output_rate: completion tokens per second over the watchdog window.
        gate_halted, gate_epoch: the quality gate's state (:mod:`consumers.quality.fleet_gate`).
    """

    def __init__(self, run: str, server: str, instance: str) -> None:
        self.registry = r = CollectorRegistry()
        ids = {"run": run, "server": server, "instance": instance}
        base = list(ids)

        def counter(name: str, doc: str, *extra: str) -> Counter:
            return Counter(f"kafkagen_generate_{name}", doc, [*base, *extra], registry=r)

        def gauge(name: str, doc: str, *extra: str) -> Gauge:
            return Gauge(f"kafkagen_generate_{name}", doc, [*base, *extra], registry=r)

        self._ids = ids
        self._completions = counter("completions", "completion records written", "finish_reason")
        self._dead_letters = counter("dead_letters", "error records written", "error_type")
        self._quality = counter("quality_flags", "quality flags raised on completions written", "flag")
        self._tokens = counter("completion_tokens", "completion tokens of completions written").labels(**ids)
        self._reasoning = counter("reasoning_tokens", "reasoning tokens of completions written").labels(**ids)
        self._latency = Histogram(
            "kafkagen_generate_request_latency_seconds",
            "seconds from sending a request to its answer (completions written)",
            base,
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        ).labels(**ids)
        self.retries = counter("retries", "requests sent again after a retriable failure").labels(**ids)
        self.in_flight = gauge("in_flight", "requests in flight").labels(**ids)
        self.window = gauge("window", "in-flight window size (requests)").labels(**ids)
        self.slots = gauge("slots", "the server's concurrent slots (requests; NaN: unknown)").labels(**ids)
        self.slots.set(float("nan"))
        self.server_up = gauge("server_up", "1 while the server is healthy").labels(**ids)
        self.kafka_up = gauge("kafka_up", "1 while Kafka answers").labels(**ids)
        self.output_rate = gauge(
            "output_tokens_per_second", "completion tokens per second answered over the watchdog window"
        ).labels(**ids)
        self._committed = gauge("committed_offset", "the partition's committed offset", "partition")
        self._lag = gauge("lag_records", "highwater offset minus committed offset", "partition")
        self._partitions: set[str] = set()
        # the fleet-wide quality gate (consumers/quality/fleet_gate.py, docs/gate.md)
        self.gate_halted = gauge("gate_halted", "1 while the run's quality gate holds it halted").labels(
            **ids
        )
        self.gate_epoch = gauge(
            "gate_epoch", "the quality gate's epoch (0, then one more per resume)"
        ).labels(**ids)
        # the counters by label show at 0 before the first event, so rates start from the beginning
        self._completions.labels(**ids, finish_reason="stop")
        self._completions.labels(**ids, finish_reason="length")

    def completed(
        self,
        finish_reason: str,
        *,
        completion_tokens: int,
        reasoning_tokens: int,
        latency_s: float,
        flags: Sequence[str],
    ) -> None:
        """A completion record was written: its ``finish_reason``, its tokens, the request's
        latency (seconds) and its quality flags (:mod:`consumers.quality.flags`)."""
        self._completions.labels(**self._ids, finish_reason=finish_reason).inc()
        self._tokens.inc(completion_tokens)
        self._reasoning.inc(reasoning_tokens)
        self._latency.observe(latency_s)
        for flag in flags:
            self._quality.labels(**self._ids, flag=flag).inc()

    def dead_lettered(self, error_type: str) -> None:
        """An error record of ``error_type`` was written to the dead-letter topic."""
        self._dead_letters.labels(**self._ids, error_type=error_type).inc()

    def observe_partitions(self, offsets: Mapping[int, tuple[int | None, int | None]]) -> None:
        """The assigned partitions now, ``{partition: (committed offset, highwater offset)}``
        (either ``None`` while unknown): sets ``committed_offset`` and ``lag_records`` and removes
        the series of partitions no longer assigned. Called from the consumer's loop."""
        seen = set()
        for partition, (committed, highwater) in offsets.items():
            label = str(partition)
            seen.add(label)
            if committed is not None:
                self._committed.labels(**self._ids, partition=label).set(committed)
                if highwater is not None:
                    self._lag.labels(**self._ids, partition=label).set(max(0, highwater - committed))
        for label in self._partitions - seen:
            for family in (self._committed, self._lag):
                with contextlib.suppress(KeyError):
                    family.remove(*self._ids.values(), label)
        self._partitions = seen
