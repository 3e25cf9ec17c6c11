"""``kafkagen regenerate`` against real Kafka (1 broker and 3): what it selects from a run's
results, exactly-once publishing when the same command runs twice at once or is SIGKILLed just
before its commit, a second command building on the first, and its refusals."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest
from aiokafka import AIOKafkaProducer

from streams.config import Settings
from streams.control import (
    ClassCounts,
    ControlRecord,
    ControlState,
    GateRecord,
    MemberReport,
    RunRecord,
    encode_control,
    key_of_control,
    read_control,
)
from streams.environment import settings_to_env
from streams.kafka import producer_kwargs
from streams.records import (
    CompletionRecord,
    ErrorRecord,
    PromptRecord,
    SourceOffset,
    Timings,
    Usage,
    encode,
    key_of,
)
from streams.runs import naming
from streams.topics import ensure_topics, topic_specs
from tests.helpers import REPO_ROOT, broker_shapes, make_prompt, read_topic

pytestmark = pytest.mark.timeout(300)

PROMPTS = 30
CUT = {f"p-{i:05d}" for i in range(0, PROMPTS, 3)}
"""the ids whose completion was cut off by the budget (reasoning_ate_budget)."""


@pytest.fixture
def run(settings: Settings, unique: str) -> Settings:
    """A finished run of :data:`PROMPTS` prompts on the test's Kafka shape, with run-derived
    topic names: every prompt has a completion, :data:`CUT` with ``reasoning_ate_budget``, and one
    a dead letter that a completion of the same attempt beat."""
    run_id = f"regen-{unique}"
    topics = settings.topics.model_copy(update=naming.derived_topics(run_id))
    s = settings.model_copy(update={"run_id": run_id, "replay_of": None, "topics": topics})
    asyncio.run(_finished_run(s))
    return s


async def _finished_run(s: Settings, ids: range = range(PROMPTS)) -> None:
    """Prompts ``ids`` and their results (every third one cut off: :data:`CUT` for the first
    :data:`PROMPTS`)."""
    specs = topic_specs(s)
    await ensure_topics(s, [specs[r] for r in ("prompts", "completions", "errors", "control")])
    producer = AIOKafkaProducer(**producer_kwargs(s.kafka))
    await producer.start()
    try:
        for i in ids:
            prompt = msgspec.structs.replace(make_prompt(i, max_tokens=512), run_id=s.run_id)
            meta = await (await producer.send(s.topics.prompts, encode(prompt), key=key_of(prompt.id)))
            source = SourceOffset(topic=s.topics.prompts, partition=meta.partition, offset=meta.offset)
            cut = i % 3 == 0
            completion = CompletionRecord(
                id=prompt.id,
                run_id=s.run_id,
                prompt=prompt,
                content="" if cut else "42",
                reasoning_content="hmm " * 100,
                finish_reason="length" if cut else "stop",
                usage=Usage(prompt_tokens=10, completion_tokens=512 if cut else 100),
                timings=Timings(queued_s=0.0, latency_s=1.0, started_at=0.0, finished_at=1.0),
                server="http://127.0.0.1:1",
                model="m",
                params={"max_tokens": 512},
                quality=["reasoning_ate_budget", "empty_content"] if cut else [],
                source=source,
            )
            if i == 1:  # a dead letter beaten by a completion of the same attempt: not selected
                error = ErrorRecord(
                    id=prompt.id,
                    run_id=s.run_id,
                    prompt=prompt,
                    stage="generate",
                    error_type="X",
                    message="m",
                )
                await producer.send(s.topics.errors, encode(error), key=key_of(prompt.id))
            await producer.send(s.topics.completions, encode(completion), key=key_of(prompt.id))
        await producer.flush()
    finally:
        await producer.stop()


def _regenerate(s: Settings, *args: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "launch.cli", "regenerate", s.run_id, *args]
    env = {**os.environ, **settings_to_env(s)}
    return subprocess.Popen(
        argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _published(s: Settings) -> int:
    """Prompt records readable (read_committed; end offsets would count transaction markers too)."""
    return len(asyncio.run(read_topic(s, s.topics.prompts, PromptRecord)))


def _attempts(s: Settings) -> dict[str, list[PromptRecord]]:
    found: dict[str, list[PromptRecord]] = {}
    for prompt in asyncio.run(read_topic(s, s.topics.prompts, PromptRecord)):
        found.setdefault(prompt.id, []).append(prompt)
    return found


REDO = ("--where", "quality=reasoning_ate_budget", "--max-tokens", "4096")


def test_it_republishes_the_selection_once_with_the_overrides(run: Settings) -> None:
    dry = _regenerate(run, *REDO, "--dry-run")
    out, _ = dry.communicate(timeout=120)
    assert dry.returncode == 0, out
    assert f"{PROMPTS + 1} results read, {len(CUT)} match quality=['reasoning_ate_budget']" in out, out
    assert f"to re-publish: {len(CUT)} prompts, overrides {{'max_tokens': 4096}}" in out
    assert "--dry-run: nothing published" in out and _published(run) == PROMPTS

    first = _regenerate(run, *REDO)
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0, out
    assert f"published {len(CUT)} prompts to {run.topics.prompts} ({len(CUT)} as attempt 1)" in out, out
    by_id = _attempts(run)
    again = {i: p[-1] for i, p in by_id.items() if len(p) > 1}
    assert set(again) == CUT
    for record_id, prompt in again.items():
        [original] = [p for p in by_id[record_id] if p.attempt == 0]
        assert prompt.attempt == 1 and prompt.run_id == run.run_id and prompt.messages == original.messages
        assert prompt.params.max_tokens == 4096, "the override beats the prompt's own 512"

    second = _regenerate(run, *REDO)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0 and "this command was published before" in out, out
    assert _published(run) == PROMPTS + len(CUT)
    # another command now: the regenerated ids' latest attempt has no result yet, they are left alone
    other = _regenerate(run, "--where", "finish_reason=length", "--max-tokens", "8192")
    out, _ = other.communicate(timeout=120)
    assert other.returncode == 0, out
    assert f"{len(CUT)} prompts left alone: their latest attempt has no result yet" in out, out
    assert "to re-publish: 0 prompts" in out and _published(run) == PROMPTS + len(CUT)
    state = asyncio.run(read_control(run))
    assert [r.ids for r in state.regenerations.values()] == [len(CUT)]
    # the new attempts are judged from zero: one new gate epoch, in the same transaction
    assert state.gate is not None and (state.gate.state, state.gate.epoch) == ("resumed", 1)


@broker_shapes()
def test_the_same_command_twice_at_once_publishes_once(run: Settings) -> None:
    procs = [_regenerate(run, *REDO) for _ in range(2)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    codes = [p.returncode for p in procs]
    # each one either published, found the other's record, or was fenced before its commit
    assert 0 in codes and set(codes) <= {0, 1}, outs
    for code, out in zip(codes, outs, strict=True):
        assert code == 0 or "nothing of this one was published" in out, out
    assert _published(run) == PROMPTS + len(CUT), outs
    assert {i for i, p in _attempts(run).items() if len(p) > 1} == CUT
    assert len(asyncio.run(read_control(run)).regenerations) == 1


_KILLED_AT_COMMIT = textwrap.dedent(
    """
    import asyncio, sys
    from aiokafka import AIOKafkaProducer

    async def hang(self):  # every prompt is sent, the commit never comes: SIGKILL now
        await self.flush()
        print("COMMITTING", flush=True)
        await asyncio.sleep(3600)

    AIOKafkaProducer.commit_transaction = hang
    from launch.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@broker_shapes()
