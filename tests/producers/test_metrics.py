"""The producer's metrics: per-partition records of committed transactions, and the input counts
(unit: the metrics object alone; the stack test in tests/e2e/test_metrics.py scrapes a real one)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from producers.metrics import ProducerMetrics
from producers.results import InputStats


def test_records_add_up_per_partition_and_inputs_are_summed() -> None:
    metrics = ProducerMetrics("r")
    metrics.inputs += [InputStats("a", bad=2, skipped=5, bytes=100), InputStats("b", bad=1, bytes=50)]
    metrics.transaction_committed({0: 3, 1: 2})
    metrics.transaction_committed({1: 4})
    values = {
        (s.name, s.labels.get("partition")): s.value
        for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for s in family.samples
    }
    assert values[("kafkagen_producer_records_total", "0")] == 3
    assert values[("kafkagen_producer_records_total", "1")] == 6
    assert values[("kafkagen_producer_transactions_total", None)] == 2
    assert values[("kafkagen_producer_bad_lines_total", None)] == 3
    assert values[("kafkagen_producer_resume_skipped_total", None)] == 5
    assert values[("kafkagen_producer_read_bytes_total", None)] == 150
    assert values[("kafkagen_producer_inputs", None)] == 2
