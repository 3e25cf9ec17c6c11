"""The consumer's rebalance listener: aiokafka's callbacks, forwarded to the consumer.

aiokafka is eager: every rebalance revokes every partition (docs/kafka.md), and its callbacks
run in its coordinator task, concurrently with the fetch loop (aiokafka 0.14
``consumer/group_coordinator.py`` ``_on_join_prepare``, ``_on_join_complete``). The assignment
is sticky (:mod:`consumers.group.assignor`): a member's loss moves only its partitions.

What the generation consumer does (:meth:`consumers.generate.GenerationConsumer.on_revoked`,
:meth:`~consumers.generate.GenerationConsumer.on_assigned`): on revoke it commits what is
contiguous, then keeps the revoked partitions' requests running as *orphans* instead of
cancelling them. When a partition comes back to it (the common case with static membership and
a sticky assignment) the re-fetched record adopts its orphan: no request is sent twice, and an
orphan that finished meanwhile is not generated again. Orphans of partitions that went to
another member are cancelled once the new assignment is known (the HTTP disconnect aborts them
on the server); their prompts are generated again by the new owner. On assign the partitions
are registered before any ``await``, and a record of a partition not registered yet registers
it: aiokafka may return records of a new assignment before it calls ``on_partitions_assigned``
(on a cluster of several brokers it usually does). No prompt starts between a revoke and the
next assignment.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from aiokafka import TopicPartition
from aiokafka.abc import ConsumerRebalanceListener

__all__ = ["RebalanceHandler", "RebalanceListener"]


class RebalanceHandler(Protocol):
    """What handles a rebalance: the generation consumer."""

    async def on_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        """``revoked`` partitions are no longer ours (until the next assignment)."""

    async def on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        """``assigned`` is the new assignment."""


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Forwards aiokafka's rebalance callbacks (run in aiokafka's coordinator task, concurrently
    with the fetch loop) to ``owner``."""

    def __init__(self, owner: RebalanceHandler) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        """aiokafka: ``revoked`` are taken away (every partition: aiokafka is eager)."""
        await self.owner.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        """aiokafka: ``assigned`` is the new assignment."""
        await self.owner.on_assigned(assigned)
