"""Progress people can read (issue 30 item 6): every plain progress line starts with its time, no
"0/0" before the first result, the ETA comes as an interval from the rate window's count, and the
producer's closing line is not called a summary."""

from __future__ import annotations

import io
import re

import pytest

from launch.run.progress import _Display
from launch.status.shape import GroupMember, Observation, eta_range, shape
from launch.status.view import eta_text, progress_line, status_line
from producers.cli import _echo
from producers.results import InputStats, RunResult
from streams.control import RATE_WINDOW_S, ControlState, MemberReport

NOW = 1_764_660_000.0
CLOCK = r"\d\d:\d\d:\d\d "


def _report(instance: str, rate: float, ran_s: float) -> MemberReport:
    return MemberReport(
        run_id="demo", instance=instance, incarnation="x", host="h", pid=1, server=f"http://{instance}:30000",
        at=NOW - 1.0, started_at=NOW - 1.0 - ran_s, completions_per_s=rate,
    )  # fmt: skip


def _obs(results: int, *reports: MemberReport, observed_rate: float | None = None) -> Observation:
    """100 prompts published on one partition; ``results`` of them written, none in S3 yet."""
    return Observation(
        run_id="demo",
        at=NOW,
        prompts_topic_exists=True,
        completions_topic_exists=True,
        prompts_topic="demo.prompts",
        completions_topic="demo.completions",
        errors_topic="demo.errors",
        prompts_end={0: 101},
        generate_committed={0: results},
        completions_end={0: results},
        published=100,
        generate_members=[GroupMember("gen-0", "10.0.0.1", {"demo.prompts": [0]})],
        control=ControlState(members={r.instance: r for r in reports}),
        observed_rate=observed_rate,
    )


def test_the_eta_interval_is_the_counting_noise_of_the_rate_window() -> None:
    # 1 result/s over the whole 120 s window: 120 counted, 2/sqrt(120) = 18% either way
    low, high = eta_range(600, 1.0, RATE_WINDOW_S) or (0.0, None)
    assert (low, high) == (round(600 / (1 + 2 / 120**0.5), 1), round(600 / (1 - 2 / 120**0.5), 1))
    assert low < 600 < (high or 0)
    assert eta_range(600, 1.0, 12_000) == (589.2, 611.2), "more results counted: a narrower interval"
    assert eta_range(600, 1.0, 4) == (300.0, None), "4 counted: no upper bound"
    assert eta_range(600, 0.0, 120) is None


def test_a_member_that_started_lately_counted_fewer_results() -> None:
    settled = shape(_obs(40, _report("gen-0", 1.0, ran_s=600))).eta_range_s
    fresh = shape(_obs(40, _report("gen-0", 1.0, ran_s=30))).eta_range_s
    assert settled == eta_range(60, 1.0, RATE_WINDOW_S)
    assert fresh == eta_range(60, 1.0, 30.0)
    assert shape(_obs(40, observed_rate=1.0)).eta_range_s == eta_range(60, 1.0, RATE_WINDOW_S)


def test_the_eta_is_shown_as_an_interval() -> None:
    status = shape(_obs(40, _report("gen-0", 0.2, ran_s=600)))  # 60 left at 0.2/s: 5 min, 24 counted
    low, high = status.eta_range_s or (0.0, None)
    assert high is not None and low < 300 < high
    text = eta_text(status)
    assert re.fullmatch(r"ETA \d+-\d+ min", text), text
    assert text in progress_line(status) and text in status_line(status)
    few = shape(_obs(40, _report("gen-0", 0.2, ran_s=10)))  # 2 results counted
    assert eta_text(few).startswith("ETA over "), eta_text(few)
    assert eta_text(shape(_obs(40))) == "ETA -", "no rate: no ETA"


def test_no_total_is_shown_before_the_first_result() -> None:
    line = progress_line(shape(_obs(0)))
    assert "waiting for the first results" in line and "0/0" not in line, line
    assert "in S3 0/40" in progress_line(shape(_obs(40)))


def test_every_plain_progress_line_starts_with_its_time() -> None:
    out = io.StringIO()  # not a tty: plain lines
    display = _Display(True, 10.0, out)
    display.show(shape(_obs(0)))
    display.note("progress: Kafka at 127.0.0.1:9092 does not answer; waiting")
    display.show(shape(_obs(100)), final=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and all(re.match(CLOCK, line) for line in lines), lines
    assert re.match(CLOCK + "progress: generated 0/100, waiting for the first results; ", lines[0])
    assert re.match(r"\d\d:\d\d:\d\d run demo \w+: published 100, ", status_line(shape(_obs(40))))


def test_the_producers_lines_have_the_time_and_its_last_is_no_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = RunResult([InputStats("a.jsonl", published=3, lines=3, bytes=30)], seconds=1.0)
    line = result.summary()
    assert line.startswith("producer: published 3, skipped 0") and "summary" not in line
    _echo(line)  # stderr is captured: no terminal
    assert re.fullmatch(CLOCK + re.escape(line) + "\n", capsys.readouterr().err)
