"""The sink's counters, its status line and its Prometheus metrics: the one owner of what the sink
reports about itself.

Every 10 s the runner logs :meth:`SinkStats.status` (records, objects, partitions, and whether
Kafka and S3 answer: ``Kafka UNREACHABLE for 37 s``). ``--metrics-port P`` serves the same on
``127.0.0.1:P/metrics`` (:class:`SinkMetrics`, read from the stats at each scrape): the
``kafkagen_sink_*`` series of ``docs/metrics.md``.
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
    failures retried, bytes before and after compression; records per partition) and the state of
    the two services the sink depends on: whether each answers, and since when
    (``time.monotonic()`` seconds) it has not."""

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
    partition_records: dict[tuple[str, int], int] = field(default_factory=dict)
    """records appended per (topic, partition), since start."""
    offsets: dict[tuple[str, int], tuple[int, int | None]] = field(default_factory=dict)
    """per assigned (topic, partition): the offset committed (where its objects in S3 end) and the
    highwater aiokafka last fetched (``None``: not yet); set by the runner's loop."""

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
    registry, served by ``--metrics-port``), every series labelled ``run``: the ``kafkagen_sink_*``
    series listed in ``docs/metrics.md``.

    Args:
        stats: the runner's counters (plain ints and dicts, written by the event loop and read
            here from the HTTP server's thread: each value is copied whole).
        run: the run id.
    """

    def __init__(self, stats: SinkStats, run: str) -> None:
        self.stats = stats
        self.run = run
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def collect(self) -> Iterable[Metric]:
        """The metrics as they are now (called by the registry at each scrape)."""
        s, now, run = self.stats, time.monotonic(), [self.run]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(f"kafkagen_sink_{name}", doc, labels=["run"])
            family.add_metric(run, value)
            return family

        yield gauge("kafka_up", "1 while Kafka answers", s.kafka.up)
        yield gauge("kafka_down_seconds", "seconds Kafka has not answered (0 when up)", s.kafka.down_for(now))
        yield gauge("s3_up", "1 unless S3 calls are failing", float(s.s3_down_since is None))
        yield gauge("partitions", "partitions assigned", s.partitions)
        for name, doc, value in (
            ("objects", "objects written to S3", s.objects),
            ("objects_existing", "objects found written already, kept (412)", s.existing),
            ("undecodable", "records written as undecodable lines", s.undecodable),
            ("s3_failures", "S3 calls that failed and were retried", s.s3_failures),
            ("uncompressed_bytes", "bytes of the objects written, before compression", s.uncompressed_bytes),
            ("written_bytes", "bytes of the objects written to S3 (compressed)", s.compressed_bytes),
        ):
            counter = CounterMetricFamily(f"kafkagen_sink_{name}", doc, labels=["run"])
            counter.add_metric(run, value)
            yield counter
        labels = ["run", "topic", "partition"]
        records = CounterMetricFamily("kafkagen_sink_records", "records appended to batches", labels=labels)
        for (topic, partition), count in dict(s.partition_records).items():
            records.add_metric([self.run, topic, str(partition)], count)
        yield records
        committed = GaugeMetricFamily(
            "kafkagen_sink_committed_offset", "offset committed: where the objects in S3 end", labels=labels
        )
        lag = GaugeMetricFamily(
            "kafkagen_sink_lag_records", "highwater minus committed offset", labels=labels
        )
        for (topic, partition), (offset, highwater) in dict(s.offsets).items():
            committed.add_metric([self.run, topic, str(partition)], offset)
            if highwater is not None:
                lag.add_metric([self.run, topic, str(partition)], max(0, highwater - offset))
        yield committed
        yield lag
