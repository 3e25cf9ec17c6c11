"""The budget rules (consumers/quality/budget.py, docs/budgets.md): when the output tokens, the
deadline or the projected finish halt a run, what the halt says, and how ``--deadline`` is read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from consumers.quality.budget import budget_halt, deadline_halt, parse_deadline, projected_halt
from streams.config import GateSettings, Settings

NOW = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)


def test_the_output_token_budget_halts_at_its_count_and_says_how_to_go_on() -> None:
    gate = GateSettings(max_output_tokens=1_000_000)
    assert budget_halt(gate, 999_999) is None
    assert budget_halt(GateSettings(), 10**12) is None  # no budget: never
    halt = budget_halt(gate, 1_000_312)
    assert halt is not None
    reason, fix = halt
    assert reason == "output token budget 1,000,000 reached: 1,000,312 tokens"
    assert "--max-output-tokens" in fix and "1,000,312" in fix and "resumes" in fix
    assert budget_halt(gate, 1_000_000) is not None  # reached counts


def test_the_deadline_halts_when_reached() -> None:
    gate = GateSettings(deadline=NOW)
    assert deadline_halt(gate, NOW - timedelta(seconds=1)) is None
    halt = deadline_halt(gate, NOW)
    assert halt is not None and halt[0] == "deadline 2026-12-07T06:00:00+00:00 reached"
    assert "--deadline" in halt[1]
    assert deadline_halt(GateSettings(), NOW) is None


def test_a_projected_finish_past_the_deadline_halts_before_it() -> None:
    gate = GateSettings(deadline=NOW + timedelta(hours=1))
    # 3,600 to go at 2/s: 30 minutes, within the hour
    assert projected_halt(gate, done=400, total=4_000, results_per_s=2.0, now=NOW) is None
    halt = projected_halt(gate, done=400, total=4_000, results_per_s=0.5, now=NOW)  # 2 hours
    assert halt is not None
    assert halt[0].startswith(
        "projected finish 2026-12-07T08:00:00+00:00 passes the deadline 2026-12-07T07:00:00"
    )
    assert "3,600 of 4,000" in halt[0] and "--deadline" in halt[1]
    # no rate yet, or nothing left: no projection
    assert projected_halt(gate, done=0, total=4_000, results_per_s=0.0, now=NOW) is None
    assert projected_halt(gate, done=4_000, total=4_000, results_per_s=0.01, now=NOW) is None
    # past the deadline the deadline itself halts, rate or not
    assert projected_halt(gate, done=0, total=9, results_per_s=0.0, now=NOW + timedelta(hours=2))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2h", NOW + timedelta(hours=2)),
        ("1h30m", NOW + timedelta(minutes=90)),
        ("PT2H", NOW + timedelta(hours=2)),
        ("02:00:00", NOW + timedelta(hours=2)),
        ("3600", NOW + timedelta(hours=1)),
        ("2026-12-08T06:00:00Z", datetime(2026, 12, 8, 6, tzinfo=UTC)),
        ("2026-12-08T07:00:00+01:00", datetime(2026, 12, 8, 6, tzinfo=UTC)),
    ],
)
def test_a_deadline_is_a_time_with_its_zone_or_a_duration(text: str, expected: datetime) -> None:
    assert parse_deadline(text, NOW) == expected


@pytest.mark.parametrize("text", ["tomorrow", "2026-12-08T06:00:00", "-5", "0", ""])
def test_a_bad_deadline_says_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="deadline"):
        parse_deadline(text, NOW)


def test_the_budgets_are_settings_and_not_quality_thresholds() -> None:
    env = {"KAFKAGEN_GATE__MAX_OUTPUT_TOKENS": "5000", "KAFKAGEN_GATE__DEADLINE": "2026-12-08T06:00:00Z"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        gate = Settings().gate
    assert gate.max_output_tokens == 5000 and gate.deadline == datetime(2026, 12, 8, 6, tzinfo=UTC)
    assert "output_tokens" not in gate.thresholds() and "deadline" not in gate.thresholds()


def test_a_consumer_counts_the_runs_output_tokens_and_their_spread() -> None:
    """FleetGate's sum: its own completions plus every other member's latest report (any epoch),
    and its report's sum of squares (the projection's spread, launch/status/projection.py)."""
    import logging

    from consumers.quality.fleet_gate import FleetGate
    from streams.control import MemberLoad, MemberReport
    from streams.kafka import KafkaOutage
    from streams.records import Usage

    s = Settings(run_id="r")
    outage = KafkaOutage("k", logging.getLogger("t"))
    gate = FleetGate(s, instance_id="a", server_url="http://a", kafka=outage, load=MemberLoad)
    gate.count([], Usage(completion_tokens=3))
    gate.count([], Usage(completion_tokens=4))
    gate.count(None)  # a dead letter: no tokens
    other = dict(
        run_id="r", incarnation="x", host="h", pid=1, server="http://b", epoch=3, completion_tokens=100
    )
    gate.control.state.members["b"] = MemberReport(instance="b", **other)  # type: ignore[arg-type]
    gate.control.state.members["a"] = MemberReport(instance="a", **other)  # type: ignore[arg-type]  # its own: stale
    assert gate.fleet_output_tokens() == 3 + 4 + 100
    report = gate.report()
    assert (report.completion_tokens, report.completion_tokens_sq, report.completions) == (7, 25, 2)
