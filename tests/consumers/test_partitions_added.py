"""Partitions added to a running run's prompts topic (``kafkagen scale --partitions``) reach the
consumer group by themselves: a real consumer process notices them at its metadata refresh
(``consumers.group.membership.METADATA_MAX_AGE_MS``), the group rebalances, and the prompts published
to the new partitions are generated from their start."""

from __future__ import annotations

from collections import Counter

from consumers.group.membership import METADATA_MAX_AGE_MS
from launch.scale.control import raise_partitions
from simulator import SimulatedServer
from streams.config import Settings
from streams.kafka import topic_partitions
from tests.consumers.support import TIME_SCALE, Fleet, completions, wait_all_done
from tests.helpers import make_prompt, publish


async def test_prompts_on_partitions_added_mid_run_are_generated(cs: Settings, fleet: Fleet) -> None:
    async with SimulatedServer(time_scale=TIME_SCALE) as sim:
        first = [make_prompt(i, max_tokens=50) for i in range(20)]
        await publish(cs, first)
        fleet.start("c", sim.url)
        await wait_all_done(cs, {p.id for p in first}, timeout_s=90, fleet=fleet)
        before = len(await topic_partitions(cs.kafka, cs.topics.prompts))
        assert await raise_partitions(cs, before + 2, by="test") == (before, before + 2)
        added = [make_prompt(i, max_tokens=50) for i in range(20, 30)]
        await publish(cs, added[:5], partition=before)
        await publish(cs, added[5:], partition=before + 1)
        wait_s = METADATA_MAX_AGE_MS / 1000 + 60
        done, failed = await wait_all_done(cs, {p.id for p in first + added}, timeout_s=wait_s, fleet=fleet)
        assert not failed
        assert {p.id for p in added} <= set(done)
        by_partition = Counter(c.source.partition for c in await completions(cs) if c.source is not None)
        assert by_partition[before] >= 5 and by_partition[before + 1] >= 5, by_partition