def test_a_regenerate_sigkilled_at_its_commit_publishes_nothing_and_the_rerun_publishes_once(
    run: Settings,
) -> None:
    argv = [sys.executable, "-c", _KILLED_AT_COMMIT, "regenerate", run.run_id, *REDO]
    env = {**os.environ, **settings_to_env(run)}
    killed = subprocess.Popen(
        argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert killed.stdout is not None
    deadline = time.monotonic() + 120
    lines = []
    while time.monotonic() < deadline:
        line = killed.stdout.readline()
        lines.append(line)
        if "COMMITTING" in line or not line:
            break
    assert "COMMITTING" in lines[-1], "".join(lines)
    killed.send_signal(signal.SIGKILL)
    killed.wait(10)
    assert _published(run) == PROMPTS, "the open transaction is not readable"

    rerun = _regenerate(run, *REDO)
    out, _ = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, out
    assert f"published {len(CUT)} prompts" in out, out
    by_id = _attempts(run)  # read_committed: the killed transaction was aborted by the rerun's fence
    assert sum(len(p) for p in by_id.values()) == PROMPTS + len(CUT)
    assert {i for i, p in by_id.items() if len(p) > 1} == CUT
    assert len(asyncio.run(read_control(run)).regenerations) == 1


def test_refusals_name_the_problem(run: Settings, unique: str) -> None:
    missing = naming.for_run(run, f"nope-{unique}", replay_of=None)
    proc = _regenerate(missing, *REDO)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and f"has no prompts topic nope-{unique}.prompts" in out, out
    assert not asyncio.run(read_control(missing)).regenerations
    bad = _regenerate(run, "--where", "quality=degenerated")
    out, _ = bad.communicate(timeout=60)
    assert bad.returncode == 2 and "unknown quality class degenerated" in out, out
    # a replay's prompts are the replayed run's: refused, pointing at the right command
    replay = naming.for_run(run, f"replay-{unique}", replay_of=None)
    asyncio.run(_replay_record(replay, parent=run.run_id))
    proc = _regenerate(replay, *REDO)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and f"replays run {run.run_id}" in out, out
    assert _published(run) == PROMPTS


async def _replay_record(s: Settings, *, parent: str) -> None:
    record = RunRecord(
        run_id=s.run_id,
        parent=parent,
        created_at=time.time(),
        updated_at=time.time(),
        by="test",
        prompts_topic=f"{parent}.prompts",
        partitions=7,
    )
    await _control_record(s, record)


async def _control_record(s: Settings, record: ControlRecord) -> None:
    await ensure_topics(s, [topic_specs(s)["control"]])
    producer = AIOKafkaProducer(**producer_kwargs(s.kafka))
    await producer.start()
    try:
        await producer.send_and_wait(s.topics.control, encode_control(record), key=key_of_control(record))
    finally:
        await producer.stop()


def test_a_regeneration_is_judged_at_its_own_settings_and_told_to_regenerate(run: Settings) -> None:
    """Issue 30 item 3: after a regeneration at max_tokens 4096, the main job judged the new
    attempts (the epoch the regeneration started) as if generated at the run's own budget, and
    told it to fix settings a re-run cannot give them (their overrides outrank a re-run's)."""
    from launch.gate.control import unjudged_breach

    proc = _regenerate(run, *REDO)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    state = asyncio.run(read_control(run))
    [digest] = state.regenerations
    assert state.gate is not None and state.gate.regeneration == digest
    cut = ClassCounts(results=len(CUT), classes={"repetition_loop": 9, "degenerate": 9})
    report = MemberReport(run_id=run.run_id, instance="c-0", incarnation="i", host="h", pid=1,
                          server="http://127.0.0.1:1", epoch=1, gate=cut)  # fmt: skip
    asyncio.run(_control_record(run, report))
    small = run.model_copy(update={"generation": run.generation.with_budget(128, False)})
    verdict = asyncio.run(unjudged_breach(small))
    assert verdict is not None
    reason, fix = verdict
    assert reason.startswith(
        f"in its regeneration {digest} ({len(CUT)} prompts re-published with max_tokens 4096) over all its "
        f"{len(CUT)} results (fewer than the warm-up's 200): repetition_loop in 9 of {len(CUT)} results"
    ), reason
    assert reason.endswith("at max_tokens 4096, thinking off"), "the attempts' budget, the run's thinking"
    assert fix.startswith("set --repetition-penalty P (above 1 discourages repeats, e.g. 1.1)"), fix
    assert f"kafkagen regenerate {run.run_id} --where quality=repetition_loop,degenerate" in fix


def test_a_generation_setting_given_as_a_flag_is_an_override(run: Settings) -> None:
    """The gate's fixes name --repetition-penalty and --generation.temperature: given to
    regenerate, they override the new attempts (they were parsed and dropped before)."""
    dry = _regenerate(run, *REDO, "--repetition-penalty", "1.1", "--generation.top-k", "20", "--dry-run")
    out, _ = dry.communicate(timeout=120)
    assert dry.returncode == 0, out
    assert "overrides {'max_tokens': 4096, 'top_k': 20, 'repetition_penalty': 1.1}" in out, out
    both = _regenerate(run, *REDO, "--temperature", "0.5", "--generation.temperature", "0.7", "--dry-run")
    out, _ = both.communicate(timeout=120)
    assert both.returncode == 2 and "--temperature and --generation.temperature both set temperature" in out


def test_a_dead_letter_without_its_prompt_is_found_by_its_id(tmp_path: Path) -> None:
    """Not a Kafka test: the selection takes prompts from the prompts topic, never from the dead
    letter, so a dead letter cut to fit (its prompt left out) is regenerated like any other."""
    from launch.regenerate.select import PromptHead, ResultHead, Selector, parse_where

    ids = tmp_path / "ids.txt"
    ids.write_text("p-00001\np-typo\n")
    selector = Selector("r", parse_where([f"ids={ids}"]))
    selector.see_result("error", ResultHead("p-00001", run_id="r", error_type="FatalRequestError"), 0, 0, "e")
    prompt = make_prompt(1)
    selector.see_prompt(PromptHead(prompt.id), 2, prompt)
    selection = selector.selection()
    assert [(p, r.id) for p, r in selection.prompts] == [(2, "p-00001")] and selection.unknown_ids == 1


def test_a_halted_run_stays_halted(run: Settings) -> None:
    """A regeneration of a halted run publishes its prompts but does not resume the run: the main
    job run again with the fix does (docs/gate.md)."""
    halt = GateRecord(run_id=run.run_id, state="halted", epoch=0, at=time.time(), by="t", reason="r", fix="f")
    asyncio.run(_control_record(run, halt))
    proc = _regenerate(run, *REDO)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and f"published {len(CUT)} prompts" in out, out
    state = asyncio.run(read_control(run))
    assert state.halted and state.epoch == 0 and len(state.regenerations) == 1


def test_the_same_command_later_publishes_what_matched_since(run: Settings) -> None:
    """Issue 25 item 9: on a run still generating, the same ``--where`` run again publishes the
    ids whose results matched since it last ran (not nothing, as when its digest named only the
    conditions and overrides), and leaves its earlier ids alone while their attempts are pending."""
    first = _regenerate(run, *REDO)
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0 and f"published {len(CUT)} prompts" in out, out
    later = range(PROMPTS, PROMPTS + 6)  # the run went on: 6 more results, 2 of them cut off
    asyncio.run(_finished_run(run, later))
    new = {f"p-{i:05d}" for i in later if i % 3 == 0}
    second = _regenerate(run, *REDO)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0, out
    assert f"this command was published before ({len(CUT)} prompts" in out, out
    assert f"{len(CUT)} prompts left alone: their latest attempt has no result yet" in out, out
    assert f"published {len(new)} prompts to {run.topics.prompts} ({len(new)} as attempt 1)" in out, out
    by_id = _attempts(run)
    assert {i for i, p in by_id.items() if len(p) > 1} == CUT | new
    assert all(len(by_id[i]) == 2 for i in CUT | new), "each published once"
    third = _regenerate(run, *REDO)
    out, _ = third.communicate(timeout=120)
    assert third.returncode == 0 and "nothing new matches it now, nothing published" in out, out
    assert _published(run) == PROMPTS + len(later) + len(CUT) + len(new)
    assert sorted(r.ids for r in asyncio.run(read_control(run)).regenerations.values()) == sorted(
        [len(CUT), len(new)]
    )


def test_a_halt_written_while_the_regeneration_plans_stands(
    run: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25 item 5: the plan reads the gate (not halted), then reads whole topics (minutes on a
    big run); a consumer's halt written meanwhile must not be undone by the regeneration's new
    epoch. The halt is written by a real Kafka write between the plan's read and its transaction."""
    from launch.regenerate import plan as regen
    from launch.regenerate.select import parse_where
    from streams.records import GenerationParams

    planned = regen.plan_regeneration
    halt = GateRecord(
        run_id=run.run_id, state="halted", epoch=0, at=time.time(), by="gpu-3", reason="r", fix="f"
    )

    async def plan_then_halt(*args: object, **kwargs: object) -> regen.Plan:
        plan = await planned(*args, **kwargs)  # type: ignore[arg-type]
        assert plan.gate is not None and not plan.gate.halted  # the schedule: planned before the halt
        await _control_record(run, halt)
        return plan

    monkeypatch.setattr(regen, "plan_regeneration", plan_then_halt)
    where = parse_where(["quality=reasoning_ate_budget"])
    plan, record = asyncio.run(regen.regenerate(run, where, GenerationParams(max_tokens=4096)))
    assert record is not None and record.ids == len(CUT)
    state = asyncio.run(read_control(run))
    assert state.halted and state.epoch == 0 and state.gate == halt, state.gate
    assert plan.gate is not None and plan.gate.halted
    assert sum(len(a) for a in _attempts(run).values()) == PROMPTS + len(CUT)


def test_a_halt_written_while_the_selection_is_sent_stands(
    run: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25 item 5, the later window: a halt written after the transaction has begun (its
    prompts sent) must be seen by the gate's re-read. Once the transaction has written to the
    control topic, its open records hold that topic's last stable offset and a read_committed read
    cannot see the halt; so the re-read comes before that write. The halt is a real Kafka write
    just before the re-read."""
    from launch.regenerate import plan as regen
    from launch.regenerate.select import parse_where
    from streams.records import GenerationParams

    real_read, planned = read_control, regen.plan_regeneration
    halt = GateRecord(
        run_id=run.run_id, state="halted", epoch=0, at=time.time(), by="gpu-5", reason="r", fix="f"
    )
    rereads: list[ControlState] = []
    plans: list[regen.Plan] = []

    async def planning(*args: object, **kwargs: object) -> regen.Plan:
        plans.append(await planned(*args, **kwargs))  # type: ignore[arg-type]
        return plans[-1]

    async def halt_then_read(settings: Settings) -> ControlState:
        if not plans:  # the run check's and the plan's own reads
            return await real_read(settings)
        await _control_record(run, halt)  # the transaction has begun: its prompts are sent
        rereads.append(await real_read(settings))
        return rereads[-1]

    monkeypatch.setattr(regen, "plan_regeneration", planning)
    monkeypatch.setattr(regen, "read_control", halt_then_read)
    where = parse_where(["quality=reasoning_ate_budget"])
    plan, record = asyncio.run(regen.regenerate(run, where, GenerationParams(max_tokens=4096)))
    assert len(rereads) == 1 and record is not None and record.ids == len(CUT)
    state = asyncio.run(real_read(run))
    assert state.halted and state.epoch == 0 and state.gate == halt, state.gate
    assert plan.gate is not None and plan.gate.halted
