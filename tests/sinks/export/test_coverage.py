"""Holes, gaps and overlaps of a run's objects (:mod:`sinks.export.coverage`), without Kafka:
milliseconds, no services."""

from __future__ import annotations

import pytest

from sinks.export import coverage
from sinks.export.coverage import overlaps, s3_only_gaps, spans
from sinks.export.sources import Source
from sinks.layout import ObjectMeta, parse_key


@pytest.mark.parametrize(
    ("spans", "start", "end", "holes"),
    [
        ([], 0, 0, []),
        ([], 3, 7, [(3, 6, "no object")]),
        ([(0, 9)], 0, 10, []),
        ([(0, 9)], 5, 10, []),  # objects older than Kafka's retention: fine
        ([(5, 9)], 0, 12, [(0, 4, "before the first object"), (10, 11, "after the last object")]),
        ([(0, 4), (3, 9), (12, 14)], 0, 15, [(10, 11, "between objects")]),  # overlaps are not holes
        ([(0, 4), (8, 9)], None, None, [(5, 7, "between objects")]),  # without Kafka
    ],
)
def test_holes_before_between_and_after_objects(
    spans: list[tuple[int, int]], start: int | None, end: int | None, holes: list[tuple[int, int, str]]
) -> None:
    assert coverage.holes(spans, start, end) == holes


def _source(topic: str, partition: int, start: int, end: int | None) -> Source:
    key = f"runs/r/{topic}/partition={partition}/{topic}+{partition}+{start:010d}.jsonl.zst"
    meta = None if end is None else ObjectMeta(start, end, end - start + 1, "ab" * 32, 1)
    return Source(key, parse_key(key), meta)


def test_spans_are_sorted_per_partition_and_skip_unread_objects() -> None:
    sources = [
        _source("c", 0, 10, 19),
        _source("c", 0, 0, 9),
        _source("c", 1, 0, 4),
        _source("e", 0, 0, None),  # its metadata could not be read
    ]
    assert spans(sources) == {("c", 0): [(0, 9), (10, 19)], ("c", 1): [(0, 4)]}


def test_overlaps_name_the_offsets_two_objects_share() -> None:
    found = {("c", 0): [(0, 9), (5, 14), (20, 29)], ("c", 1): [(0, 9), (2, 3)]}
    assert overlaps(found) == [
        {"topic": "c", "partition": 0, "from": 5, "to": 9},
        {"topic": "c", "partition": 1, "from": 2, "to": 3},
    ]


def test_without_kafka_every_hole_between_objects_is_a_gap() -> None:
    gaps = s3_only_gaps({("c", 1): [(0, 4), (8, 9)], ("c", 0): [(0, 9)]})
    assert gaps == [
        {
            "topic": "c",
            "partition": 1,
            "from": 5,
            "to": 7,
            "where": "between objects",
            "first_record": None,
            "reason": "no object holds these offsets (not checked against Kafka)",
        }
    ]
