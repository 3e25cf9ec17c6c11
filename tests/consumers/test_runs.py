"""Runs that share a prompts topic (docs/runs.md), with the real producer and consumers against
real Kafka and the SGLang-API simulator: default names keep two runs of one file apart, a
producer or consumer of another run is refused, a replay regenerates a run under its own run id,
and a prompt of another run is dead-lettered."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from simulator import SimulatedServer
from streams.config import Settings
from streams.environment import settings_to_env
from streams.kafka import end_offsets as kafka_end_offsets
from streams.records import CompletionRecord, PromptRecord
from streams.runs import naming
from tests.consumers.support import completions, errors, wait_all_done
from tests.helpers import REPO_ROOT, committed, make_prompt, publish, read_topic, spawn

pytestmark = pytest.mark.kafka

IDS = [f"q-{i:03d}" for i in range(12)]
TOPIC_ENV = {f"KAFKAGEN_TOPICS__{role.upper()}" for role in naming.TOPIC_ROLES}
"""The topic-name variables a child of a run with the default names does not get."""


@pytest.fixture
def rs(cs: Settings) -> Settings:
    """The consumer test settings with 3 partitions and short answers."""
    return cs.model_copy(
        update={
            "topics": cs.topics.model_copy(update={"partitions": 3}),
            "generation": cs.generation.model_copy(update={"max_tokens": 200}),
        }
    )


@pytest.fixture
def prompts_file(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        "".join(json.dumps({"id": i, "prompt": f"What is {n} + {n}?"}) + "\n" for n, i in enumerate(IDS))
    )
    return path


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; killed at its end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def of_run(settings: Settings, run: str) -> Settings:
    """``settings`` of run ``run`` with the names it derives (the test's reader's view)."""
    return settings.model_copy(
        update={"run_id": run, "topics": settings.topics.model_copy(update=naming.derived_topics(run))}
    )


def env_of_run(settings: Settings, run: str) -> dict[str, str]:
    """The environment of a process of run ``run`` that sets no topic name (the defaults)."""
    env = {**os.environ, **settings_to_env(settings), "KAFKAGEN_RUN_ID": run}
    return {k: v for k, v in env.items() if k not in TOPIC_ENV}


def produce(settings: Settings, run: str, path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``python -m producers.prompts PATH`` as run ``run`` with the default topic names (unless
    ``flags`` name one)."""
    return subprocess.run(
        [sys.executable, "-m", "producers.prompts", str(path), "--no-progress", *flags],
        cwd=REPO_ROOT,
        env=env_of_run(settings, run),
        capture_output=True,
        text=True,
        timeout=120,
    )


def consume(settings: Settings, run: str, server: str, log: Path, *flags: str) -> subprocess.Popen[bytes]:
    """A generation consumer of run ``run`` with the default topic names (unless ``flags`` name one)."""
    args = ["-m", "consumers.generate", "--server", server, "--instance-id", f"{run}-0", *flags]
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO_ROOT,
        env=env_of_run(settings, run),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


async def end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    """The log end offsets (read_uncommitted: aborted records and markers count) of ``topic``."""
    return await kafka_end_offsets(settings.kafka, topic, committed_only=False)


