"""The run's projection (launch/status/projection.py, docs/budgets.md "Projection"): totals at the
end with 95% intervals from the members' reports, in the status document and the terminal view."""

from __future__ import annotations

import dataclasses
import io
import math
import random
from datetime import UTC, datetime

from rich.console import Console

from launch.status.calibration import Calibration, Check, Checkpoint
from launch.status.projection import Z_95, Budgets, Estimate, Projection, against, budgets_of, project
from launch.status.shape import Observation, shape
from launch.status.view import budgets_text, projection_text, status_view
from streams.control import ClassCounts, ControlState, MemberReport, RunRecord

NOW = 1_800_000_000.0


def _report(instance: str, tokens: list[int], *, truncated: int = 0, **kw: object) -> MemberReport:
    return MemberReport(
        run_id="r",
        instance=instance,
        incarnation="x",
        host="h",
        pid=1,
        server=f"http://{instance}:30000",
        at=NOW - 1,
        completions=len(tokens),
        completion_tokens=sum(tokens),
        completion_tokens_sq=sum(t * t for t in tokens),
        totals=ClassCounts(results=len(tokens), classes={"truncated": truncated} if truncated else {}),
        **kw,  # type: ignore[arg-type]
    )


def test_the_output_tokens_project_the_mean_with_an_interval_from_the_spread() -> None:
    # 2 members, 100 completions of 90 and 110 tokens (mean 100, sd 10); 900 results to come
    a = _report("a", [90, 110] * 25, truncated=10)
    b = _report("b", [110, 90] * 25, truncated=10)
    p = project(
        [a, b], at=NOW, total=1000, results=100, tokens_per_s=50.0, live_servers=2, started_at=NOW - 200
    )
    assert p is not None and p.completions == 100
    o = p.output_tokens
    assert o.value == 100_000  # 10,000 so far + 900 × 100
    half = Z_95 * math.sqrt(900 * 100 + 900 * 900 * 100 / 100)
    assert math.isclose(o.high - o.value, half) and math.isclose(o.value - o.low, half)
    # the finish: the remaining 90,000 tokens at 50 tokens/s, its interval the tokens' one
    assert p.finish_at is not None and p.finish_at.value == NOW + 1800
    assert p.finish_at.low < p.finish_at.value < p.finish_at.high
    # GPU-hours: 2 servers × (200 s so far + 1,800 s to come)
    assert p.gpu_hours is not None and math.isclose(p.gpu_hours.value, 2 * 2000 / 3600)
    # a class: 20 of 100 truncated, 20% of the 900 to come
    t = p.classes["truncated"]
    assert t.value == 20 + 180 and t.low < t.value < t.high and t.low >= 20


def test_no_spread_no_interval_and_a_done_run_ends_now() -> None:
    p = project([_report("a", [64] * 10)], at=NOW, total=10, results=10, tokens_per_s=0.0, live_servers=0,
                started_at=None)  # fmt: skip
    assert p is not None and (p.output_tokens.low, p.output_tokens.value, p.output_tokens.high) == (
        640,
        640,
        640,
    )
    assert p.finish_at is not None and p.finish_at.value == NOW and p.gpu_hours is None
    assert project([_report("a", [])], at=NOW, total=10, results=0, tokens_per_s=1.0, live_servers=1,
                   started_at=None) is None  # fmt: skip
    # no rate yet: tokens projected, no finish
    p = project([_report("a", [5, 7])], at=NOW, total=10, results=2, tokens_per_s=0.0, live_servers=1,
                started_at=None)  # fmt: skip
    assert p is not None and p.finish_at is None and p.gpu_hours is None


def test_the_interval_covers_the_truth_of_a_replayed_run() -> None:
    """A past run replayed: 20,000 completions' token counts drawn from a long-tailed law; the
    projection from its first 1% (200) holds the real total within its interval."""
    rng = random.Random(7)
    tokens = [min(4096, int(rng.lognormvariate(6.0, 0.8))) for _ in range(20_000)]
    first = tokens[:200]
    p = project([_report("a", first)], at=NOW, total=len(tokens), results=len(first), tokens_per_s=1.0,
                live_servers=1, started_at=NOW)  # fmt: skip
    assert p is not None
    truth = sum(tokens)
    assert p.output_tokens.low <= truth <= p.output_tokens.high, (p.output_tokens, truth)
    assert abs(p.output_tokens.value - truth) / truth < 0.15


def _observation(report: MemberReport) -> Observation:
    """A run of 100 prompts created an hour ago, 40 results, ``report`` its one member's."""
    control = ControlState(
        members={"a": report},
        run=RunRecord(
            run_id="r", created_at=NOW - 3600, updated_at=NOW, by="t", prompts_topic="p", partitions=1
        ),
    )
    return Observation(
        run_id="r",
        at=NOW,
        prompts_topic_exists=True,
        completions_topic_exists=True,
        prompts_topic="p",
        completions_topic="c",
        errors_topic="e",
        prompts_end={0: 100},
        generate_committed={0: 40},
        completions_end={0: 40},
        published=100,
        control=control,
    )


