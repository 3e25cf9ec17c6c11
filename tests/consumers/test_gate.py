"""The quality gate's rules (consumers/quality/gate.py, docs/gate.md), pure: classes of a result, shares
against thresholds, the warm-up's early-but-certain decision, the rolling window, the message."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from consumers.quality.gate import QualityGate, breaches, halt_message, tally
from streams.config import GateSettings
from streams.control import Breach, ClassCounts
from streams.quality import DEGENERATE_CLASS, ERROR_CLASS, QUALITY_CLASSES, QualityFlag, result_classes

EMPTY = ["empty_content", "reasoning_ate_budget", "truncated"]
"""The flags of a completion whose reasoning ate the whole budget (the held-back run's 94%)."""


def feed(
    gate: QualityGate, pattern: Sequence[Sequence[str] | None], start: ClassCounts | None = None
) -> tuple[int, list[Breach], ClassCounts]:
    """Feed ``gate`` one result at a time (the fleet's counts growing by one), cycling through
    ``pattern``, until it trips or 5,000 results; returns (results when it tripped or 0, the
    breaches, the counts)."""
    counts = start or ClassCounts()
    for i in range(5000):
        counts = tally(counts, result_classes(pattern[i % len(pattern)]))
        found = gate.judge(counts)
        if found:
            return counts.results, found, counts
    return 0, [], counts


def test_result_classes_adds_degenerate_and_error() -> None:
    assert result_classes(None) == [ERROR_CLASS]
    assert result_classes([]) == []
    assert result_classes(["truncated"]) == ["truncated"]  # a long answer cut short: usable
    assert result_classes(["thinking_missing"]) == ["thinking_missing"]
    assert result_classes(EMPTY) == [*EMPTY, DEGENERATE_CLASS]
    assert result_classes(["repetition_loop"]) == ["repetition_loop", DEGENERATE_CLASS]


def test_gate_classes_cover_every_flag_error_and_degenerate() -> None:
    assert set(QUALITY_CLASSES) == {f.value for f in QualityFlag} | {ERROR_CLASS, DEGENERATE_CLASS}
    assert set(GateSettings().thresholds()) == set(QUALITY_CLASSES)  # a max_<class> per class


def test_tally_and_counts_arithmetic() -> None:
    counts = tally(tally(ClassCounts(), ["a", "b"]), ["a"], results=3)
    assert counts == ClassCounts(results=4, classes={"a": 4, "b": 1})
    assert (counts + counts).classes == {"a": 8, "b": 2}
    assert (counts - tally(ClassCounts(), ["a"])) == ClassCounts(results=3, classes={"a": 3, "b": 1})


def test_breaches_are_strictly_above_and_one_turns_a_class_off() -> None:
    counts = ClassCounts(results=100, classes={"truncated": 50, "error": 51, "empty_content": 100})
    found = breaches(counts, {"truncated": 0.5, "error": 0.5, "empty_content": 1.0}, "window")
    assert [b.cls for b in found] == ["error"]  # 50% is not above 50%; 100% of a class set to 1.0 is off
    [b] = found
    assert (b.count, b.results, b.share, b.threshold, b.phase) == (51, 100, 0.51, 0.5, "window")
    assert breaches(ClassCounts(), {"error": 0.0}, "window") == []  # no results, nothing to judge


def test_breaches_come_in_gate_class_order() -> None:
    counts = ClassCounts(results=10, classes={n: 10 for n in QUALITY_CLASSES})
    found = breaches(counts, dict.fromkeys(QUALITY_CLASSES, 0.1), "warmup")
    assert [b.cls for b in found] == list(QUALITY_CLASSES)


def test_the_held_back_run_trips_within_its_first_200_results() -> None:
    """94% of completions empty because the reasoning ate max_tokens 512: the warm-up decides
    as soon as the count alone passes 25% of 200 (51 results flagged), long before 200."""
    pattern = [EMPTY] * 47 + [[]] * 3  # 94%
    at, found, _ = feed(QualityGate(GateSettings()), pattern)
    assert 51 <= at <= 60
    # degenerate and truncated (max 50%) would need 101 flagged: not certain yet
    assert {b.cls for b in found} == {"empty_content", "reasoning_ate_budget"}
    assert all(b.phase == "warmup" and b.count > 50 for b in found)


def test_warmup_waits_until_the_decision_is_certain() -> None:
    """20 flagged results in a row are 100% so far, but the warm-up could still end at 10% (20 of
    200): no trip yet. 30% over the whole warm-up trips once 51 are flagged (~170 results)."""
    gate = QualityGate(GateSettings())
    counts = tally(ClassCounts(), result_classes(EMPTY), results=20)
    assert gate.judge(counts) == []
    at, found, _ = feed(QualityGate(GateSettings()), [EMPTY] * 3 + [[]] * 7)
    assert 160 <= at <= 200
    assert {b.cls for b in found} >= {"reasoning_ate_budget"}


def test_shares_below_the_thresholds_never_trip() -> None:
    """15% dead letters (max 20%) and 20% empty answers (max 25%), spread evenly: a run that is
    healthy enough goes on for thousands of results (warm-up and window)."""
    e, x, ok = None, EMPTY, list[str]()
    pattern: list[list[str] | None] = [
        e,
        x,
        ok,
        ok,
        ok,
        ok,
        x,
        e,
        ok,
        ok,
        ok,
        x,
        ok,
        e,
        ok,
        ok,
        x,
        ok,
        ok,
        ok,
    ]
    at, found, counts = feed(QualityGate(GateSettings()), pattern)
    assert (at, found) == (0, [])
    assert counts.results == 5000


def test_the_window_judges_the_last_results_not_the_whole_run() -> None:
    """After 2,000 clean results, a collapse to all-empty answers trips once the last 100 hold
    more than 25% of them (26 or so), though the whole run is only ~1% empty."""
    settings = GateSettings(warmup=200, window=100)
    gate = QualityGate(settings)
    counts = ClassCounts()
    for _ in range(2000):
        counts = tally(counts, [])
        assert gate.judge(counts) == []
    at, found, counts = feed(gate, [EMPTY], start=counts)
    assert 2025 <= at <= 2030
    assert all(b.phase == "window" and b.results == 100 for b in found)
    cumulative = counts.classes["empty_content"] / counts.results
    assert cumulative < 0.02


def test_the_first_judgement_after_warmup_is_labelled_warmup_then_window() -> None:
    settings = GateSettings(warmup=10, window=50, max_error=0.5)
    gate = QualityGate(settings)
    assert gate.judge(tally(ClassCounts(), [ERROR_CLASS], results=5)) == []  # 5 of 10 is not > 50%
    [b] = gate.judge(tally(tally(ClassCounts(), [ERROR_CLASS], results=6), [], results=4))
    assert (b.phase, b.count, b.results) == ("warmup", 6, 10)
    [b] = gate.judge(tally(tally(ClassCounts(), [ERROR_CLASS], results=7), [], results=4))
    assert b.phase == "window"


def test_a_disabled_gate_never_trips() -> None:
    at, found, _ = feed(QualityGate(GateSettings(enabled=False)), [None])
    assert (at, found) == (0, [])


def test_a_counts_jump_is_judged_whole() -> None:
    """Counts arrive in jumps (reports every second, a consumer restarted late in a run): 1,500
    results at once with 30% errors trip, judged over all of them (no snapshot inside the jump:
    the window's base is the oldest one, the epoch's start)."""
    gate = QualityGate(GateSettings())
    counts = tally(tally(ClassCounts(), [ERROR_CLASS], results=450), [], results=1050)
    [b] = gate.judge(counts)
    assert (b.cls, b.phase) == ("error", "warmup")
    assert b.results == 1500


def test_halt_message_names_the_most_specific_cause_and_its_fix() -> None:
    """The held-back run: empty_content follows from reasoning_ate_budget, degenerate from any;
    the reason lists all with their shares, the fix is the budget's."""
    found = [
        Breach(cls="empty_content", count=51, results=54, share=51 / 54, threshold=0.25, phase="warmup"),
        Breach(
            cls="reasoning_ate_budget", count=51, results=54, share=51 / 54, threshold=0.25, phase="warmup"
        ),
        Breach(cls="degenerate", count=51, results=54, share=51 / 54, threshold=0.5, phase="warmup"),
    ]
    reason, fix = halt_message(found, {"max_tokens": 512, "thinking": True})
    assert reason.startswith("reasoning_ate_budget in 51 of 54 results (94% > 25%, warmup)")
    assert reason.endswith("at max_tokens 512, thinking on")
    assert "empty_content" in reason and "degenerate" in reason
    assert "--max-tokens" in fix and "--no-thinking" in fix


@pytest.mark.parametrize(
    ("cls", "words"),
    [
        ("thinking_missing", "--reasoning-parser"),
        ("malformed_tool_call", "--tool-call-parser"),
        ("error", "<run>.errors"),
        ("repetition_loop", "--repetition-penalty"),
        ("truncated", "--max-tokens"),
        ("template_leak", "chat template"),
    ],
)
def test_each_cause_has_its_own_fix(cls: str, words: str) -> None:
    found = [Breach(cls=cls, count=9, results=10, share=0.9, threshold=0.25, phase="window")]
    reason, fix = halt_message(found, {"max_tokens": 4096, "thinking": False})
    assert reason.startswith(cls) and "thinking off" in reason
    assert words in fix


SERVER_FLAGS = frozenset({"--reasoning-parser", "--tool-call-parser", "--chat-template", "--grammar-backend"})
"""Flags the fixes name of the inference servers (SGLang's ``launch_server``), not of kafkagen."""


def _flags(command: object) -> set[str]:
    import click

    assert isinstance(command, click.Command)
    return {flag for param in command.params for flag in (*param.opts, *param.secondary_opts)}


@pytest.mark.parametrize("cls", QUALITY_CLASSES)
def test_every_option_a_fix_names_is_one_the_commands_take(cls: str) -> None:
    """Issue 30 item 3: a fix told to "set a repetition penalty" when no option offered one. Every
    ``--flag`` of a fix is a server's or one ``kafkagen run`` takes (a halt is fixed by running it
    again); the generation ones ``kafkagen regenerate`` takes too (a regeneration's attempts keep
    its overrides, launch.gate.control.unjudged_breach)."""
    import re

    from launch.regenerate.cli import OVERRIDABLE, regenerate_command
    from launch.run.cli import run_command_

    found = [Breach(cls=cls, count=9, results=10, share=0.9, threshold=0.25, phase="window")]
    _reason, fix = halt_message(found, {"max_tokens": 512, "thinking": True})
    named = set(re.findall(r"--[a-z][a-z.-]*[a-z]", fix)) - SERVER_FLAGS
    assert named <= _flags(run_command_), named - _flags(run_command_)
    regenerate = _flags(regenerate_command)
    for flag in named - {"--consumer.retry-invalid"}:  # a consumer setting: the run's, by design
        assert flag in regenerate, flag
        setting = flag.removeprefix("--").removeprefix("generation.").replace("-", "_")
        assert setting in {"max_tokens", "no_thinking", *OVERRIDABLE}, f"{flag}: parsed, unused"
