"""Per-partition commit positions for out-of-order work: commit only the contiguous prefix.

A generation consumer keeps many prompts in flight and their completions finish in any
order. Kafka stores one committed offset per partition, meaning "every record below this
one is done", so the offset we may commit is the lowest offset still in flight, never the
highest finished one (docs/kafka.md: out-of-order completions, in-order
commits; faust's acks get this wrong with ``concurrency > 1``).

Gaps. Offsets on a partition are not always consecutive: compaction removes records, and
transaction markers (and aborted transactions) occupy offsets that are never returned to a
consumer. The tracker therefore never assumes ``offset + 1`` follows ``offset``; it reasons
only about what was *fetched*:

* the fetched set is everything :meth:`OffsetTracker.track` was given, plus every offset
  below a position declared with :meth:`OffsetTracker.advance` (the consumer's fetch
  position, which moves past markers that produce no record);
* the committable position of a partition is ``min(pending)`` while anything is pending,
  else ``max(fetched) + 1`` (or the advanced position, if higher).

Offsets in a gap below the lowest pending offset were never fetched because they do not
exist as records, so committing past them loses nothing.

Memory is O(in-flight): per partition the tracker keeps the sorted list of pending offsets
and three integers; finished offsets are forgotten at once. Tracked offsets must increase
per partition (Kafka returns them in order), so appending keeps the list sorted and
:meth:`OffsetTracker.done` removes with a binary search.

Life cycle, in the consumer's rebalance listener and fetch loop::

    tracker.assign(p, committed=broker_committed_offset)   # on_partitions_assigned
    tracker.track(p, record.offset)                        # fetched, sent to the server
    tracker.done(p, record.offset)                         # completion/DLT record acked by Kafka
    for p, offset in tracker.committable().items():        # periodically
        await consumer.commit({tp(p): offset}); tracker.mark_committed(p, offset)
    abandoned = tracker.revoke(revoked)                    # on_partitions_revoked

Not thread-safe; meant for one asyncio task's state (no awaits inside).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["OffsetTracker"]


@dataclass(slots=True)
class _Partition:
    pending: list[int] = field(default_factory=list)
    """offsets in flight, ascending."""
    fetched_end: int | None = None
    """one past the highest fetched offset (or the advanced fetch position); None: nothing fetched."""
    committed: int | None = None
    """highest offset marked committed (the broker's value for this partition)."""
    first: int | None = None
    """the lowest offset fetched (or advanced to) since the partition was assigned."""

    def position(self) -> int | None:
        if self.pending:
            return self.pending[0]
        return self.fetched_end


class OffsetTracker:
    """Tracks in-flight offsets per assigned partition and says which offsets may be committed.

    Offsets are Kafka offsets (``int`` ≥ 0); a commit position is "the next offset to read",
    as Kafka stores it. Every method raises :class:`ValueError` on misuse, naming the partition
    and offset, because misuse here means either lost records or a commit that goes backwards.
    """

    def __init__(self) -> None:
        self._parts: dict[int, _Partition] = {}
        self._total = 0

    # -- assignment -------------------------------------------------------------------------

    def assign(self, partition: int, committed: int | None = None) -> None:
        """Start tracking ``partition``, whose broker-side committed offset is ``committed``.

        Passing the committed offset (``None`` if the group has none) keeps
        :meth:`committable` from re-committing the position the broker already holds.

        Raises:
            ValueError: the partition is already assigned, or ``committed`` is negative.
        """
        if partition in self._parts:
            raise ValueError(f"partition {partition} is already assigned")
        if committed is not None and committed < 0:
            raise ValueError(f"partition {partition}: committed offset {committed} is negative")
        self._parts[partition] = _Partition(committed=committed)

    def revoke(self, partitions: Iterable[int]) -> dict[int, list[int]]:
        """Stop tracking ``partitions``; return the offsets abandoned in flight, per partition.

        Unassigned partitions are ignored (aiokafka's eager rebalance revokes everything, and
        calling this twice is harmless). Only partitions with abandoned offsets appear in the
        result; their lists are ascending. The abandoned records will be fetched again by the
        partition's next owner, so their results may be produced twice (the dataset is
        deduplicated by record id downstream).
        """
        abandoned: dict[int, list[int]] = {}
        for partition in partitions:
            state = self._parts.pop(partition, None)
            if state is None:
                continue
            self._total -= len(state.pending)
            if state.pending:
                abandoned[partition] = state.pending
        return abandoned

    def reset(self, partition: int) -> list[int]:
        """Forget the in-flight offsets and fetch position of ``partition``, e.g. after a seek.

        The partition stays assigned and its committed offset is kept, so tracking restarts
        at any offset ≥ the committed one. Returns the abandoned in-flight offsets, ascending.

        Raises:
            ValueError: the partition is not assigned.
        """
        state = self._state(partition)
        abandoned = state.pending
        self._total -= len(abandoned)
        state.pending = []
        state.fetched_end = None
        state.first = None
        return abandoned

    @property
    def assigned(self) -> frozenset[int]:
        """The partitions currently tracked."""
        return frozenset(self._parts)

    # -- records ----------------------------------------------------------------------------

    def track(self, partition: int, offset: int) -> None:
        """Record that ``offset`` of ``partition`` was fetched and is now in flight.

        Offsets must strictly increase per partition; gaps are allowed (see the module docs).

        Raises:
            ValueError: the partition is not assigned, the offset is negative, not above every
                offset already fetched (or the advanced position), or below the committed offset.
        """
        state = self._state(partition)
        if offset < 0:
            raise ValueError(f"partition {partition}: offset {offset} is negative")
        if state.fetched_end is not None and offset < state.fetched_end:
            raise ValueError(
                f"partition {partition}: offset {offset} is not above the fetched position "
                f"{state.fetched_end} (tracked twice, or re-fetched after a seek without reset())"
            )
        if state.committed is not None and offset < state.committed:
            raise ValueError(
                f"partition {partition}: offset {offset} is below the committed offset {state.committed}"
            )
        state.pending.append(offset)
        state.fetched_end = offset + 1
        if state.first is None:
            state.first = offset
        self._total += 1

    def done(self, partition: int, offset: int) -> None:
        """Record that the result of ``offset`` (completion or dead-letter record) is durably produced.

        Call it only once the producer has acknowledged the result record: from then on the
        offset may be committed past.

        Raises:
            ValueError: the partition is not assigned, or the offset is not in flight (never
                tracked, already done, or abandoned by :meth:`revoke`/:meth:`reset`); use
                :meth:`is_pending` first when a late result may belong to a revoked partition.
        """
        state = self._state(partition)
        i = bisect_left(state.pending, offset)
        if i == len(state.pending) or state.pending[i] != offset:
            raise ValueError(f"partition {partition}: offset {offset} is not in flight")
        del state.pending[i]
        self._total -= 1

    def advance(self, partition: int, position: int) -> None:
        """Declare the consumer's fetch position: every offset below ``position`` was fetched or is
        not a record (compacted away, a transaction marker, an aborted transaction).

        Optional. Without it the commit position stops at ``max(fetched) + 1``, which is correct
        but leaves a permanent lag of 1 behind a final transaction marker; with it the commit
        position can reach the log end. Positions below the current fetch position are ignored.

        Raises:
            ValueError: the partition is not assigned, or ``position`` is negative.
        """
        state = self._state(partition)
        if position < 0:
            raise ValueError(f"partition {partition}: position {position} is negative")
        if state.fetched_end is None or position > state.fetched_end:
            state.fetched_end = position
        if state.first is None:
            state.first = position

    def is_pending(self, partition: int, offset: int) -> bool:
        """Whether ``offset`` of ``partition`` is tracked and not yet done (``False`` if unassigned)."""
        state = self._parts.get(partition)
        if state is None:
            return False
        i = bisect_left(state.pending, offset)
        return i < len(state.pending) and state.pending[i] == offset

    def seen(self, partition: int, offset: int) -> bool:
        """Whether ``offset`` of ``partition`` is below the fetched position: it is in flight, done,
        or not a record. A record fetched again at such an offset must not be tracked twice.

        Raises:
            ValueError: the partition is not assigned.
        """
        end = self.fetched_end(partition)
        return end is not None and offset < end

    def fetched_end(self, partition: int) -> int | None:
        """One past the highest offset fetched (or the advanced position); ``None``: nothing yet.

        Raises:
            ValueError: the partition is not assigned.
        """
        return self._state(partition).fetched_end

    def base(self, partition: int) -> int | None:
        """Where the partition's uncommitted span starts: the offset last marked committed, else
        the lowest offset fetched since assignment; ``None`` before either exists.

        A consumer that starts work only on offsets below ``base + limit`` re-generates at most
        ``limit`` prompts of this partition after a crash: everything below ``base`` is committed.

        Raises:
            ValueError: the partition is not assigned.
        """
        state = self._state(partition)
        return state.committed if state.committed is not None else state.first

    def in_flight(self, partition: int | None = None) -> int:
        """How many offsets of ``partition`` are in flight; all partitions' total when ``None``.

        An unassigned partition has 0.
        """
        if partition is None:
            return self._total
        state = self._parts.get(partition)
        return 0 if state is None else len(state.pending)

    # -- commits ----------------------------------------------------------------------------

    def position(self, partition: int) -> int | None:
        """The offset that may be committed for ``partition`` now (next offset to read).

        ``min(pending)`` while anything is pending, else one past the highest fetched offset
        (or the advanced position); ``None`` before anything was fetched.

        Raises:
            ValueError: the partition is not assigned.
        """
        return self._state(partition).position()

    def committable(self) -> dict[int, int]:
        """The offsets to commit now: ``{partition: offset}`` for every assigned partition whose
        position is above the offset last marked committed (or that has none marked yet).

        Nothing is changed: call :meth:`mark_committed` once the commit succeeded.
        """
        result: dict[int, int] = {}
        for partition, state in self._parts.items():
            position = state.position()
            if position is not None and (state.committed is None or position > state.committed):
                result[partition] = position
        return result

    def mark_committed(self, partition: int, offset: int) -> None:
        """Record that ``offset`` was committed for ``partition``.

        The highest value wins: a stale, lower offset is ignored.

        Raises:
            ValueError: the partition is not assigned, or ``offset`` is above the committable
                position (that would skip records still in flight or never fetched).
        """
        state = self._state(partition)
        position = state.position()
        if position is not None and offset > position:
            raise ValueError(
                f"partition {partition}: cannot mark offset {offset} committed, "
                f"the committable position is {position}"
            )
        if state.committed is None or offset > state.committed:
            state.committed = offset

    def _state(self, partition: int) -> _Partition:
        try:
            return self._parts[partition]
        except KeyError:
            raise ValueError(f"partition {partition} is not assigned") from None
