"""The consumer's book of work: every prompt record it fetched, from the fetch to the commit.

A record is *buffered* (fetched, not started), then a *job* (started), then done (its result
acknowledged); across a revoke a job becomes an *orphan* that the re-fetched record adopts. Nothing
fetched is dropped unaccounted for. Counts are prompts; offsets are Kafka offsets
(:class:`consumers.positions.offsets.OffsetTracker`'s). Not thread-safe: one event loop's state,
no ``await`` inside.

Design: docs/consumer.md, "The book of work".
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from aiokafka import ConsumerRecord

from consumers.positions.offsets import OffsetTracker
from consumers.positions.recovery import Answered
from streams.audit_trace import audit_trace

__all__ = ["Job", "JobBook", "JobKey"]

JobKey = tuple[int, int]
"""(partition, offset) of a prompt record."""


@dataclass
class Job:
    """One prompt being generated: its Kafka record and the task working on it."""

    record: ConsumerRecord[bytes, bytes]
    fetched_at: float
    """Unix seconds when it was started (its completion's ``queued_s`` counts from here)."""
    task: asyncio.Task[None] | None = None
    answered: bool = False
    """the server's answer is in (its result is being written to Kafka): it holds no server slot."""
    lent_to: str | None = None
    """the other member's server it was sent to (:mod:`consumers.lending`); None: this consumer's."""

    @property
    def key(self) -> JobKey:
        """(partition, offset) of its record."""
        return (self.record.partition, self.record.offset)


class JobBook:
    """Buffered records, jobs and orphans of one consumer, and their offsets.

    Args:
        max_uncommitted: prompts a partition may run past its committed offset (its span).
    """

    def __init__(self, max_uncommitted: int) -> None:
        self.max_uncommitted = max_uncommitted
        self.tracker = OffsetTracker()
        self.jobs: dict[JobKey, Job] = {}
        """started prompts of assigned partitions, by (partition, offset)."""
        self.buffered: dict[int, deque[ConsumerRecord[bytes, bytes]]] = {}
        """fetched, tracked, not started yet (window full, server down, span limit), per partition."""
        self.orphans: dict[JobKey, Job] = {}
        """started prompts of revoked partitions, kept running until the next assignment."""
        self.finished_orphans: set[JobKey] = set()
        """prompts finished while their partition was revoked: not to be generated again."""
        self.done_uncommitted: dict[int, set[int]] = {}
        """per partition, offsets done but not committed yet (a lower offset is pending)."""
        self.answered: Answered | None = None
        """prompt records answered before the group's committed offsets were lost: skipped
        (:mod:`consumers.positions.recovery`)."""

    @property
    def in_flight(self) -> int:
        """Prompts started on assigned partitions whose server answer is not in yet: what holds
        a place in the window (a prompt whose result is being written to Kafka, or one lent to
        another member's server, does not)."""
        return sum(1 for job in self.jobs.values() if not job.answered and job.lent_to is None)

    @property
    def lent(self) -> int:
        """Prompts of assigned partitions lent to other members' servers, answer not in yet."""
        return sum(1 for job in self.jobs.values() if not job.answered and job.lent_to is not None)

    @property
    def waiting(self) -> int:
        """Prompts fetched and not started yet."""
        return sum(len(q) for q in self.buffered.values())

    def startable(self) -> int:
        """Buffered prompts that may start as soon as the window has room (not behind a full span)."""
        return sum(len(q) for p, q in self.buffered.items() if not self.head_blocked(p))

    def all_jobs(self) -> list[Job]:
        """Every started prompt: the jobs, then the orphans."""
        return list(self.jobs.values()) + list(self.orphans.values())

    def adopting(self) -> set[int]:
        """Assigned partitions holding orphans (running or finished) that wait for their records
        to be fetched again: until then their results cannot be committed."""
        keys = list(self.orphans) + list(self.finished_orphans)
        return {p for p, _ in keys if p in self.tracker.assigned}

    def head_blocked(self, partition: int) -> bool:
        """Whether the first queued record of ``partition`` lies past its uncommitted span."""
        queue = self.buffered.get(partition)
        if not queue or partition not in self.tracker.assigned:
            return False
        base = self.tracker.base(partition)
        return base is not None and queue[0].offset >= base + self.max_uncommitted

    def span_full(self, partition: int) -> bool:
        """Whether ``partition`` was fetched up to ``max_uncommitted`` past its span's base."""
        if partition not in self.tracker.assigned:
            return False
        base, end = self.tracker.base(partition), self.tracker.fetched_end(partition)
        return base is not None and end is not None and end >= base + self.max_uncommitted

    def accept(self, record: ConsumerRecord[bytes, bytes]) -> None:
        """Take a fetched record: track it, then adopt its orphan, skip it if an orphan already
        finished it or a result answers it (:attr:`answered`), or queue it to start. Never drops a
        record it has not accounted for."""
        p, o = record.partition, record.offset
        if p not in self.tracker.assigned:  # returned before on_partitions_assigned ran
            self.tracker.assign(p)
        if self.tracker.seen(p, o):
            return  # fetched again after a seek: already in flight, done, or queued
        self.tracker.track(p, o)
        key = (p, o)
        if key in self.finished_orphans:
            self.finished_orphans.discard(key)
            self.tracker.done(p, o)
            self.done_uncommitted.setdefault(p, set()).add(o)
            return
        orphan = self.orphans.pop(key, None)
        if orphan is not None:
            self.jobs[key] = orphan
            return
        if self.answered is not None and self.answered.covers(p, o, record.key):
            audit_trace("generate").event("answered", src=[p, o])  # its result was read in Kafka
            self.tracker.done(p, o)  # its result is in Kafka: commit past it, never generate it
            self.done_uncommitted.setdefault(p, set()).add(o)
            return
        self.buffered.setdefault(p, deque()).append(record)

    def start_buffered(
        self,
        room: int,
        start: Callable[[Job], asyncio.Task[None]],
        *,
        together: int = 0,
        family: Callable[[ConsumerRecord[bytes, bytes]], Hashable | None] = lambda record: None,
    ) -> None:
        """Start up to ``room`` queued records, oldest first per partition and round-robin over
        partitions, each within its partition's span: ``start(job)`` returns the job's task.

        With ``together`` > 0, a started record whose ``family`` is not None takes along the
        records of the same family queued right behind it, past ``room`` if need be, at most
        ``together`` in all (a prompt's samples that may share one request: docs/consumer.md,
        "Parallel samples")."""
        while room > 0:
            started = False
            for p, queue in list(self.buffered.items()):
                if not queue or room <= 0:
                    continue
                if self.head_blocked(p):
                    continue
                kin = family(queue[0]) if together > 0 else None
                taken = 0
                while True:
                    self._start(queue.popleft(), start)
                    room -= 1
                    taken += 1
                    if kin is None or taken >= together or not queue or self.head_blocked(p):
                        break
                    if family(queue[0]) != kin:
                        break
                self.buffered[p] = self.buffered.pop(p)  # served: to the back of the round
                started = True
            if not started:
                break
        for p in [p for p, q in self.buffered.items() if not q]:
            del self.buffered[p]

    def _start(
        self, record: ConsumerRecord[bytes, bytes], start: Callable[[Job], asyncio.Task[None]]
    ) -> None:
        job = Job(record=record, fetched_at=time.time())
        job.task = start(job)
        self.jobs[job.key] = job

    def finish(self, job: Job) -> None:
        """The job's result is durably in Kafka: let the commit position move past it (an
        orphan's: remember it is finished)."""
        p, o = job.key
        if self.jobs.get(job.key) is job:
            del self.jobs[job.key]
            if self.tracker.is_pending(p, o):
                self.tracker.done(p, o)
                self.done_uncommitted.setdefault(p, set()).add(o)
        elif self.orphans.get(job.key) is job:
            del self.orphans[job.key]
            self.finished_orphans.add(job.key)

    def revoke(self, parts: set[int]) -> None:
        """``parts`` were revoked: their started prompts become orphans (:meth:`forget`)."""
        self.forget(parts, keep_orphans=True)

    def assign(self, parts: set[int]) -> list[Job]:
        """``parts`` are the new assignment: register the new ones, forget the others, and
        return the orphans of partitions that moved away (the caller cancels them)."""
        for p in parts - self.tracker.assigned:
            self.tracker.assign(p)
        self.forget(self.tracker.assigned - parts, keep_orphans=False)
        gone = [job for key, job in self.orphans.items() if key[0] not in parts]
        for job in gone:
            self.orphans.pop(job.key, None)
        self.finished_orphans = {(p, o) for (p, o) in self.finished_orphans if p in parts}
        return gone

    def forget(self, parts: set[int] | frozenset[int], *, keep_orphans: bool) -> None:
        """Stop tracking ``parts``: their started prompts become orphans (or are cancelled),
        their fetched-but-unstarted records are dropped (the next owner fetches them again:
        nothing was committed past them)."""
        for key in [k for k in self.jobs if k[0] in parts]:
            job = self.jobs.pop(key)
            if keep_orphans:
                self.orphans[key] = job
            elif job.task is not None:
                job.task.cancel()
        for p in parts:
            self.buffered.pop(p, None)
            # Finished but not committable yet (a lower offset was pending): never generate them again.
            done = self.done_uncommitted.pop(p, set())
            if keep_orphans:
                self.finished_orphans |= {(p, o) for o in done}
        self.tracker.revoke(parts & self.tracker.assigned)

    def clear(self) -> None:
        """Forget all work (the consumer left the group; its tasks were cancelled first). The
        offsets stay until :meth:`reset_offsets`."""
        self.jobs.clear()
        self.buffered.clear()
        self.orphans.clear()
        self.finished_orphans.clear()
        self.done_uncommitted.clear()

    def reset_offsets(self) -> None:
        """Forget every partition's offsets (a new tracker)."""
        self.tracker = OffsetTracker()

    def committable(self, partitions: set[int] | None = None) -> dict[int, int]:
        """partition → offset that may be committed, for ``partitions`` (None: all)."""
        return {p: o for p, o in self.tracker.committable().items() if partitions is None or p in partitions}

    def commit_urgent(self) -> bool:
        """Whether a partition's committable position is half of ``max_uncommitted`` past its
        span's base (commit now, so the span limit does not throttle a fast partition)."""
        for p, position in self.tracker.committable().items():
            base = self.tracker.base(p)
            if base is not None and position - base >= self.max_uncommitted // 2:
                return True
        return False

    def committed(self, offsets: dict[int, int]) -> None:
        """Kafka stored ``offsets`` (partition → offset): move the spans of assigned partitions."""
        for p, o in offsets.items():
            if p not in self.tracker.assigned:
                continue
            self.tracker.mark_committed(p, o)
            done = self.done_uncommitted.get(p)
            if done:
                self.done_uncommitted[p] = {x for x in done if x >= o}
