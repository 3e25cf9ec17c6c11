"""The run's output token budget end to end (issue 29; consumers/quality/budget.py, docs/budgets.md):
a generation consumer (a real process) on a simulator (a real process) over real Kafka halts the
run through the gate's halt once the completions hold ``gate.max_output_tokens`` tokens, commits
only what is written, and after a restart with a raised budget and the main job's resume finishes
with every prompt exactly once."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from consumers.generate import group_id
from launch.gate.control import resume_if_halted
from streams.config import Settings
from streams.control import GateRecord, read_control
from streams.kafka import end_offsets
from tests.consumers.support import Fleet, completions, errors
from tests.consumers.test_fleet_gate import assert_commits_covered, received, simulators, wait_members
from tests.helpers import committed, make_prompt, publish, wait_for

PROMPTS = 120
BUDGET = 1_500
"""output tokens: about 30 of the 120 completions at max_tokens 50."""


async def test_a_run_halts_at_its_output_token_budget_and_resumes_with_a_raised_one(
    cs: Settings, fleet: Fleet, tmp_path: Path
) -> None:
    gate = cs.gate.model_copy(update={"max_output_tokens": BUDGET, "report_interval_s": 0.5})
    small = cs.model_copy(update={"gate": gate})  # the quality gate's judging stays off (cs)
    fleet.settings = small
    ids = {make_prompt(i).id for i in range(PROMPTS)}
    await publish(small, [make_prompt(i, max_tokens=50) for i in range(PROMPTS)])

    with simulators(1, 40.0, tmp_path, "small") as urls:
        fleet.start("budget-0", urls[0])
        halt: list[GateRecord] = []

        async def halted() -> bool:
            fleet.assert_alive()
            state = await read_control(small)
            if state.halted and state.gate is not None:
                halt.append(state.gate)
            return bool(halt)

        await wait_for(halted, timeout_s=120, what="the budget to halt the run", interval_s=0.3)
        record = halt[0]
        assert record.by == "budget-0" and record.epoch == 0
        assert record.reason.startswith(f"output token budget {BUDGET:,} reached: "), record.reason
        assert "--max-output-tokens" in record.fix
        assert record.params["budget"] == "output_tokens"
        assert isinstance(record.params["output_tokens"], int) and record.params["output_tokens"] >= BUDGET
        state = await wait_members(small, "halted", record.at, ("budget-0",))
        fleet.procs["budget-0"].terminate()  # graceful: drains, commits, leaves the group
        assert fleet.procs.pop("budget-0").wait(60) == 0

    # the halt stopped the run early; what was written is committed, once each, and its tokens are
    # those the consumer reported
    first = await completions(small)
    assert not await errors(small)
    assert 0 < len(first) < PROMPTS, len(first)
    tokens = sum(c.usage.completion_tokens if c.usage is not None else 0 for c in first)
    assert tokens >= BUDGET
    assert max(Counter(c.id for c in first).values()) == 1, "a prompt written twice before the halt"
    assert await assert_commits_covered(small) == len(first), "written and not committed, or lost"
    state = await read_control(small)
    assert state.members["budget-0"].completion_tokens == tokens
    log = (fleet.logs / "budget-0.log").read_text(errors="replace")
    assert f"output token budget {BUDGET:,} reached" in log

    # a re-run whose budget is still passed is told it will halt again, and does, before any prompt
    again = await resume_if_halted(small, by="test")
    assert again is not None and "will halt again at once" in again, again
    with simulators(1, 40.0, tmp_path, "same") as urls:
        fleet.start("budget-0", urls[0])
        halt.clear()
        await wait_for(halted, timeout_s=60, what="the same budget to halt the resumed run", interval_s=0.3)
        assert halt[0].epoch == 1 and halt[0].reason.startswith("output token budget")
        fleet.procs["budget-0"].terminate()
        assert fleet.procs.pop("budget-0").wait(60) == 0
    assert len(await completions(small)) == len(first), "the resumed run generated past its budget"

    # raised: the consumer restarts with it, the main job's resume lets it finish, exactly once
    raised = small.model_copy(update={"gate": gate.model_copy(update={"max_output_tokens": 10**9})})
    fleet.settings = raised
    with simulators(1, 40.0, tmp_path, "raised") as urls:
        started = time.time()
        fleet.start("budget-0", urls[0])
        await wait_members(raised, "halted", started, ("budget-0",))
        note = await resume_if_halted(raised, by="test")
        assert note is not None and "resumed" in note and "halt again" not in note, note
        ends = await end_offsets(raised.kafka, raised.topics.prompts, committed_only=False)

        async def finished() -> bool:
            fleet.assert_alive()
            commits = await committed(raised, group_id(raised), raised.topics.prompts)
            return all((commits.get(p) or 0) >= end for p, end in ends.items())

        await wait_for(finished, timeout_s=240, what="every prompt committed", interval_s=0.5)
        fleet.stop_all()
    done = Counter(c.id for c in await completions(raised))
    assert set(done) == ids, f"{len(ids - set(done))} prompts without a result"
    assert max(done.values()) == 1, {i: n for i, n in done.items() if n > 1}


async def test_a_consumer_halts_the_run_at_its_deadline_without_the_main_job(
    cs: Settings, fleet: Fleet, tmp_path: Path
) -> None:
    passed = datetime.now(UTC) - timedelta(seconds=1)
    s = cs.model_copy(update={"gate": cs.gate.model_copy(update={"deadline": passed})})
    fleet.settings = s
    await publish(s, [make_prompt(i, max_tokens=50) for i in range(20)])
    with simulators(1, 40.0, tmp_path, "deadline") as urls:
        started = time.time()
        fleet.start("deadline-0", urls[0])
        state = await wait_members(s, "halted", started, ("deadline-0",))
        assert state.gate is not None and state.gate.by == "deadline-0"
        assert state.gate.reason == f"deadline {passed.isoformat(timespec='seconds')} reached"
        assert state.gate.params["budget"] == "deadline" and "--deadline" in state.gate.fix
        assert received(urls) == [0], "a prompt was sent past the deadline"
        fleet.stop_all()
    assert not await completions(s)
