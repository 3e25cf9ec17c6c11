"""The export's first pass: per record id, the winning line, duplicates, prompt conflicts and
records of other runs. Pure (fed the lines of :func:`sinks.export.sources.read_object`).

Foreign records are left out first; per id the latest ``attempt`` wins (with ``keep="best"`` the
quality class ranks first), then a completion over an error, then the earliest offset
(:func:`sinks.export.sources.rank`). Prompts of one id and turn that differ are a conflict
(:func:`streams.records.prompt_identity` within an attempt, :func:`streams.records.content_identity`
across attempts). The rules: docs/export.md, "Deduplication". Memory: about 300 bytes per id.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sinks.export.sources import Keep, Rank, RecordHead, attempt_of, is_foreign, rank, where
from sinks.layout import Line
from streams.records import content_identity, prompt_identity

__all__ = ["IdIndex"]

_Origin = tuple[bytes, bytes, str, int, int, int]
"""(content identity, prompt identity, topic, partition, offset, attempt) of an id's first record
with a prompt."""


@dataclass
class IdIndex:
    """What the first pass learns about the run's records (module docstring).

    Args:
        run_id: the exported run; records of other runs are foreign.
        list_cap: how many foreign records are listed with their sources.
    """

    run_id: str
    list_cap: int
    keep: Keep = "latest"
    """which record of an id wins (:data:`sinks.export.sources.Keep`)."""
    winners: dict[str, Rank] = field(default_factory=dict)
    """id → the rank of its winning line (:meth:`take_winner` removes it in the second pass)."""
    kinds_seen: dict[str, int] = field(default_factory=dict)
    """id → (lines << 2) | 1 if a completion | 2 if an error."""
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    superseded: set[str] = field(default_factory=set)
    """ids with records of more than one attempt."""
    superseded_records: int = 0
    """after the first pass (:meth:`end_of_pass`): records of an attempt other than the one kept
    for their id (with ``keep="latest"``: older attempts a regeneration superseded)."""
    lines_total: int = 0
    lines_by_kind: Counter[str] = field(default_factory=Counter)
    lines_by_attempt: Counter[int] = field(default_factory=Counter)
    latest_attempt: dict[str, int] = field(default_factory=dict)
    """id → the latest attempt it has a record of, for the ids with an attempt > 0."""
    """records of the run (foreign ones left out) per ``attempt``, kept or not."""
    foreign: list[dict[str, Any]] = field(default_factory=list)
    """the first ``list_cap`` foreign records with their sources."""
    foreign_runs: Counter[str] = field(default_factory=Counter)
    """run id → foreign records of it."""
    _origins: dict[tuple[str, int], _Origin] = field(default_factory=dict)
    _conflicting: set[str] = field(default_factory=set)
    _attempt_lines: dict[str, Counter[int]] = field(default_factory=dict)
    """id → records per attempt, for the ids in :attr:`superseded` only (the others have one)."""

    def add(self, line: Line, head: RecordHead) -> None:
        """Count one line of a source object."""
        record_id = head.id
        self.lines_total += 1
        self.lines_by_kind[line.kind] += 1
        if is_foreign(head, self.run_id):  # counted and reported, never part of the dataset
            assert head.run_id is not None
            self.foreign_runs[head.run_id] += 1
            if len(self.foreign) < self.list_cap:
                self.foreign.append(
                    {"id": record_id, "run_id": head.run_id, "kind": line.kind}
                    | where(line.topic, line.partition, line.offset, head.attempt)
                )
            return
        self.lines_by_attempt[head.attempt] += 1
        if head.attempt > self.latest_attempt.get(record_id, 0):
            self.latest_attempt[record_id] = head.attempt
        this = self._rank(line, head)
        best = self.winners.get(record_id)
        if best is None or this < best:
            self.winners[record_id] = this
        per_attempt = self._attempt_lines.get(record_id)
        if per_attempt is None and best is not None and attempt_of(best) != attempt_of(this):
            self.superseded.add(record_id)
            # every earlier record of the id had the attempt of its winner so far
            earlier = self.kinds_seen[record_id] >> 2
            per_attempt = self._attempt_lines[record_id] = Counter({attempt_of(best): earlier})
        if per_attempt is not None:
            per_attempt[head.attempt] += 1
        bits = self.kinds_seen.get(record_id, 0) | (1 if line.kind == "completion" else 2)
        self.kinds_seen[record_id] = bits + 4
        if head.prompt is None:
            return
        content = bytes.fromhex(content_identity(head.prompt))
        identity = bytes.fromhex(prompt_identity(head.prompt))
        turn = head.prompt.metadata.extra.get("turn", 1)
        key = (record_id, turn if isinstance(turn, int) else 1)
        origin = self._origins.get(key)
        if origin is None:
            self._origins[key] = (
                content,
                identity,
                line.topic,
                line.partition,
                line.offset,
                head.attempt,
            )
            return
        differs = origin[0] != content or (origin[5] == head.attempt and origin[1] != identity)
        if differs and record_id not in self._conflicting:
            self._conflicting.add(record_id)
            self.conflicts.append(
                {
                    "id": record_id,
                    "first": where(*origin[2:]),
                    "second": where(line.topic, line.partition, line.offset, head.attempt),
                }
            )

    def end_of_pass(self) -> None:
        """Count :attr:`superseded_records` (the winners are known now) and drop what only the
        first pass needs (the prompt identities, the records per attempt)."""
        self.superseded_records = sum(
            n
            for record_id, per_attempt in self._attempt_lines.items()
            for attempt, n in per_attempt.items()
            if attempt != attempt_of(self.winners[record_id])
        )
        self._attempt_lines.clear()
        self._origins.clear()

    def take_winner(self, line: Line, head: RecordHead) -> bool:
        """Whether ``line`` is its id's winner, not yet taken (second pass). A foreign record never
        wins; an exact duplicate line (same offset) wins once."""
        if is_foreign(head, self.run_id):
            return False
        if self.winners.get(head.id) != self._rank(line, head):
            return False
        self.winners.pop(head.id)
        return True

    def _rank(self, line: Line, head: RecordHead) -> Rank:
        return rank(
            line.kind,
            head.attempt,
            line.offset,
            line.topic,
            line.partition,
            quality=head.quality,
            keep=self.keep,
        )

    @property
    def present(self) -> set[str]:
        """The ids of the run that have a record."""
        return set(self.kinds_seen)

    @property
    def unwritten(self) -> set[str]:
        """After the second pass: the ids whose winner it did not take (an object that read in
        the first pass and not in the second)."""
        return set(self.winners)

    @property
    def foreign_count(self) -> int:
        """Foreign records, all runs together."""
        return sum(self.foreign_runs.values())

    def duplicates(self) -> dict[str, int]:
        """The manifest's ``duplicates``: records dropped (every record of the run not in the
        dataset), ids with more than one record, ids whose completion beat an error, ids
        re-generated (older attempts dropped), and of the records dropped those of another attempt
        than their id's kept one (``superseded_records``, after :meth:`end_of_pass`: the rest are
        copies of the kept attempt)."""
        return {
            "records_dropped": self.lines_total - self.foreign_count - len(self.kinds_seen),
            "ids": sum(1 for info in self.kinds_seen.values() if info >> 2 > 1),
            "completion_beat_error": sum(1 for info in self.kinds_seen.values() if info & 3 == 3),
            "older_attempts_dropped": len(self.superseded),
            "superseded_records": self.superseded_records,
        }
