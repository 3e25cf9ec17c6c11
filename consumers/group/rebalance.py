"""The consumer's rebalance listener: aiokafka's callbacks, forwarded to the consumer.

aiokafka is eager (every rebalance revokes every partition) and runs its callbacks in its
coordinator task, concurrently with the fetch loop (aiokafka 0.14 ``consumer/group_coordinator.py``
``_on_join_prepare``, ``_on_join_complete``). On revoke the consumer commits what is contiguous and
keeps the requests running as orphans, which re-fetched records adopt; on assign it registers the
partitions before any ``await`` and cancels the orphans of partitions that moved away.

Design: docs/consumer.md, "Rebalances".
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
