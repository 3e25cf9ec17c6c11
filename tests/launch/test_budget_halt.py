"""The main job's deadline halt on the real broker (launch/gate/control.py ``halt_if_late``,
docs/budgets.md): a projected finish past ``gate.deadline`` writes the gate's halt record, naming the
projection and the fix; a projection within it, or one from too few results, writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from launch.gate.control import halt_if_late, resume_if_halted
from streams.config import Settings
from streams.control import read_control
from streams.topics import ensure_topics, topic_specs


async def test_a_projected_finish_past_the_deadline_halts_the_run_resumably(settings: Settings) -> None:
    deadline = datetime.now(UTC) + timedelta(hours=1)
    s = settings.model_copy(update={"gate": settings.gate.model_copy(update={"deadline": deadline})})
    await ensure_topics(s, [topic_specs(s)["control"]])
    # 900 to go at 1/s: 15 minutes, within the hour
    assert not await halt_if_late(s, done=100, total=1000, results_per_s=1.0, by="test")
    # at 0.1/s it would take 2.5 hours, but 5 results are too few to project from
    assert not await halt_if_late(s, done=5, total=1000, results_per_s=0.1, by="test")
    assert not (await read_control(s)).halted
    assert await halt_if_late(s, done=100, total=1000, results_per_s=0.1, by="test")
    state = await read_control(s)
    assert state.halted and state.gate is not None and state.gate.by == "test"
    assert state.gate.reason.startswith("projected finish ") and "passes the deadline" in state.gate.reason
    assert "900 of 1,000 results to come at 0.10/s" in state.gate.reason
    assert "--deadline" in state.gate.fix and state.gate.params == {"budget": "deadline"}
    assert not await halt_if_late(s, done=100, total=1000, results_per_s=0.1, by="test")  # halted already
    # a re-run with a later deadline resumes it, and says nothing about halting again
    later = s.model_copy(
        update={"gate": s.gate.model_copy(update={"deadline": deadline + timedelta(days=1)})}
    )
    note = await resume_if_halted(later, by="test")
    assert note is not None and "resumed" in note and "halt again" not in note, note
    # one already passed is told
    assert await halt_if_late(s, done=0, total=1000, results_per_s=0.0, by="test") is False  # not yet
    passed = s.model_copy(update={"gate": s.gate.model_copy(update={"deadline": datetime.now(UTC)})})
    assert await halt_if_late(passed, done=0, total=1000, results_per_s=0.0, by="test")
    note = await resume_if_halted(passed, by="test")
    assert note is not None and "will halt again at once: deadline " in note, note