async def test_two_runs_of_one_file_get_their_own_topics_and_each_prompt_once(
    rs: Settings,
    sim: SimulatedServer,
    prompts_file: Path,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    a, b = f"{rs.run_id}-a", f"{rs.run_id}-b"
    for run in (a, b):
        result = produce(rs, run, prompts_file)
        assert result.returncode == 0, result.stderr
    ra, rb = of_run(rs, a), of_run(rs, b)
    for r in (ra, rb):
        published = await read_topic(r, r.topics.prompts, PromptRecord)
        assert sorted(p.id for p in published) == IDS and {p.run_id for p in published} == {r.run_id}

    procs += [consume(rs, a, sim.url, tmp_path / "a.log"), consume(rs, b, sim.url, tmp_path / "b.log")]
    for r in (ra, rb):
        done, failed = await wait_all_done(r, set(IDS), timeout_s=120)
        assert not failed and set(done) == set(IDS) and set(done.values()) == {1}, (r.run_id, done)
        assert {c.run_id for c in await completions(r)} == {r.run_id}
    for proc in procs:
        proc.terminate()
        assert proc.wait(30) == 0
    # nothing generated twice after a graceful stop either
    for r in (ra, rb):
        assert Counter(c.id for c in await completions(r)) == Counter(IDS)


async def test_a_producer_refuses_a_prompts_topic_of_another_run(rs: Settings, prompts_file: Path) -> None:
    a, b = f"{rs.run_id}-a", f"{rs.run_id}-b"
    assert produce(rs, a, prompts_file).returncode == 0
    topic = naming.prompts_topic(a)
    before = await end_offsets(rs, topic)

    result = produce(rs, b, prompts_file, "--topics.prompts", topic)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert f"prompts topic {topic} belongs to run {a}, not run {b}: nothing was published" in lines[0]
    assert f"Publish to {b}.prompts (the default" in lines[0] and f"--replay-of {a}" in lines[0]
    assert await end_offsets(rs, topic) == before, "not even an aborted transaction"
    assert {p.run_id for p in await read_topic(rs, topic, PromptRecord)} == {a}

    again = produce(rs, a, prompts_file)  # the owner itself: today's exactly-once resume
    assert again.returncode == 0, again.stderr
    assert "skipped 12" in again.stderr
    assert sorted(p.id for p in await read_topic(rs, topic, PromptRecord)) == IDS


async def test_a_consumer_of_another_run_s_topic_stops_unless_it_replays_that_run(
    rs: Settings,
    sim: SimulatedServer,
    prompts_file: Path,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    a, b = f"{rs.run_id}-a", f"{rs.run_id}-b"
    assert produce(rs, a, prompts_file).returncode == 0
    topic = naming.prompts_topic(a)
    rb = of_run(rs, b)

    log = tmp_path / "b-wrong.log"
    wrong = consume(rs, b, sim.url, log, "--topics.prompts", topic)
    procs.append(wrong)
    assert await asyncio.to_thread(wrong.wait, 60) == 2
    text = log.read_text()
    assert f"error: prompts topic {topic} belongs to run {a}, not run {b}: nothing was generated" in text
    assert f"add --replay-of {a} (KAFKAGEN_REPLAY_OF={a})" in text
    assert await completions(rb) == [] and await errors(rb) == []
    assert set((await committed(rb, naming.generate_group(rb), topic)).values()) == {None}

    replay = consume(rs, b, sim.url, tmp_path / "b-replay.log", "--replay-of", a)
    procs.append(replay)
    rb_replay = rb.model_copy(update={"replay_of": a})
    done, failed = await wait_all_done(rb_replay, set(IDS), timeout_s=120)
    assert not failed and set(done) == set(IDS) and set(done.values()) == {1}
    records = await completions(rb)
    assert {c.run_id for c in records} == {b}, "generated under run B"
    assert {c.prompt.run_id for c in records} == {a} and {c.source.topic for c in records if c.source} == {
        topic
    }
    assert await read_topic(rs, naming.completions_topic(a), CompletionRecord) == [], "A's are untouched"
    replay.terminate()
    assert replay.wait(30) == 0
    offsets = await committed(rb, naming.generate_group(rb), topic)
    assert sum(o or 0 for o in offsets.values()) == sum((await end_offsets(rs, topic)).values())


async def test_a_prompt_of_another_run_is_dead_lettered_not_generated(
    rs: Settings, sim: SimulatedServer, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    own = [make_prompt(i, max_tokens=100) for i in range(4)]  # no run id: published by hand
    own += [msgspec.structs.replace(make_prompt(i, max_tokens=100), run_id=rs.run_id) for i in (4, 5)]
    foreign = [msgspec.structs.replace(make_prompt(i), run_id="another-run") for i in (6, 7, 8)]
    await publish(rs, own, partition=0)  # the topic's first record is this run's: it may start
    await publish(rs, foreign, partition=0)
    args = ["-m", "consumers.generate", "--server", sim.url, "--instance-id", "c0"]
    procs.append(spawn(args, rs, tmp_path / "c0.log"))
    ids = {p.id for p in own + foreign}
    done, failed = await wait_all_done(rs, ids, timeout_s=90)
    assert set(done) == {p.id for p in own} and set(done.values()) == {1}
    assert set(failed) == {p.id for p in foreign} and set(failed.values()) == {1}
    dead = {e.id: e for e in await errors(rs)}
    for p in foreign:
        e = dead[p.id]
        assert (e.error_type, e.stage, e.attempts, e.run_id) == ("ForeignRunPrompt", "generate", 0, rs.run_id)
        assert e.prompt is not None and e.prompt.run_id == "another-run"
        assert (
            f"prompt of run another-run on {rs.topics.prompts}, read by run {rs.run_id}: not generated"
            in e.message
        )
        assert "--replay-of another-run" in e.message
