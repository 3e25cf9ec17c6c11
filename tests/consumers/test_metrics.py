"""The consumer's per-partition gauges follow its assignment (unit: the metrics object alone)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from consumers.metrics import ConsumerMetrics


def _partitions(metrics: ConsumerMetrics, name: str) -> dict[str, float]:
    text = generate_latest(metrics.registry).decode()
    return {
        s.labels["partition"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_partition_series_follow_the_assignment_and_lag_is_highwater_minus_committed() -> None:
    metrics = ConsumerMetrics("r", "http://127.0.0.1:1", "c0")
    metrics.observe_partitions({0: (10, 25), 1: (4, None), 2: (None, None)})
    assert _partitions(metrics, "kafkagen_generate_committed_offset") == {"0": 10.0, "1": 4.0}
    assert _partitions(metrics, "kafkagen_generate_lag_records") == {"0": 15.0}
    metrics.observe_partitions({1: (9, 12)})  # partition 0 moved away
    assert _partitions(metrics, "kafkagen_generate_committed_offset") == {"1": 9.0}
    assert _partitions(metrics, "kafkagen_generate_lag_records") == {"1": 3.0}
    metrics.observe_partitions({})  # left the group
    assert _partitions(metrics, "kafkagen_generate_committed_offset") == {}


def test_a_completion_counts_its_reason_tokens_latency_and_flags() -> None:
    metrics = ConsumerMetrics("r", "http://127.0.0.1:1", "c0")
    metrics.completed("length", completion_tokens=30, reasoning_tokens=20, latency_s=3.0, flags=["truncated"])
    metrics.dead_lettered("FatalRequestError")
    text = generate_latest(metrics.registry).decode()
    values = {
        (
            s.name,
            s.labels.get("finish_reason")
            or s.labels.get("flag")
            or s.labels.get("error_type")
            or s.labels.get("le"),
        ): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert values[("kafkagen_generate_completions_total", "length")] == 1
    assert values[("kafkagen_generate_completions_total", "stop")] == 0
    assert values[("kafkagen_generate_completion_tokens_total", None)] == 30
    assert values[("kafkagen_generate_reasoning_tokens_total", None)] == 20
    assert values[("kafkagen_generate_quality_flags_total", "truncated")] == 1
    assert values[("kafkagen_generate_dead_letters_total", "FatalRequestError")] == 1
    assert values[("kafkagen_generate_request_latency_seconds_bucket", "2.0")] == 0
    assert values[("kafkagen_generate_request_latency_seconds_bucket", "5.0")] == 1
