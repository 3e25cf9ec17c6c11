"""Where a partition resumes after an assignment: rule 4 of docs/sink.md, "S3 wins". Pure.

After the end of the partition's last object in S3 (its first offset still in Kafka when the folder is
empty or ends below it), whatever the group's committed offset says. :class:`Recovery` also names the
offsets of a commit ahead of S3 (written again from Kafka) and those Kafka no longer holds
(retention: the export reports the gap); the runner logs both, then seeks and commits as it says.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Recovery", "plan_recovery"]


@dataclass(frozen=True)
class Recovery:
    """The outcome of :func:`plan_recovery` (all offsets are Kafka offsets of the partition).

    Attributes:
        position: the offset to seek to: the first one not in S3.
        rewritten: ``(first, last)`` inclusive, committed by the group but not in S3: written
            again; ``None`` when the commit is not ahead of S3.
        lost: ``(first, last)`` inclusive, after the objects' end but below Kafka's first offset
            (retention): they cannot be written; ``None`` when there is no such range.
        commit: whether to commit ``position`` (the group's commit differs from it, and there is
            something to say: a commit exists or the position is past 0).
    """

    position: int
    rewritten: tuple[int, int] | None
    lost: tuple[int, int] | None
    commit: bool


def plan_recovery(*, s3_next: int | None, committed: int | None, log_start: int) -> Recovery:
    """Where to resume a partition.

    Args:
        s3_next: the end offset + 1 of its object with the highest start offset, ``None`` when its
            folder holds no object.
        committed: the group's committed offset, ``None`` when it has none.
        log_start: the partition's first offset still in Kafka.
    """
    position = max(s3_next if s3_next is not None else log_start, log_start)
    rewritten = (position, committed - 1) if committed is not None and committed > position else None
    lost = (s3_next, log_start - 1) if s3_next is not None and s3_next < log_start else None
    commit = committed != position and (committed is not None or position > 0)
    return Recovery(position, rewritten, lost, commit)
