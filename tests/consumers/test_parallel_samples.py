"""``consumer.parallel_samples``: a prompt's samples that start together go to the server as one
request with ``n`` (the prompt prefilled once), against the simulator and real Kafka; every sample
still ends in its own completion, and a SIGKILL mid-request loses none (docs/consumer.md,
"Parallel samples")."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import httpx
import pytest

from simulator import SimulatedServer, SimulatorProfile
from streams.config import Settings
from streams.inputs.samples import sampled
from streams.records import CompletionRecord, PromptRecord
from tests.consumers.support import TIME_SCALE, Fleet, completions, wait_all_done
from tests.helpers import make_prompt, publish, wait_for

pytestmark = pytest.mark.kafka

SAMPLES = 4


def sample_records(count: int, *, max_tokens: int = 300, first: int = 0) -> list[PromptRecord]:
    """``count`` prompts of :data:`SAMPLES` samples each, siblings next to each other, each
    prompt long enough beside ``max_tokens`` to share (consumers.sample_groups.worth_sharing)."""
    text = "Read this. " + "word " * (8 * max_tokens)
    prompts = [
        make_prompt(i, max_tokens=max_tokens, content=f"{i}: {text}") for i in range(first, first + count)
    ]
    return [s for p in prompts for s in sampled(p, SAMPLES)]


def one_partition(cs: Settings) -> Settings:
    return cs.model_copy(update={"topics": cs.topics.model_copy(update={"partitions": 1})})


def by_prompt(records: list[CompletionRecord]) -> dict[str, list[CompletionRecord]]:
    groups: dict[str, list[CompletionRecord]] = defaultdict(list)
    for record in records:
        groups[record.prompt.prompt_id].append(record)
    return groups


async def test_samples_that_start_together_share_one_request(
    cs: Settings, sim: SimulatedServer, tmp_path: Path
) -> None:
    settings = one_partition(cs)
    prompts = sample_records(30)  # 120 records: more than the window, so most start as slots free
    await publish(settings, prompts, partition=0)  # before the consumer starts: fetched together
    fleet = Fleet(settings, tmp_path)
    try:
        fleet.start("c0", sim.url)
        done, failed = await wait_all_done(settings, {p.id for p in prompts}, timeout_s=90, fleet=fleet)
    finally:
        fleet.stop_all()
    assert not failed and set(done) == {p.id for p in prompts}
    records = await completions(settings)
    shared = [r for r in records if r.params.get("n", 1) > 1]
    assert len(shared) >= 0.75 * len(prompts), (
        f"only {len(shared)} of {len(prompts)} samples shared a request"
    )
    # SGLang runs a shared request as one prefill request (max_new_tokens 0), then its n copies
    shared_requests = len({(r.prompt.prompt_id, r.timings.started_at) for r in shared})
    alone = len(records) - len(shared)
    assert sim.stats().requests_received == shared_requests + len(shared) + alone
    for record in shared:
        assert "seed" not in record.params, "n copies share their parameters: no seed"
        assert record.usage.shared_by == record.params["n"]
        assert record.content or record.reasoning_content
    for prompt_id, group in by_prompt(records).items():
        outputs = {(r.content, r.reasoning_content) for r in group}
        assert len(outputs) == len(group) == SAMPLES, f"{prompt_id}: samples must differ"


async def test_a_server_with_deterministic_inference_gets_one_request_per_sample(
    cs: Settings, tmp_path: Path
) -> None:
    settings = one_partition(cs)
    prompts = sample_records(3)
    await publish(settings, prompts, partition=0)
    profile = SimulatorProfile(enable_deterministic_inference=True)
    async with SimulatedServer(profile, time_scale=TIME_SCALE) as server:
        fleet = Fleet(settings, tmp_path)
        try:
            fleet.start("c0", server.url)
            _, failed = await wait_all_done(settings, {p.id for p in prompts}, timeout_s=90, fleet=fleet)
        finally:
            fleet.stop_all()
    assert not failed
    records = await completions(settings)
    assert all("n" not in r.params for r in records), "n copies would all be equal there"
    assert len({r.params["seed"] for r in records}) == len(prompts), "each sample its own seed"


async def test_sigkill_during_shared_requests_loses_no_sample(
    cs: Settings, sim: SimulatedServer, tmp_path: Path
) -> None:
    """Some samples are written, then the server slows down 100 times and the next shared
    requests are in flight on it: the consumer is killed; a restart finishes every sample,
    re-generating only uncommitted ones, and every sample ends in exactly one id's completion."""
    settings = one_partition(cs)
    fast = sample_records(4, max_tokens=100)
    slow = sample_records(4, max_tokens=100, first=100)
    prompts = [*fast, *slow]
    fleet = Fleet(settings, tmp_path)
    try:
        await publish(settings, fast, partition=0)
        fleet.start("c0", sim.url)
        await wait_all_done(settings, {p.id for p in fast}, timeout_s=60, fleet=fleet)
        async with httpx.AsyncClient() as http:
            assert (
                await http.post(f"{sim.url}/simulator/faults", json={"slow_factor": 100})
            ).status_code == 200
        await publish(settings, slow, partition=0)
        await wait_for(lambda: sim.stats().running >= len(slow), timeout_s=60, what="the slow copies running")
        assert not {p.id for p in slow} & {r.id for r in await completions(settings)}
        fleet.kill("c0")
        async with httpx.AsyncClient() as http:
            assert (
                await http.post(f"{sim.url}/simulator/faults", json={"slow_factor": 1})
            ).status_code == 200
        fleet.start("c0", sim.url)
        done, failed = await wait_all_done(settings, {p.id for p in prompts}, timeout_s=120, fleet=fleet)
    finally:
        fleet.stop_all()
    assert not failed and set(done) == {p.id for p in prompts}, "every sample ends in a completion"
    duplicates = sum(n - 1 for n in done.values())
    assert duplicates <= len(slow), duplicates
    shared = [r for r in await completions(settings) if r.id in {p.id for p in slow}]
    assert any(r.usage.shared_by > 1 for r in shared), "the restart shared them again"
