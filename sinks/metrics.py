"""The sink's counters, its status line and its Prometheus metrics: the one owner of what the sink
reports about itself.

Every 10 s the runner logs :meth:`SinkStats.status` (records, objects, partitions, and whether
Kafka and S3 answer: ``Kafka UNREACHABLE for 37 s``). ``--metrics-port P`` serves the same on
``127.0.0.1:P/metrics`` (:class:`SinkMetrics`, read from the stats at each scrape).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streams.kafka import KafkaOutage

__all__ = ["SinkMetrics", "SinkStats"]

log = logging.getLogger("kafkagen.sink")


@dataclass
class SinkStats:
    """Counters since start (records appended, undecodable ones, objects created, 412 skips, S3
    failures retried, bytes before and after compression) and the state of the two services the
    sink depends on: whether each answers, and since when (``time.monotonic()`` seconds) it has
    not."""

    records: int = 0
    undecodable: int = 0
    objects: int = 0
    existing: int = 0
    uncompressed_bytes: int = 0
    compressed_bytes: int = 0
    s3_failures: int = 0
    partitions: int = 0
    kafka: KafkaOutage = field(default_factory=lambda: KafkaOutage("Kafka", log))
    s3_down_since: float | None = None

    def status(self, now: float) -> str:
        """The periodic status line (``now``: ``time.monotonic()``)."""

        def state(since: float | None) -> str:
            return "up" if since is None else f"UNREACHABLE for {now - since:.0f} s"

        return (
            f"status: {self.records} records, {self.objects} objects written "
            f"({self.existing} existing kept), {self.undecodable} undecodable, "
            f"{self.partitions} partitions, Kafka {self.kafka.describe()}, "
            f"S3 {state(self.s3_down_since)} ({self.s3_failures} S3 failures retried)"
        )


class SinkMetrics(Collector):
    """Prometheus metrics of one sink, read from its :class:`SinkStats` at each scrape (its own
    registry, served by ``--metrics-port``): ``kafkagen_sink_kafka_up`` and
    ``kafkagen_sink_s3_up`` (1 or 0), ``kafkagen_sink_kafka_down_seconds``, the counters
    ``kafkagen_sink_records``, ``_objects``, ``_undecodable``, ``_s3_failures``, and the gauge
    ``kafkagen_sink_partitions``."""

    def __init__(self, stats: SinkStats) -> None:
        self.stats = stats
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def collect(self) -> Iterable[Metric]:
        """The metrics as they are now (called by the registry at each scrape)."""
        s, now = self.stats, time.monotonic()
        yield GaugeMetricFamily("kafkagen_sink_kafka_up", "1 when Kafka answers", value=s.kafka.up)
        yield GaugeMetricFamily(
            "kafkagen_sink_kafka_down_seconds",
            "seconds Kafka has not answered (0 when up)",
            value=s.kafka.down_for(now),
        )
        yield GaugeMetricFamily(
            "kafkagen_sink_s3_up", "1 unless S3 calls are failing", value=s.s3_down_since is None
        )
        yield GaugeMetricFamily("kafkagen_sink_partitions", "partitions assigned", value=s.partitions)
        for name, doc, value in (
            ("records", "records appended to batches", s.records),
            ("objects", "objects written to S3", s.objects),
            ("undecodable", "records written as undecodable lines", s.undecodable),
            ("s3_failures", "S3 calls that failed and were retried", s.s3_failures),
        ):
            yield CounterMetricFamily(f"kafkagen_sink_{name}", doc, value=value)
