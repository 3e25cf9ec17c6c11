"""The generation consumers' partition assignor: sticky, with JoinGroup metadata that never changes.

aiokafka's own sticky assignor puts each member's partitions into its JoinGroup metadata, which
changes with every assignment and, under churn, livelocked the group in rebalances (issue 9,
finding F1). This one's metadata is constant (the topics and the member's group instance id); the
leader writes the whole assignment into every member's SyncGroup answer instead, and the next
leader hands it to aiokafka's sticky algorithm as each member's previous partitions.

Design: docs/consumer.md, "The assignor" (the Kafka and aiokafka sources).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import (
    StickyAssignmentExecutor,
    StickyAssignorMemberMetadataV1,
)
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.structs import TopicPartition

__all__ = ["StableStickyAssignor", "stable_sticky_assignor"]


class StableStickyAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Sticky assignment with constant JoinGroup metadata (docs/consumer.md, "The assignor").

    Use :func:`stable_sticky_assignor` for a class of one consumer's own: the memory lives in
    class attributes, because aiokafka calls assignors as classes.

    Attributes:
        instance_id: this member's group instance id, sent as its metadata's user data (UTF-8).
        remembered: the group's last assignment, ``instance id -> partitions``, from the user
            data of this member's last assignment; empty before its first one.
        own: this member's partitions from its last assignment.
    """

    name = "kafkagen-sticky"
    version = 0
    instance_id: ClassVar[str] = ""
    remembered: ClassVar[dict[str, list[TopicPartition]]] = {}
    own: ClassVar[list[TopicPartition]] = []

    @classmethod
    def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        """The JoinGroup metadata: the subscribed topics (sorted) and the instance id. It depends
        on nothing that a rebalance changes."""
        return ConsumerProtocolMemberMetadata(cls.version, sorted(topics), cls.instance_id.encode())

    @classmethod
    def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
        """Keep this member's new partitions and the group's whole assignment (its user data:
        JSON ``{instance id: {topic: [partition, ...]}}``; unreadable user data is ignored)."""
        cls.own = list(assignment.partitions())
        try:
            group = json.loads(assignment.user_data or b"{}")
            cls.remembered = {
                instance: [TopicPartition(t, int(p)) for t, ps in topics.items() for p in ps]
                for instance, topics in group.items()
            }
        except (ValueError, AttributeError, TypeError):
            cls.remembered = {}

    @classmethod
    def assign(
        cls, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        """Assign every partition of the members' topics, as sticky as the leader's memory allows.

        Args:
            cluster: aiokafka's ``ClusterMetadata`` (partitions per topic).
            members: ``member id -> metadata`` from the JoinGroup response.

        Returns:
            ``member id -> assignment`` for every member, balanced to within one partition per
            topic subscription (aiokafka's sticky algorithm).
        """
        instance = {m: (md.user_data or b"").decode("utf-8", "replace") or m for m, md in members.items()}
        previous = dict(cls.remembered) or {cls.instance_id: list(cls.own)}
        taken: set[TopicPartition] = set()
        sticky: dict[str, StickyAssignorMemberMetadataV1] = {}
        for member_id, md in sorted(members.items()):
            valid = cluster.partitions_for_topic
            kept = [
                tp
                for tp in previous.get(instance[member_id], [])
                if tp.topic in md.subscription and tp.partition in (valid(tp.topic) or ()) and tp not in taken
            ]
            taken.update(kept)
            sticky[member_id] = StickyAssignorMemberMetadataV1(
                partitions=kept, generation=1, subscription=list(md.subscription)
            )
        executor = StickyAssignmentExecutor(cluster, sticky)
        executor.perform_initial_assignment()
        executor.balance()
        final = {m: sorted(executor.get_final_assignment(m)) for m in members}
        group = json.dumps({instance[m]: dict(a) for m, a in final.items()}, sort_keys=True).encode()
        return {m: ConsumerProtocolMemberAssignment(cls.version, a, group) for m, a in final.items()}


def stable_sticky_assignor(instance_id: str) -> type[StableStickyAssignor]:
    """A :class:`StableStickyAssignor` class of one consumer's own, for group instance id
    ``instance_id``: several consumers in one process (benchmarks, tests) must not share the
    leader's memory."""
    return type(
        "KafkagenStickyAssignor",
        (StableStickyAssignor,),
        {"instance_id": instance_id, "remembered": {}, "own": []},
    )
