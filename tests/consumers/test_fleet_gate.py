"""The fleet-wide quality gate end to end (issue 13; consumers/quality/fleet_gate.py, docs/gate.md): three
generation consumers (real processes) on three SGLang-API simulators (real processes) over the
bundled GSM8K at max_tokens 512 with thinking on. The simulator's Qwen3 profile reasons for a
median of ~1,350 tokens, so nearly every answer is empty: the run must halt by itself within its
first 200 results, naming the cause and the fix; stop sending; commit only what is written; stay
halted across a SIGKILL; and finish after a restart at max_tokens 4096 and ``kafkagen gate resume``
without generating a finished prompt again."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition

from consumers.generate import group_id
from streams.config import Settings
from streams.control import ControlState, GateRecord, read_control
from streams.environment import settings_to_env
from streams.kafka import consumer_kwargs, end_offsets
from streams.records import CompletionRecord, PromptRecord, decode
from tests.consumers.support import Fleet, completions, errors
from tests.helpers import REPO_ROOT, committed, holds, make_prompt, publish, unused_port, wait_for

GSM8K = REPO_ROOT / "data" / "gsm8k" / "test.jsonl"
NAMES = ("gate-0", "gate-1", "gate-2")


@contextmanager
def simulators(n: int, time_scale: float, logs: Path, tag: str) -> Iterator[list[str]]:
    """``n`` simulator processes (``python -m simulator``, the default Qwen3/B200 profile: 16
    slots, thinking on, reasoning parser qwen3) on unused ports; their URLs. Killed at the end."""
    procs, urls = [], []
    for i in range(n):
        port = unused_port()
        out = (logs / f"sim-{tag}-{i}.log").open("ab")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "simulator", "--port", str(port), "--time-scale", str(time_scale)],
                cwd=REPO_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 60
        for url in urls:
            while True:
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, f"simulator {url} did not come up"
                time.sleep(0.2)
        yield urls
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def sim_stats(url: str) -> dict[str, Any]:
    """The simulator's own counters (``GET /simulator/stats``: ``simulator.SimulatorStats``)."""
    stats: dict[str, Any] = httpx.get(f"{url}/simulator/stats", timeout=5).json()
    return stats


def sim_idle(url: str) -> bool:
    """Whether the simulator at ``url`` has no request running or queued."""
    stats = sim_stats(url)
    return bool(stats["running"] == 0 and stats["queued"] == 0)


def received(urls: list[str]) -> list[int]:
    """Generation requests each simulator accepted so far (its own counter)."""
    return [int(sim_stats(url)["requests_received"]) for url in urls]


def env(settings: Settings) -> dict[str, str]:
    return {**os.environ, **settings_to_env(settings)}


