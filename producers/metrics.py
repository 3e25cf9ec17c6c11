"""The producer's Prometheus metrics: the one owner of every ``kafkagen_producer_*`` series
(``docs/metrics.md``), served by ``kafkagen produce --metrics-port P``
(:func:`streams.metrics.serve_metrics`).

Read at each scrape from the counts the publisher keeps anyway (:class:`producers.results.InputStats`
per input, plus the records and transactions committed): nothing is added to the per-line path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from producers.results import InputStats

__all__ = ["ProducerMetrics"]


@dataclass(eq=False)  # hashable: the registry keys its collectors
class ProducerMetrics(Collector):
    """Prometheus metrics of one producer invocation, every series labelled ``run``.

    Written by the publisher's event loop, read by the metrics server's thread: the fields are
    ints, a list only appended to and a dict whose values are replaced whole, each copied at once.

    Attributes:
        run: the run id.
        inputs: the stats of every input started so far (:class:`producers.results.InputStats`).
        committed: records in committed transactions, per partition of the prompts topic.
        transactions: transactions committed.
    """

    run: str
    inputs: list[InputStats] = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)
    transactions: int = 0
    registry: CollectorRegistry = field(init=False)

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def transaction_committed(self, records: dict[int, int]) -> None:
        """A transaction with ``records`` (partition → records) was committed."""
        for partition, count in records.items():
            self.committed[partition] = self.committed.get(partition, 0) + count
        self.transactions += 1

    def collect(self) -> Iterable[Metric]:
        """The metrics as they are now (called by the registry at each scrape)."""
        run = [self.run]
        inputs = list(self.inputs)
        records = CounterMetricFamily(
            "kafkagen_producer_records",
            "records published (in committed transactions) to the prompts topic, per partition",
            labels=["run", "partition"],
        )
        for partition, count in sorted(dict(self.committed).items()):
            records.add_metric([self.run, str(partition)], count)
        yield records
        for name, doc, value in (
            ("transactions", "transactions committed", self.transactions),
            ("bad_lines", "input lines reported bad (not published)", sum(s.bad for s in inputs)),
            ("resume_skipped", "good lines skipped (published earlier)", sum(s.skipped for s in inputs)),
            ("read_bytes", "bytes of input read (decompressed)", sum(s.bytes for s in inputs)),
            ("lines", "input lines read", sum(s.lines for s in inputs)),
        ):
            counter = CounterMetricFamily(f"kafkagen_producer_{name}", doc, labels=["run"])
            counter.add_metric(run, value)
            yield counter
        gauge = GaugeMetricFamily("kafkagen_producer_inputs", "inputs started so far", labels=["run"])
        gauge.add_metric(run, len(inputs))
        yield gauge
