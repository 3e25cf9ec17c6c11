"""OffsetTracker: only the contiguous completed prefix is ever committable."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from consumers.positions.offsets import OffsetTracker


def _tracker(*partitions: int) -> OffsetTracker:
    tracker = OffsetTracker()
    for partition in partitions:
        tracker.assign(partition)
    return tracker


def test_out_of_order_completions_commit_only_the_contiguous_prefix() -> None:
    tracker = _tracker(0)
    for offset in range(5):
        tracker.track(0, offset)
    assert tracker.committable() == {0: 0}

    tracker.done(0, 3)
    tracker.done(0, 1)
    assert tracker.committable() == {0: 0}, "offset 0 is still in flight"

    tracker.done(0, 0)
    assert tracker.committable() == {0: 2}, "0 and 1 done, 2 pending"

    tracker.done(0, 2)
    assert tracker.committable() == {0: 4}, "3 was already done, 4 pending"

    tracker.done(0, 4)
    assert tracker.committable() == {0: 5}
    assert tracker.in_flight(0) == 0


def test_committable_lists_only_partitions_that_advanced() -> None:
    tracker = _tracker(0, 1)
    tracker.track(0, 10)
    tracker.track(1, 20)
    tracker.done(0, 10)
    tracker.done(1, 20)
    assert tracker.committable() == {0: 11, 1: 21}

    tracker.mark_committed(0, 11)
    assert tracker.committable() == {1: 21}
    tracker.mark_committed(1, 21)
    assert tracker.committable() == {}

    tracker.track(1, 21)
    assert tracker.committable() == {}, "position 21 is already committed"
    tracker.done(1, 21)
    assert tracker.committable() == {1: 22}


def test_assign_with_the_brokers_committed_offset_does_not_recommit_it() -> None:
    tracker = OffsetTracker()
    tracker.assign(3, committed=100)
    tracker.track(3, 100)
    assert tracker.committable() == {}
    tracker.done(3, 100)
    assert tracker.committable() == {3: 101}


def test_gaps_below_the_lowest_pending_offset_are_committed_past() -> None:
    tracker = _tracker(0)
    # 3-6 and 8 are transaction markers / compacted away: never fetched.
    for offset in (2, 7, 9, 12):
        tracker.track(0, offset)
    tracker.done(0, 2)
    assert tracker.position(0) == 7
    tracker.done(0, 9)
    tracker.done(0, 7)
    assert tracker.position(0) == 12
    tracker.done(0, 12)
    assert tracker.committable() == {0: 13}


def test_advance_moves_past_a_trailing_transaction_marker() -> None:
    tracker = _tracker(0)
    tracker.track(0, 4)
    tracker.advance(0, 6)  # offset 5 is a commit marker: the fetch position is 6
    assert tracker.position(0) == 4, "4 is still pending"
    tracker.done(0, 4)
    assert tracker.committable() == {0: 6}
    tracker.advance(0, 5)  # stale: ignored
    assert tracker.position(0) == 6
    with pytest.raises(ValueError, match="not above the fetched position"):
        tracker.track(0, 5)
    tracker.track(0, 6)


def test_revoke_returns_abandoned_offsets_and_forgets_the_partition() -> None:
    tracker = _tracker(0, 1, 2)
    for offset in (5, 6, 7):
        tracker.track(0, offset)
    tracker.track(1, 0)
    tracker.done(0, 6)
    tracker.done(1, 0)
    assert tracker.in_flight() == 2

    assert tracker.revoke([0, 1, 9]) == {0: [5, 7]}
    assert tracker.assigned == frozenset({2})
    assert tracker.in_flight() == 0
    assert tracker.committable() == {}
    assert not tracker.is_pending(0, 5)
    with pytest.raises(ValueError, match="not assigned"):
        tracker.done(0, 5)  # a late completion of a revoked partition
    assert tracker.revoke([0]) == {}, "revoking twice is harmless"


def test_reset_keeps_the_committed_offset_and_allows_refetching() -> None:
    tracker = _tracker(0)
    tracker.track(0, 0)
    tracker.track(0, 1)
    tracker.done(0, 0)
    tracker.mark_committed(0, 1)
    assert tracker.reset(0) == [1]
    assert tracker.in_flight(0) == 0
    assert tracker.position(0) is None
    assert tracker.committable() == {}
    with pytest.raises(ValueError, match="below the committed offset 1"):
        tracker.track(0, 0)
    tracker.track(0, 1)  # seek back to the committed offset and fetch again
    assert tracker.is_pending(0, 1)


def test_in_flight_counts_per_partition_and_in_total() -> None:
    tracker = _tracker(0, 1)
    tracker.track(0, 0)
    tracker.track(0, 1)
    tracker.track(1, 0)
    assert [tracker.in_flight(0), tracker.in_flight(1), tracker.in_flight(7), tracker.in_flight()] == [
        2,
        1,
        0,
        3,
    ]
    tracker.done(0, 1)
    assert tracker.in_flight() == 2


@pytest.mark.parametrize(
    ("tracked", "finished", "misuse", "message"),
    [
        ([], [], lambda t: t.track(5, 0), "partition 5 is not assigned"),
        ([], [], lambda t: t.done(0, 0), "offset 0 is not in flight"),
        ([0, 2], [], lambda t: t.done(0, 1), "offset 1 is not in flight"),
        ([0], [0], lambda t: t.done(0, 0), "offset 0 is not in flight"),
        ([0, 2], [], lambda t: t.track(0, 1), "offset 1 is not above the fetched position 3"),
        ([0], [0], lambda t: t.track(0, 0), "offset 0 is not above the fetched position 1"),
        ([], [], lambda t: t.track(0, -1), "negative"),
        ([], [], lambda t: t.assign(0), "already assigned"),
        ([0], [], lambda t: t.mark_committed(0, 2), "committable position is 0"),
        ([], [], lambda t: t.assign(1, committed=-1), "negative"),
        ([], [], lambda t: t.advance(0, -3), "negative"),
        ([], [], lambda t: t.position(4), "not assigned"),
    ],
)
def test_misuse_raises_value_error(
    tracked: list[int], finished: list[int], misuse: Callable[[OffsetTracker], object], message: str
) -> None:
    tracker = _tracker(0)
    for offset in tracked:
        tracker.track(0, offset)
    for offset in finished:
        tracker.done(0, offset)
    with pytest.raises(ValueError, match=message):
        misuse(tracker)


def test_memory_is_bounded_by_the_in_flight_offsets() -> None:
    tracker = _tracker(0)
    tracker.track(0, 0)  # stuck at the head for the whole test
    for offset in range(1, 100_000):
        tracker.track(0, offset)
        tracker.done(0, offset)
    state = tracker._parts[0]
    assert state.pending == [0]
    assert tracker.position(0) == 0
    tracker.done(0, 0)
    assert tracker.position(0) == 100_000


@pytest.mark.parametrize("seed", range(20))
def test_matches_a_set_based_reference_model(seed: int) -> None:
    rng = random.Random(seed)
    tracker = OffsetTracker()
    # reference state, per partition: sets of offsets (O(records), fine for a test)
    fetched: dict[int, set[int]] = {}
    pending: dict[int, set[int]] = {}
    advanced: dict[int, int] = {}
    committed: dict[int, int] = {}
    next_offset: dict[int, int] = {}

    def reference_position(p: int) -> int | None:
        if pending[p]:
            return min(pending[p])
        ends = [max(fetched[p]) + 1] if fetched[p] else []
        if p in advanced:
            ends.append(advanced[p])
        return max(ends) if ends else None

    for _ in range(2000):
        op = rng.random()
        owned = sorted(fetched)
        if op < 0.05 or not owned:
            p = rng.randrange(4)
            if p not in fetched:
                start = next_offset.get(p, 0)
                tracker.assign(p, committed=committed.get(p))
                fetched[p], pending[p] = set(), set()
                next_offset[p] = start
        elif op < 0.45:
            p = rng.choice(owned)
            offset = next_offset[p] + (0 if rng.random() < 0.8 else rng.randrange(1, 5))  # gaps
            tracker.track(p, offset)
            fetched[p].add(offset)
            pending[p].add(offset)
            next_offset[p] = offset + 1
        elif op < 0.8:
            p = rng.choice(owned)
            if pending[p]:
                offset = rng.choice(sorted(pending[p]))
                tracker.done(p, offset)
                pending[p].discard(offset)
        elif op < 0.83:
            p = rng.choice(owned)
            fetch_position = next_offset[p] + rng.randrange(0, 3)
            tracker.advance(p, fetch_position)
            advanced[p] = max(advanced.get(p, 0), fetch_position)
            next_offset[p] = max(next_offset[p], fetch_position)
        elif op < 0.97:
            expected: dict[int, int] = {}
            for p in owned:
                position = reference_position(p)
                if position is not None and (p not in committed or position > committed[p]):
                    expected[p] = position
            assert tracker.committable() == expected
            for p, offset in expected.items():
                if rng.random() < 0.7:
                    tracker.mark_committed(p, offset)
                    committed[p] = offset
        else:
            p = rng.choice(owned)
            abandoned = tracker.revoke([p])
            assert abandoned == ({p: sorted(pending[p])} if pending[p] else {})
            # The next owner resumes from the committed offset (or 0): records re-fetched.
            next_offset[p] = committed.get(p, 0)
            del fetched[p], pending[p]
            advanced.pop(p, None)
        for p in fetched:
            assert tracker.in_flight(p) == len(pending[p])
            assert tracker.position(p) == reference_position(p)
        assert tracker.in_flight() == sum(len(s) for s in pending.values())


def test_base_and_seen_describe_the_uncommitted_span() -> None:
    t = OffsetTracker()
    t.assign(0)
    assert t.base(0) is None and t.fetched_end(0) is None and not t.seen(0, 0)
    for o in (5, 6, 7):
        t.track(0, o)
    assert t.base(0) == 5, "nothing committed yet: the span starts at the first fetched offset"
    assert t.fetched_end(0) == 8
    assert t.seen(0, 6) and t.seen(0, 7) and not t.seen(0, 8)
    t.done(0, 5)
    t.mark_committed(0, 6)
    assert t.base(0) == 6
    t.advance(0, 12)
    assert t.fetched_end(0) == 12 and t.seen(0, 11)
    t.revoke([0])
    t.assign(0)
    assert t.base(0) is None
