"""The runner's state of one assigned partition: its position, its batches and its upload task.

Owned by the event loop (no locks). Per partition the runner holds at most two batches, one
uploading (``task`` with ``flushing``) and one filling (``batch``), and the fetched records
waiting for them (``pending``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from aiokafka import ConsumerRecord, TopicPartition

from sinks.batch import Batch
from sinks.lines import SinkRecordType

__all__ = ["PartitionState"]


@dataclass(eq=False)
class PartitionState:
    """One assigned partition's state (owned by the event loop; no locks needed)."""

    tp: TopicPartition
    record_type: SinkRecordType
    position: int | None = None
    """first offset not yet in S3; ``None`` until recovered."""
    next_offset: int = 0
    """records below this are already batched or in S3 and are dropped."""
    epoch: int = 0
    """incremented at every seek: records of a fetch issued before it are stale."""
    batch: Batch | None = None
    """the filling batch."""
    pending: deque[ConsumerRecord[bytes, bytes]] = field(default_factory=deque)
    """fetched records not yet in a batch."""
    task: asyncio.Task[None] | None = None
    """the partition's one operation in flight: its recovery, or an upload (``flushing``)."""
    flushing: bool = False
    paused: bool = False
    """paused in the consumer."""
    frozen: bool = False
    """being revoked or shut down: no new batches; an upload in flight may still finish and commit."""
    closed: bool = False
    last_append: float = 0.0
    """``time.monotonic()`` of the last record appended (the idle flush counts from it)."""
    mid_batch_hooked: bool = False
    """the ``mid_batch`` test hook (:mod:`sinks.pause`) was reached for the filling batch."""
