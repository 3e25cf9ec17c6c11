"""The fleet benchmark's pure pieces (:mod:`bench.fleet`): no Kafka, no simulators."""

from __future__ import annotations

import bench.fleet
import bench.fleet.__main__
from bench.fleet.cli import build_parser, main
from bench.fleet.ours import PERIODIC_REPORT
from bench.fleet.prompts import make_prompts
from bench.fleet.report import percent, quantile


def test_the_package_keeps_the_entry_point() -> None:
    assert bench.fleet.main is main
    assert bench.fleet.__main__.main is main


def test_flags_and_defaults() -> None:
    args = build_parser().parse_args([])
    assert (args.prompts, args.servers, args.time_scale, args.phases) == (20_000, 7, 5.0, "ours,baseline")
    assert (args.key_by, args.baseline_concurrency, args.run_id) == ("balanced", 48, "bench-fleet")


def test_prompts_cycle_the_bundled_questions() -> None:
    prompts = make_prompts(3)
    assert [p.id for p in prompts] == ["bench-00000", "bench-00001", "bench-00002"]
    assert prompts[0].metadata is not None and prompts[0].metadata.line == 1


def test_percent_and_quantile() -> None:
    assert percent(None) == "n/a"
    assert percent(0.1234) == "12.3 %"
    assert quantile([], 0.5) == 0.0
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert quantile([3.0, 1.0, 2.0], 0.99) == 3.0


def test_periodic_report_line() -> None:
    line = "INFO consumer: completions 120 (4.0/s), dead letters 2, retries 7"
    assert PERIODIC_REPORT.findall(line) == [("120", "2", "7")]
