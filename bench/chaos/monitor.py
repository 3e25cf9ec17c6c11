"""What the chaos audit watches while the pipeline runs: every second, both groups' committed
offsets (for the durability checks) and who owns each prompts partition (for the duplicate
bound). Kafka outages are expected here: a sample that fails is skipped, never fatal.

Ownership comes from the broker's view of the generation group (DescribeGroups) and counts
only in ``Stable`` samples: during a rebalance every member's assignment is empty (aiokafka's
rebalances are eager), which is not a handover. A static member's id is its instance id plus a
dash and a UUID (Kafka's ``generateMemberId``), so the owner is that instance id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Final

from aiokafka.errors import KafkaError

from bench.chaos.audit import Sample
from bench.chaos.readback import GroupReader
from streams.config import Settings
from streams.kafka import end_offsets
from streams.runs.naming import generate_group, sink_group

_UUID_TAIL: Final = re.compile(r"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

log = logging.getLogger("kafkagen.chaos")


def instance_of(member_id: str) -> str:
    """The ``group.instance.id`` of a static member id (the id itself for a dynamic member)."""
    return _UUID_TAIL.sub("", member_id)


@dataclass
class Monitor:
    """Samples of the run's groups (see the module docstring).

    Attributes:
        generate / sink: committed-offset samples of the generation and sink groups.
        owners: the latest ``Stable`` owner (instance id) per prompts partition.
        handovers: prompts partition -> times its owner changed between ``Stable`` samples.
        failures: samples that could not be taken (Kafka unreachable).
        members: instance ids of the members at the latest ``Stable`` sample.
    """

    settings: Settings
    interval_s: float = 1.0
    generate: list[Sample] = field(default_factory=list)
    sink: list[Sample] = field(default_factory=list)
    owners: dict[int, str] = field(default_factory=dict)
    handovers: dict[int, int] = field(default_factory=dict)
    failures: int = 0
    members: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        t = self.settings.topics
        self.prompts_topic = t.prompts
        self.results_topics = [t.completions, t.errors]
        self.handovers = dict.fromkeys(range(t.partitions), 0)

    def owned_by(self, instance: str) -> list[int]:
        """The prompts partitions ``instance`` owned at the latest ``Stable`` sample."""
        return sorted(p for p, o in self.owners.items() if o == instance)

    def add_handovers(self, partitions: list[int]) -> None:
        """Count one handover for each of ``partitions`` (their owner was SIGKILLed or died)."""
        for p in partitions:
            self.handovers[p] = self.handovers.get(p, 0) + 1

    def observe_members(self, state: str, members: dict[str, set[int]]) -> None:
        """Update the owners from one DescribeGroups answer (ignored unless ``Stable``)."""
        if state != "Stable":
            return
        self.members = {instance_of(m) for m in members}
        current = {p: instance_of(m) for m, parts in members.items() for p in parts}
        for p, before in self.owners.items():
            if current.get(p) != before:
                self.handovers[p] = self.handovers.get(p, 0) + 1
        self.owners = current

    async def sample(self, groups: GroupReader) -> None:
        """One sample of both groups' commits and the generation group's members.

        Raises:
            KafkaError, TimeoutError: Kafka did not answer.
        """
        gen, sink = generate_group(self.settings), sink_group(self.settings)
        committed = await groups.committed(gen, [self.prompts_topic])
        self.generate.append(Sample(time.time(), committed))
        committed = await groups.committed(sink, self.results_topics)
        self.sink.append(Sample(time.time(), committed))
        state, members = await groups.members(gen)
        self.observe_members(state, members)

    async def run(self) -> None:
        """Sample every ``interval_s`` seconds until cancelled; a new admin client after a failure."""
        while True:
            try:
                async with GroupReader(self.settings) as groups:
                    while True:
                        await self.sample(groups)
                        await asyncio.sleep(self.interval_s)
            except (KafkaError, TimeoutError, OSError) as exc:
                self.failures += 1
                log.debug("sample failed: %r", exc)
                await asyncio.sleep(self.interval_s)

    def progress(self) -> int:
        """Offsets both groups have committed in all, by the latest samples (grows as the pipeline
        works, whatever its pace)."""
        gen = self.generate[-1].offsets if self.generate else {}
        sink = self.sink[-1].offsets if self.sink else {}
        return sum(gen.values()) + sum(sink.values())

    async def drained(self) -> bool:
        """Whether the latest sample's commits reach the ends of the prompts, completions and
        errors topics (a fresh reading of the ends; False while Kafka does not answer)."""
        if not self.generate or not self.sink:
            return False
        try:
            ends = {
                (self.prompts_topic, p): o
                for p, o in (await end_offsets(self.settings.kafka, self.prompts_topic)).items()
            }
            results: dict[tuple[str, int], int] = {}
            for topic in self.results_topics:
                results |= {(topic, p): o for p, o in (await end_offsets(self.settings.kafka, topic)).items()}
        except (KafkaError, TimeoutError, OSError):
            return False
        gen, sink = self.generate[-1].offsets, self.sink[-1].offsets
        return all(gen.get(tp, 0) >= end for tp, end in ends.items()) and all(
            sink.get(tp, 0) >= end for tp, end in results.items()
        )

    async def final(self) -> None:
        """Take one last sample (after the pipeline drained), retrying for up to 60 s.

        Raises:
            TimeoutError: no sample could be taken.
        """
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(KafkaError, TimeoutError, OSError):
                async with GroupReader(self.settings) as groups:
                    await self.sample(groups)
                    return
            if time.monotonic() > deadline:
                raise TimeoutError("could not read the groups' committed offsets for 60 s")
            await asyncio.sleep(1.0)
