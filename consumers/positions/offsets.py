"""Per-partition commit positions for out-of-order work: commit only the contiguous prefix.

:class:`OffsetTracker` tracks the offsets in flight per assigned partition and says which offset
may be committed: the lowest one in flight, else one past what was fetched, over offsets that need
not be consecutive. Not thread-safe: one asyncio task's state (no awaits inside).

Design: docs/consumer.md, "Commits: the contiguous prefix" (gaps, memory, life cycle).
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
        """Start tracking ``partition``, whose committed offset in the group is ``committed``
        (``None``: none), so :meth:`committable` does not commit that position again.

        Raises:
            ValueError: the partition is already assigned, or ``committed`` is negative.
        """
        if partition in self._parts:
            raise ValueError(f"partition {partition} is already assigned")
        if committed is not None and committed < 0:
            raise ValueError(f"partition {partition}: committed offset {committed} is negative")
        self._parts[partition] = _Partition(committed=committed)

    def revoke(self, partitions: Iterable[int]) -> dict[int, list[int]]:
        """Stop tracking ``partitions`` (unassigned ones are ignored); return the offsets abandoned
        in flight, ascending, per partition that has any. Their next owner fetches them again
        (docs/consumer.md, "Commits: the contiguous prefix", revoked offsets).
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
        """Forget the in-flight offsets and fetch position of ``partition`` (e.g. after a seek); it
        stays assigned with its committed offset, so tracking restarts at any offset ≥ that one.
        Returns the abandoned in-flight offsets, ascending.

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
        """Record that ``offset`` of ``partition`` was fetched and is now in flight. Offsets must
        strictly increase per partition; gaps are allowed (docs/consumer.md, "Commits").

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
        """Record that the result of ``offset`` (completion or dead-letter record) is durably
        produced: acknowledged by the broker, so the offset may be committed past.

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
        not a record (compacted away, a transaction marker, an aborted transaction). Optional: it
        lets the commit position reach the log end (docs/consumer.md, "Commits"). Positions below
        the current fetch position are ignored.

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
        the lowest offset fetched since assignment; ``None`` before either exists. Everything below
        it is committed (docs/consumer.md, "max_uncommitted: what a SIGKILL regenerates").

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
        """The offset that may be committed for ``partition`` now (next offset to read):
        ``min(pending)`` while anything is pending, else one past the highest fetched offset (or
        the advanced position); ``None`` before anything was fetched.

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
        """Record that ``offset`` was committed for ``partition``; the highest value wins (a stale,
        lower offset is ignored).

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