def produce(settings: Settings) -> None:
    """Publish the bundled GSM8K test set (1,319 questions) with the producer."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "producers.prompts",
            str(GSM8K),
            "--prompt-field",
            "question",
            "--no-progress",
        ],
        cwd=REPO_ROOT,
        env=env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def gate_command(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """``kafkagen gate ARGS --run-id R`` as a process."""
    return subprocess.run(
        [sys.executable, "-m", "launch.cli", "gate", *args, "--run-id", settings.run_id],
        cwd=REPO_ROOT,
        env=env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )


async def prompt_ids(settings: Settings) -> dict[tuple[int, int], str]:
    """(partition, offset) → id of every prompt record (read_committed: no transaction markers)."""
    topic = settings.topics.prompts
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    await consumer.start()
    try:
        ends = await end_offsets(settings.kafka, topic)
        tps = [TopicPartition(topic, p) for p in ends]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        found: dict[tuple[int, int], str] = {}
        async with asyncio.timeout(60):
            while any([await consumer.position(tp) < ends[tp.partition] for tp in tps]):
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for r in records:
                        found[(r.partition, r.offset)] = decode(r.value or b"", PromptRecord).id
        return found
    finally:
        await consumer.stop()


async def results_by_id(settings: Settings) -> tuple[list[CompletionRecord], Counter[str]]:
    """The completions, and the results (completions and dead letters) per prompt id."""
    done = await completions(settings)
    failed = await errors(settings)
    return done, Counter([r.id for r in done] + [r.id for r in failed])


async def assert_commits_covered(settings: Settings) -> int:
    """Every prompt below each committed offset of the generate group has a completion or a dead
    letter (nothing committed past what was written); returns the prompts below the commits."""
    ids = await prompt_ids(settings)
    commits = await committed(settings, group_id(settings), settings.topics.prompts)
    _, results = await results_by_id(settings)
    below = [i for (p, o), i in ids.items() if o < (commits.get(p) or 0)]
    missing = [i for i in below if i not in results]
    assert not missing, f"committed past {len(missing)} prompts without a result: {missing[:5]}"
    return len(below)


async def wait_members(
    settings: Settings, state_name: str, since: float, names: tuple[str, ...]
) -> ControlState:
    """Wait until each consumer in ``names`` reported ``state_name`` after ``since`` (Unix s)."""
    seen: list[ControlState] = []

    async def check() -> bool:
        state = await read_control(settings)
        seen.append(state)
        return all(
            n in state.members and state.members[n].state == state_name and state.members[n].at > since
            for n in names
        )

    await wait_for(check, timeout_s=60, what=f"{', '.join(names)} to report {state_name}", interval_s=0.5)
    return seen[-1]


def halted_lines(fleet: Fleet, name: str) -> int:
    log = fleet.logs / f"{name}.log"
    return log.read_text(errors="replace").count("QUALITY GATE HALTED") if log.exists() else 0


async def test_a_run_whose_reasoning_eats_the_budget_halts_fleet_wide_and_resumes_fixed(
    cs: Settings, fleet: Fleet, tmp_path: Path
) -> None:
    generation = cs.generation.with_budget(max_tokens=512, thinking=True)
    gate = cs.gate.model_copy(update={"enabled": True, "report_interval_s": 0.5})
    s512 = cs.model_copy(update={"generation": generation, "gate": gate})
    fleet.settings = s512
    produce(s512)
    ids: set[str] = set()

    async def all_visible() -> bool:
        # The producer's last commit returns before the coordinator has written its markers to
        # every partition (Kafka's EndTxn answers once PrepareCommit is logged, KIP-98): a
        # read_committed reader sees the last transaction a moment later.
        ids.update((await prompt_ids(s512)).values())
        return len(ids) == 1319

    await wait_for(all_visible, timeout_s=30, what="the 1,319 published prompts to be readable")

    with simulators(3, 8.0, tmp_path, "512") as urls:
        for name, url in zip(NAMES, urls, strict=True):
            fleet.start(name, url)

        # 1. it halts by itself within its first 200 results, naming the cause and the fix
        halt: list[GateRecord] = []

        async def halted() -> bool:
            fleet.assert_alive()
            state = await read_control(s512)
            if state.halted and state.gate is not None:
                halt.append(state.gate)
            return bool(halt)

        await wait_for(halted, timeout_s=120, what="the gate to halt the run", interval_s=0.3)
        record = halt[0]
        assert record.state == "halted" and record.epoch == 0 and record.by in NAMES
        assert record.counts.results <= 200, record.counts
        assert record.reason.startswith("reasoning_ate_budget"), record.reason
        assert "max_tokens 512, thinking on" in record.reason
        assert "--max-tokens" in record.fix
        assert "reasoning_ate_budget" in {b.cls for b in record.breaches}
        assert record.params["max_tokens"] == 512

        # 2. within a few seconds no consumer sends a request: every one reports "halted", then
        # the simulators' own counters stand still over a window of seconds
        await wait_members(s512, "halted", record.at, NAMES)
        assert time.time() - record.at < 15, "the consumers took too long to see the halt"
        await wait_for(
            lambda: all(sim_idle(u) for u in urls),
            timeout_s=60,
            what="requests in flight at the halt to finish",
        )
        before = received(urls)
        await holds(lambda: received(urls) == before, for_s=5, what="no request sent while the run is halted")
        sent = sum(before)
        assert sent < 400, f"{sent} requests sent in all: the fleet did not stop soon after the halt"
        assert all(halted_lines(fleet, n) == 1 for n in NAMES), "one error line per consumer"
        log = (fleet.logs / f"{NAMES[0]}.log").read_text(errors="replace")
        assert "kafkagen gate resume --run-id " + s512.run_id in log

        # 3. nothing is committed past what was written, and the halted run's results are the
        # degenerate ones the gate counted: the simulator's reasoning is longer than 512 tokens
        assert await assert_commits_covered(s512) > 0
        first, first_results = await results_by_id(s512)
        ate = sum(1 for c in first if "reasoning_ate_budget" in c.quality)
        assert ate >= 0.85 * len(first), f"{ate} of {len(first)} with the budget eaten by reasoning"
        assert sum(first_results.values()) <= sent

        # status shows it (exit 1: halted)
        status = gate_command(s512, "status")
        assert status.returncode == 1, status.stderr
        assert "HALTED" in status.stdout and "reasoning_ate_budget" in status.stdout

        # 4. a consumer SIGKILLed and restarted while halted stays halted, its counts continue
        state = await read_control(s512)
        old = state.members[NAMES[1]]
        fleet.kill(NAMES[1])
        restarted = time.time()
        fleet.start(NAMES[1], urls[1])
        state = await wait_members(s512, "halted", restarted, (NAMES[1],))
        new = state.members[NAMES[1]]
        assert new.incarnation != old.incarnation
        assert new.totals.results >= old.totals.results and new.gate.results >= old.gate.results
        before = received(urls)
        await holds(lambda: received(urls) == before, for_s=4, what="no request from the restarted consumer")
        assert halted_lines(fleet, NAMES[1]) == 2  # once before the kill, once after the restart

        # 5. stop the fleet (graceful: drains, commits, leaves the group)
        for proc in fleet.procs.values():
            proc.terminate()
        for proc in fleet.procs.values():
            assert proc.wait(60) == 0
        fleet.procs.clear()
    await assert_commits_covered(s512)
    # done before the restart: every prompt with a result; of them, the ones below the group's
    # commits can never be generated again. The results a consumer wrote but had not committed
    # when it was SIGKILLed in step 4 may be (bounded duplicates: at most its window)
    ids_at = await prompt_ids(s512)
    commits = await committed(s512, group_id(s512), s512.topics.prompts)
    _, results_512 = await results_by_id(s512)
    done_before = set(results_512)
    committed_before = {i for (p, o), i in ids_at.items() if o < (commits.get(p) or 0)}

    # 6. restart at max_tokens 4096: idle while halted, then `kafkagen gate resume`: the run ends
    s4096 = s512.model_copy(update={"generation": generation.with_budget(max_tokens=4096)})
    fleet.settings = s4096
    with simulators(3, 40.0, tmp_path, "4096") as urls:
        restarted = time.time()
        for name, url in zip(NAMES, urls, strict=True):
            fleet.start(name, url)
        await wait_members(s4096, "halted", restarted, NAMES)
        assert received(urls) == [0, 0, 0], "a consumer started while halted sent requests"
        resumed = gate_command(s4096, "resume", "--reason", "max_tokens 4096")
        assert resumed.returncode == 0, resumed.stderr
        assert "epoch 1" in resumed.stdout

        ends = await end_offsets(s4096.kafka, s4096.topics.prompts, committed_only=False)

        async def finished() -> bool:
            fleet.assert_alive()
            commits = await committed(s4096, group_id(s4096), s4096.topics.prompts)
            return all((commits.get(p) or 0) >= end for p, end in ends.items())

        await wait_for(
            finished, timeout_s=240, what="the generate group to commit every prompt", interval_s=1.0
        )
        state = await read_control(s4096)
        assert not state.halted and state.epoch == 1
        fleet.stop_all()

    done, results = await results_by_id(s4096)
    assert set(results) == ids, f"{len(ids - set(results))} prompts without a result"
    later = [c for c in done if c.params.get("max_tokens") == 4096]
    again = sorted({c.id for c in later} & committed_before)
    assert not again, f"{len(again)} prompts committed before the halt were generated again: {again[:5]}"
    redone = {c.id for c in later} & done_before
    assert len(redone) <= 16 + cs.consumer.standing_queue, f"{len(redone)} written results generated again"
    # the same prompt twice at 512 tokens: handovers while the consumers joined (README: a few)
    twice = {i: n for i, n in results.items() if n > 1}
    assert len(twice) <= 3 * (16 + cs.consumer.standing_queue), twice
    assert {c.id for c in later} | done_before == ids
    longer = sum(1 for c in later if c.usage.reasoning_tokens > 512)
    assert longer >= 0.85 * len(later), f"only {longer} of {len(later)} reasoned past 512 tokens"
    await assert_commits_covered(s4096)


async def test_requests_in_flight_at_a_halt_are_committed_across_a_rebalance(
    cs: Settings, fleet: Fleet, tmp_path: Path
) -> None:
    """Consumer A has long requests in flight when the run is halted by hand; a second consumer
    joins while they run, so A's requests become orphans and A keeps some of their partitions.
    Orphans (and results finished while their partition was revoked) count as done only when
    their records are fetched again, so a halted consumer goes on fetching up to its buffer: the
    results of the requests in flight at the halt must be committed, or they are generated again
    after the resume. (Before the fix a halted consumer paused fetching at once; one run in four
    of the test above regenerated such results: they finished during the revoke's commit.)

    Each partition holds more prompts than A's whole buffer (window + prefetch): the records of
    one partition fetched again fill it, and A must still fetch the others' until their orphans
    are adopted (seen on a fresh-clone CI run: 20 results of one partition never committed)."""
    per_partition = cs.consumer.prefetch + 16 + cs.consumer.standing_queue + 10
    count = per_partition * cs.topics.partitions
    await publish(cs, [make_prompt(i, max_tokens=2500, min_tokens=2500) for i in range(count)])
    with simulators(2, 2.0, tmp_path, "slow") as urls:
        fleet.start("ga", urls[0])

        async def in_flight() -> bool:
            fleet.assert_alive()
            return received(urls[:1])[0] >= 16

        await wait_for(in_flight, timeout_s=60, what="A's first requests")
        halt = gate_command(cs, "halt", "--reason", "test: in flight at the halt")
        assert halt.returncode == 0, halt.stderr
        await wait_members(cs, "halted", time.time() - 1, ("ga",))
        fleet.start("gb", urls[1])
        log = fleet.logs / "ga.log"
        await wait_for(
            lambda: re.search(
                r"revoked partitions \[[0-9, ]+\] \([1-9][0-9]* requests kept", log.read_text()
            ),
            timeout_s=60,
            what="A's revoke with requests in flight",
        )

        await wait_for(lambda: sim_idle(urls[0]), timeout_s=90, what="A's requests in flight to finish")
        assert received(urls) == [received(urls[:1])[0], 0], "B started a prompt while halted"
        mine = [
            int(p)
            for p in re.findall(r"assigned partitions \[([0-9, ]*)\]", log.read_text())[-1].split(",")
            if p.strip()
        ]
        assert mine, "A kept no partition: the scenario did not happen"
        uncommitted: dict[int, tuple[list[int], int | None]] = {}

        async def committed_all_written() -> bool:  # written, then committed (commit_interval_s 0.3)
            commits = await committed(cs, group_id(cs), cs.topics.prompts)
            written = await completions(cs)
            uncommitted.clear()
            for p in mine:
                offsets = sorted(
                    c.source.offset for c in written if c.source is not None and c.source.partition == p
                )
                if (commits.get(p) or 0) < (offsets[-1] + 1 if offsets else 0):
                    uncommitted[p] = (offsets, commits.get(p))
            return not uncommitted

        await wait_for(committed_all_written, timeout_s=30, what="A's written results to be committed")
        assert received(urls) == [received(urls[:1])[0], 0], "B started a prompt while halted"
        await assert_commits_covered(cs)
