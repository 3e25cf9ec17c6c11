"""``consumer.parallel_samples``: a prompt's samples that start together go to the server as one
request with ``n`` (the prompt prefilled once), against the simulator and real Kafka; every sample
still ends in its own completion, and a SIGKILL mid-request loses none (docs/consumer.md,
"Parallel samples")."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

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
    """``count`` prompts of :data:`SAMPLES` samples each, siblings next to each other."""
    return [
        s
        for i in range(first, first + count)
        for s in sampled(make_prompt(i, max_tokens=max_tokens), SAMPLES)
    ]


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
    assert len(shared) >= 0.75 * len(prompts), f"only {len(shared)} of {len(prompts)} samples shared a request"
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
    """Shared requests run long; the consumer is killed once some samples are written and others
    are still being generated: a restart finishes every sample, re-generating only uncommitted ones."""
    settings = one_partition(cs)
    fast = sample_records(4, max_tokens=200)
    slow = sample_records(4, max_tokens=20_000, first=100)
    prompts = [*fast, *slow]
    await publish(settings, prompts, partition=0)
    fleet = Fleet(settings, tmp_path)
    try:
        fleet.start("c0", sim.url)

        async def some_written() -> bool:
            fleet.assert_alive()
            ids = {r.id for r in await completions(settings)}
            return bool(ids & {p.id for p in fast}) and not {p.id for p in slow} <= ids

        await wait_for(some_written, timeout_s=60, what="some samples written, others in flight")
        fleet.kill("c0")
        fleet.start("c0", sim.url)
        done, failed = await wait_all_done(settings, {p.id for p in prompts}, timeout_s=120, fleet=fleet)
    finally:
        fleet.stop_all()
    assert not failed and set(done) == {p.id for p in prompts}, "every sample ends in a completion"
    duplicates = sum(n - 1 for n in done.values())
    assert duplicates <= len(prompts), duplicates
    assert Counter(r.prompt.prompt_id for r in await completions(settings))  # readable, all decoded
