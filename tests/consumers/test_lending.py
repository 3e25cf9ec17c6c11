"""Tail lending (consumers/lending.py, docs/consumer.md "Tail lending"): a member whose partitions are
done lends its idle server to a member with a backlog. Real Kafka, real consumer processes,
SGLang-API simulators (real processes) over real sockets. Every prompt is published to partition
0, so one member owns all the work and the other's server would sit idle without lending."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from consumers.generate import group_id
from streams.config import Settings
from streams.records import CompletionRecord, PromptRecord
from tests.consumers.support import Fleet, completions, errors, wait_all_done, wait_settled
from tests.helpers import committed, make_prompt, publish, start_simulator, wait_for

SLOW = "2"
"""simulator time scale: a 300-token answer takes ~0.6 s, so 16 slots drain 400 prompts in ~15 s."""


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[str], str]]]:
    procs = [start_simulator(tmp_path / f"sim-{i}.log", "--time-scale", SLOW) for i in range(2)]
    try:
        yield procs
    finally:
        for proc, _ in procs:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def spare_sim(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A third simulator, for a member that joins mid-run."""
    proc, url = start_simulator(tmp_path / "sim-spare.log", "--time-scale", SLOW)
    try:
        yield proc, url
    finally:
        proc.kill()
        proc.wait(10)


def received(url: str) -> int:
    """Generation requests the simulator at ``url`` accepted (``/simulator/stats``)."""
    return int(httpx.get(f"{url}/simulator/stats", timeout=5).json()["requests_received"])


async def _started(
    s: Settings, fleet: Fleet, sims: list[tuple[subprocess.Popen[str], str]], partition: int = 0
) -> tuple[list[PromptRecord], dict[str, str], str]:
    """400 prompts on ``partition`` and a consumer per simulator: (the prompts, instance id → server
    URL, the instance id that owns the partition, as its completions show)."""
    urls = {f"c{i}": url for i, (_, url) in enumerate(sims)}
    prompts = [make_prompt(i, max_tokens=300) for i in range(400)]
    await publish(s, prompts, partition=partition)
    for name, url in urls.items():
        if name not in fleet.procs:  # already running: started by the test
            fleet.start(name, url)
    owners: Counter[str] = Counter()

    async def seen() -> bool:
        owners.update(c.consumer for c in await completions(s) if c.consumer is not None)
        return bool(owners)

    await wait_for(seen, timeout_s=60, what="the first completions")
    return prompts, urls, owners.most_common(1)[0][0]


async def test_an_idle_members_server_answers_a_backlogged_members_prompts_each_once(
    cs: Settings, fleet: Fleet, sims: list[tuple[subprocess.Popen[str], str]]
) -> None:
    prompts, urls, owner = await _started(cs, fleet, sims)
    idle_url = next(url for name, url in urls.items() if name != owner)
    done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=180, fleet=fleet)
    assert not failed and set(done.values()) == {1}, "a prompt was lost or generated twice"
    records = await completions(cs)
    assert {r.consumer for r in records} == {owner}, "only the partition's owner writes its results"
    lent = [r for r in records if r.server == idle_url]
    assert len(lent) >= 40, f"the idle server answered only {len(lent)} of 400 prompts"
    assert received(idle_url) >= len(lent)
    for proc in fleet.procs.values():
        proc.terminate()
        assert proc.wait(30) == 0
    offsets = await committed(cs, group_id(cs), cs.topics.prompts)
    assert offsets.get(0) == 400, offsets


async def test_a_lending_server_killed_mid_request_loses_nothing(
    cs: Settings, fleet: Fleet, sims: list[tuple[subprocess.Popen[str], str]]
) -> None:
    """SIGKILL the idle member's server while it holds lent prompts: they go back to the owner's
    server; none is lost, none dead-lettered, none written twice."""
    prompts, urls, owner = await _started(cs, fleet, sims)
    idle = next(i for i, name in enumerate(urls) if name != owner)
    proc, idle_url = sims[idle]

    async def lending() -> bool:  # lent requests are running there now
        return any(r.server == idle_url for r in await completions(cs)) and received(idle_url) > 0

    await wait_for(lending, timeout_s=90, what="the idle server to answer lent prompts")
    proc.kill()
    proc.wait(10)
    fleet.procs.pop(next(name for name in urls if name != owner)).kill()  # its server is gone
    done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=180, fleet=fleet)
    assert not failed, f"dead letters: {sorted(failed)[:5]}"
    assert set(done.values()) == {1}, "a prompt was generated twice"
    assert not await errors(cs)


async def test_sigkill_of_a_lending_owner_costs_at_most_its_uncommitted_span(
    cs: Settings, fleet: Fleet, sims: list[tuple[subprocess.Popen[str], str]]
) -> None:
    """SIGKILL the owner while some of its prompts run on the other member's server: the other member
    takes the partition over; what is generated twice lies past the committed offset, at most
    ``max_uncommitted`` prompts, as without lending (tests/consumers/test_generate.py)."""
    prompts, urls, owner = await _started(cs, fleet, sims)
    idle_url = next(url for name, url in urls.items() if name != owner)

    async def lending() -> bool:
        return sum(r.server == idle_url for r in await completions(cs)) >= 10

    await wait_for(lending, timeout_s=90, what="lent prompts answered")
    fleet.kill(owner)
    await wait_settled(cs)
    commits = await committed(cs, group_id(cs), cs.topics.prompts)
    written = await completions(cs)
    uncommitted = {c.id for c in written if c.source is not None and c.source.offset >= (commits.get(0) or 0)}
    done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=180, fleet=fleet)
    assert not failed
    twice = {i for i, n in done.items() if n > 1}
    assert twice <= uncommitted, f"committed prompts generated again: {sorted(twice - uncommitted)[:5]}"
    assert len(twice) <= cs.consumer.max_uncommitted