def test_the_status_document_and_view_carry_the_projection() -> None:
    status = shape(_observation(_report("a", [100] * 40, tokens_per_s=20.0, started_at=NOW - 100)))
    p = status.projection
    assert p is not None and p.total == 100 and p.output_tokens.value == 10_000
    assert p.started_at == NOW - 3600 and p.servers == 1
    assert p.finish_at is not None and p.finish_at.value == NOW + 6000 / 20.0
    doc = status.to_dict()["projection"]
    assert doc["output_tokens"] == {"value": 10_000, "low": 10_000, "high": 10_000}
    # GPU-hours: the member held its server 99 s so far (started_at to its report), 300 s to come
    assert p.gpu_hours_so_far == 99 / 3600 and p.gpu_hours is not None
    assert math.isclose(p.gpu_hours.value, (99 + 300) / 3600)
    line = projection_text(p)
    assert line.startswith("output tokens 10,000 [10,000-10,000], GPU-hours 0.11 [0.11-0.11] (1 server now, "
                           "0.03 so far), finish ")  # fmt: skip


def test_the_budgets_come_from_the_run_record_and_are_judged_against_the_projection() -> None:
    """``gate.max_output_tokens`` and ``gate.deadline`` as a run record holds them (pydantic's JSON:
    an ISO time with its zone), each judged against the projection's 95% interval."""
    assert budgets_of({"max_output_tokens": None, "deadline": None}) is None
    b = budgets_of({"max_output_tokens": 50_000, "deadline": "2026-12-07T10:00:00Z"})
    assert b == Budgets(50_000, datetime(2026, 12, 7, 10, tzinfo=UTC).timestamp())
    assert against(Estimate(40_000, 38_000, 42_000), 50_000) == "within"
    assert against(Estimate(49_000, 47_000, 51_000), 50_000) == "may cross"
    assert against(Estimate(60_000, 55_000, 65_000), 50_000) == "over"
    finish = Estimate(NOW + 300, NOW + 200, NOW + 400)
    text = budgets_text(Budgets(50_000, NOW + 100), _projection(finish))
    assert text.startswith("output tokens 50,000 (projected: within); deadline ")
    assert text.endswith("(projected finish: over)")
    assert budgets_text(Budgets(None, NOW), None).startswith("deadline ")


def _projection(finish: Estimate) -> Projection:
    tokens = Estimate(40_000, 38_000, 42_000)
    return Projection(NOW, 10, 100, 10, tokens, None, finish, 1, NOW - 60, {})


def test_after_the_first_checkpoint_the_status_says_how_close_a_replayed_run_came() -> None:
    """The calibration's accuracy at the last checkpoint the run passed (results / total), none
    before the first (1%); the view prints it under the projection, each total outside its
    interval said so."""
    cal = Calibration(
        label="GSM8K 1,319 prompts x 2",
        past_run="p",
        command="python -m bench.projection /tmp/p",
        commit="abc1234",
        written_at="2026-12-07T11:00:00+00:00",
        checkpoints=[
            Checkpoint(0.01, 26, 2638, Check(0.035, True), Check(-0.04, True), Check(0.07, True)),
            Checkpoint(0.05, 132, 2638, Check(-0.032, True), Check(0.3, False), None),
        ],
    )
    a = _report("a", [100] * 40, tokens_per_s=20.0, started_at=NOW - 100)

    def at(results: int) -> Projection | None:
        return project([a], at=NOW, total=4000, results=results, tokens_per_s=20.0, live_servers=1,
                       started_at=None, calibration=cal)  # fmt: skip

    before = at(39)
    assert before is not None and before.replayed is None
    first = at(40)
    assert first is not None and first.replayed is not None
    assert first.replayed.text() == (
        "projection at 1% of a replayed past run (GSM8K 1,319 prompts x 2, bench/projection.py): "
        "finish -4%, tokens +4%, GPU-hours +7%, each inside its interval"
    )
    later = at(1000)
    assert later is not None and later.replayed is not None
    assert later.replayed.text().endswith(": finish +30% (outside its interval), tokens -3%")
    done = at(4000)  # nothing left to project: nothing to say how close it comes
    assert done is not None and done.replayed is None
    status = dataclasses.replace(shape(_observation(a)), projection=first)
    out = io.StringIO()
    Console(file=out, width=300).print(status_view(status))
    assert "projection at 1% of a replayed past run (GSM8K" in out.getvalue()
