"""The consumer's book of work (consumers.positions.jobs): pure bookkeeping, no Kafka."""

from __future__ import annotations

import asyncio
import json

from aiokafka import ConsumerRecord

from consumers.positions.jobs import Job, JobBook
from consumers.positions.recovery import Answered


def record(partition: int, offset: int, value: bytes = b"{}") -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="t.prompts",
        partition=partition,
        offset=offset,
        timestamp=0,
        timestamp_type=0,
        key=b"k",
        value=value,
        checksum=None,
        serialized_key_size=1,
        serialized_value_size=2,
        headers=(),
    )


def no_task(job: Job) -> asyncio.Task[None]:
    return None  # type: ignore[return-value]  # the book only stores it


def test_accepted_records_are_buffered_once_and_started_round_robin() -> None:
    book = JobBook(max_uncommitted=100)
    for p, o in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]:
        book.accept(record(p, o))
    book.accept(record(0, 1))  # fetched again after a seek: already queued
    assert book.waiting == 5 and book.tracker.assigned == {0, 1}
    book.start_buffered(3, no_task)
    assert sorted(book.jobs) == [(0, 0), (0, 1), (1, 0)]
    assert book.in_flight == 3 and book.waiting == 2
    book.start_buffered(5, no_task)
    assert book.waiting == 0 and not book.buffered


def family(record: ConsumerRecord[bytes, bytes]) -> tuple[str, int] | None:
    value = json.loads(record.value or b"null") if (record.value or b"").startswith(b"{") else None
    if value is None or value.get("sample") is None:
        return None
    return value["id"].rpartition("#")[0], value.get("attempt", 0)


def sample_value(record_id: str, sample: int | None, attempt: int = 0) -> bytes:
    return json.dumps({"id": record_id, "sample": sample, "attempt": attempt, "messages": []}).encode()


def test_a_started_sample_takes_its_queued_siblings_along_past_the_room() -> None:
    values = [
        sample_value("a#0", 0), sample_value("a#1", 1), sample_value("a#2", 2),
        sample_value("b#0", 0), sample_value("b#1", 1),
        sample_value("t#0", None), sample_value("t#1", None),  # ids with '#<digit>', not samples
        sample_value("c#0", 0), sample_value("c#0", 0, attempt=1),  # a regenerated sample: another attempt
        b"not json",
    ]  # fmt: skip
    book = JobBook(max_uncommitted=100)
    for o, value in enumerate(values):
        book.accept(record(0, o, value=value))
    book.start_buffered(1, no_task, together=8, family=family)
    assert sorted(book.jobs) == [(0, 0), (0, 1), (0, 2)], "a#0 brings a#1 and a#2"
    book.start_buffered(1, no_task, together=8, family=family)
    assert len(book.jobs) == 5, "then b#0 and b#1"
    book.start_buffered(1, no_task, together=8, family=family)
    assert len(book.jobs) == 6, "t#0 is no sample: alone"
    book.start_buffered(1, no_task, together=8, family=family)
    book.start_buffered(1, no_task, together=8, family=family)
    assert len(book.jobs) == 8, "c#0's attempts are not siblings"
    capped = JobBook(max_uncommitted=100)
    for o in range(6):
        capped.accept(record(0, o, value=sample_value(f"x#{o}", o)))
    capped.start_buffered(1, no_task, together=4, family=family)
    assert len(capped.jobs) == 4, "at most `together` start at once"
    plain = JobBook(max_uncommitted=100)
    for o in range(3):
        plain.accept(record(0, o, value=sample_value(f"x#{o}", o)))
    plain.start_buffered(1, no_task)
    assert len(plain.jobs) == 1, "without `together` the room is the limit"


def test_a_span_stops_the_siblings_too() -> None:
    book = JobBook(max_uncommitted=2)
    for o in range(4):
        book.accept(record(0, o, value=sample_value(f"x#{o}", o)))
    book.start_buffered(1, no_task, together=8, family=family)
    assert len(book.jobs) == 2 and book.head_blocked(0)


def test_a_record_past_its_span_waits_and_does_not_count_as_startable() -> None:
    book = JobBook(max_uncommitted=2)
    for o in range(3):
        book.accept(record(0, o))
    assert book.span_full(0)
    book.start_buffered(10, no_task)
    assert sorted(book.jobs) == [(0, 0), (0, 1)]
    assert book.head_blocked(0) and book.startable() == 0 and book.waiting == 1


