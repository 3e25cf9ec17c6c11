"""The duplicate-id index and the packing of where an id was first seen."""

from __future__ import annotations

from producers.reading.ids import IdIndex, pack_where, unpack_where


def test_id_index_remembers_where_each_id_was_first_seen_across_growth() -> None:
    index = IdIndex(capacity=16)
    for i in range(20_000):
        assert index.add(f"id-{i}", i + 7) is None
    assert len(index) == 20_000
    assert index.add("id-0", 999) == 7
    assert index.add("id-19999", 999) == 20_006
    assert index.add("new", 1) is None
    assert len(index) == 20_001


def test_where_packs_input_and_line_reversibly() -> None:
    for input_index, line in ((0, 1), (3, 12_345), (2**24 - 1, 2**40 - 1)):
        packed = pack_where(input_index, line)
        assert 0 <= packed < 2**64
        assert unpack_where(packed) == (input_index, line)
    index = IdIndex()
    assert index.add("a", pack_where(1, 5)) is None
    first = index.add("a", pack_where(2, 9))
    assert first is not None and unpack_where(first) == (1, 5)


def test_equal_ids_are_duplicates_distinct_ids_are_not() -> None:
    index = IdIndex(capacity=1)
    assert index.add("7", 1) is None
    assert index.add("07", 2) is None
    assert index.add("", 3) is None
    assert index.add("7", 4) == 1
    assert index.add("", 5) == 3
    assert len(index) == 3