async def _lending_now(s: Settings, idle_url: str, total: int) -> None:
    """Wait until the idle server has accepted lent requests and the run is not done."""

    async def lending() -> bool:
        return received(idle_url) > 0 and len({c.id for c in await completions(s)}) < total

    await wait_for(lending, timeout_s=90, what="lent prompts out on the idle server")


def _owner_at_end(records: list[CompletionRecord]) -> str | None:
    """The member that wrote the result of the prompts' last offset (their partition's owner at the end)."""
    written = [(r.source.offset, r.consumer) for r in records if r.source is not None]
    return max(written, key=lambda w: w[0])[1]


async def test_a_graceful_handover_while_prompts_are_lent_repeats_none(
    cs: Settings, fleet: Fleet, sims: list[tuple[subprocess.Popen[str], str]]
) -> None:
    """SIGTERM the owner while some of its prompts run on the idle member's server: it drains
    them (lent ones included), commits and leaves; the idle member takes partition 0 over from
    the committed offset. Nothing lost, nothing written twice, offset 400 committed."""
    prompts, urls, owner = await _started(cs, fleet, sims)
    other = next(name for name in urls if name != owner)
    await _lending_now(cs, urls[other], len(prompts))
    proc = fleet.procs.pop(owner)
    proc.terminate()
    assert proc.wait(30) == 0
    done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=180, fleet=fleet)
    assert not failed and not await errors(cs)
    records = await completions(cs)
    assert {r.consumer for r in records} == {owner, other}, "partition 0 did not move"
    assert _owner_at_end(records) == other
    twice = sorted(i for i, n in done.items() if n > 1)
    assert not twice, f"{len(twice)} prompts written twice after a graceful handover: {twice[:5]}"
    fleet.procs[other].terminate()
    assert fleet.procs[other].wait(30) == 0
    offsets = await committed(cs, group_id(cs), cs.topics.prompts)
    assert offsets.get(0) == 400, offsets


def _assigned(fleet: Fleet, name: str) -> list[int]:
    """The partitions member ``name`` logged last as assigned (empty: none yet)."""
    log = fleet.logs / f"{name}.log"
    found = (
        re.findall(r"assigned partitions \[([\d, ]*)\]", log.read_text(errors="replace"))
        if log.exists()
        else []
    )
    return [int(p) for p in found[-1].split(",")] if found and found[-1] else []


@pytest.mark.parametrize("lent", ["stays", "moves"])
async def test_a_member_joining_while_prompts_are_lent_loses_none(
    cs: Settings,
    fleet: Fleet,
    sims: list[tuple[subprocess.Popen[str], str]],
    spare_sim: tuple[subprocess.Popen[str], str],
    lent: str,
) -> None:
    """A third member joins while the owner has prompts lent: every partition is revoked (eager)
    and the lent requests become orphans, adopted if their partition stays with the owner (none
    sent twice), cancelled if it moves to the newcomer (at most ``max_uncommitted`` regenerated).
    Nothing lost, no dead letter, offset 400 committed. The prompts go, once both members hold
    partitions, to partition 0 (``stays``) or to the last partition of the member with the most,
    which the sticky assignor hands to a newcomer (``moves``); the branch taken is checked from the
    completions' ``consumer``. ``max_uncommitted`` is 100 here, so the bound says something."""
    cs = cs.model_copy(update={"consumer": cs.consumer.model_copy(update={"max_uncommitted": 100})})
    fleet.settings = cs
    await publish(cs, [])
    for i, (_, url) in enumerate(sims):
        fleet.start(f"c{i}", url)

    async def stable() -> bool:
        return all(_assigned(fleet, name) for name in fleet.procs)

    await wait_for(stable, timeout_s=60, what="both members to hold partitions")
    most = max(fleet.procs, key=lambda name: len(_assigned(fleet, name)))
    partition = 0 if lent == "stays" else _assigned(fleet, most)[-1]
    prompts, urls, owner = await _started(cs, fleet, sims, partition)
    other = next(name for name in urls if name != owner)
    await _lending_now(cs, urls[other], len(prompts))
    fleet.start("c2", spare_sim[1])

    async def joined() -> bool:
        return bool(_assigned(fleet, "c2"))

    await wait_for(joined, timeout_s=60, what="the third member's assignment")
    assert len({c.id for c in await completions(cs)}) < len(prompts), "the run ended before the rebalance"
    done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=180, fleet=fleet)
    assert not failed and not await errors(cs)
    twice = sorted(i for i, n in done.items() if n > 1)
    end_owner = _owner_at_end(await completions(cs))
    print(f"partition {partition}: {owner} -> {end_owner}; written twice: {len(twice)}")
    assert end_owner in (owner, "c2"), f"partition {partition} went to {end_owner}"
    assert len(twice) <= (cs.consumer.max_uncommitted if end_owner == "c2" else 0), twice[:5]
    for proc in fleet.procs.values():
        proc.terminate()
        assert proc.wait(30) == 0
    offsets = await committed(cs, group_id(cs), cs.topics.prompts)
    assert offsets.get(partition) == 400, offsets