def test_finished_jobs_move_the_commit_position_in_order() -> None:
    book = JobBook(max_uncommitted=100)
    for o in range(3):
        book.accept(record(0, o))
    book.start_buffered(3, no_task)
    book.finish(book.jobs[(0, 1)])
    assert book.committable() == {0: 0}
    assert book.done_uncommitted == {0: {1}}
    book.finish(book.jobs[(0, 0)])
    assert book.committable() == {0: 2}
    book.committed({0: 2})
    assert book.done_uncommitted == {0: set()}
    assert not book.commit_urgent()


def test_a_revoked_job_becomes_an_orphan_that_the_refetched_record_adopts() -> None:
    book = JobBook(max_uncommitted=100)
    for o in range(3):
        book.accept(record(0, o))
    book.start_buffered(2, no_task)
    book.finish(book.jobs[(0, 1)])  # done, not committable (offset 0 pending)
    orphan = book.jobs[(0, 0)]
    book.revoke({0})
    assert not book.jobs and not book.buffered and book.tracker.assigned == frozenset()
    assert book.orphans == {(0, 0): orphan} and book.finished_orphans == {(0, 1)}
    assert book.assign({0}) == []
    for o in range(3):
        book.accept(record(0, o))
    assert book.jobs == {(0, 0): orphan}  # adopted, not started again
    assert book.finished_orphans == set()  # finished meanwhile: skipped, done
    assert book.committable() == {0: 0} and book.waiting == 1


def test_a_partition_is_adopting_until_the_records_of_its_orphans_are_fetched_again() -> None:
    book = JobBook(max_uncommitted=100)
    for p in (0, 1, 2):
        for o in range(2):
            book.accept(record(p, o))
    book.start_buffered(6, no_task)
    book.finish(book.jobs[(1, 0)])
    book.revoke({0, 1, 2})
    assert book.adopting() == set()  # revoked: not assigned, nothing to fetch
    book.assign({1, 2})
    assert book.adopting() == {1, 2}  # 1: one finished orphan and one running, 2: two running
    book.accept(record(1, 0))
    assert book.adopting() == {1, 2}  # (1, 1) still waits
    book.accept(record(1, 1))
    assert book.adopting() == {2}
    book.accept(record(2, 0))
    assert book.adopting() == {2}  # (2, 1) still waits
    book.accept(record(2, 1))
    assert book.adopting() == set()


def test_orphans_of_partitions_that_moved_away_are_handed_back_to_be_cancelled() -> None:
    book = JobBook(max_uncommitted=100)
    book.accept(record(0, 0))
    book.accept(record(1, 0))
    book.start_buffered(2, no_task)
    book.revoke({0, 1})
    gone = book.assign({1})
    assert [job.key for job in gone] == [(0, 0)]
    assert list(book.orphans) == [(1, 0)]
    assert book.tracker.assigned == {1}


def test_clear_forgets_all_work_and_reset_the_offsets() -> None:
    book = JobBook(max_uncommitted=100)
    book.accept(record(0, 0))
    book.accept(record(0, 1))
    book.start_buffered(1, no_task)
    assert len(book.all_jobs()) == 1
    book.clear()
    assert not book.all_jobs() and book.waiting == 0
    assert book.tracker.assigned == {0}
    book.reset_offsets()
    assert book.tracker.assigned == frozenset()


def test_records_a_result_answers_are_skipped_and_committed_past() -> None:
    """The group's committed offsets expired (consumers.positions.recovery): a record whose result is in
    Kafka is not started, and the commit position moves past it; the others start."""
    book = JobBook(max_uncommitted=100)
    book.answered = Answered({0: {0: "k", 1: "k", 3: "k", 4: "another id"}, 1: {}})
    for p, o in [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]:
        book.accept(record(p, o))
    assert {p: [r.offset for r in q] for p, q in book.buffered.items()} == {0: [2], 1: [0]}
    assert book.committable() == {0: 2, 1: 0}, "past the answered prefix, up to the first unanswered"
    book.start_buffered(2, no_task)
    book.finish(book.jobs[(0, 2)])
    assert book.committable()[0] == 4, "and past the answered record after it"
    assert book.answered.skipped == 3 and len(book.answered) == 4 and book.answered.partitions == [0, 1]
    book.accept(record(0, 4))  # a result names this offset, but of another id: generated
    assert [r.offset for r in book.buffered[0]] == [4] and book.answered.skipped == 3
