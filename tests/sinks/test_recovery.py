"""Where a partition resumes (:mod:`sinks.recovery`, rule 4 "S3 wins"): milliseconds, no services."""

from __future__ import annotations

import pytest

from sinks.recovery import Recovery, plan_recovery


@pytest.mark.parametrize(
    ("s3_next", "committed", "log_start", "expected"),
    [
        (None, None, 0, Recovery(0, None, None, False)),  # a fresh partition: nothing to commit
        (None, None, 40, Recovery(40, None, None, True)),  # retention moved the start: commit it
        (100, 100, 0, Recovery(100, None, None, False)),  # commit and S3 agree
        (100, 60, 0, Recovery(100, None, None, True)),  # commit behind S3: S3 wins, no re-write
        (100, None, 0, Recovery(100, None, None, True)),
        (60, 100, 0, Recovery(60, (60, 99), None, True)),  # objects gone: written again
        (None, 100, 0, Recovery(0, (0, 99), None, True)),  # the folder was emptied
        (50, 50, 80, Recovery(80, None, (50, 79), True)),  # retention ate 50..79
        (50, 120, 80, Recovery(80, (80, 119), (50, 79), True)),
    ],
)
def test_s3_wins_over_the_committed_offset_in_both_directions(
    s3_next: int | None, committed: int | None, log_start: int, expected: Recovery
) -> None:
    assert plan_recovery(s3_next=s3_next, committed=committed, log_start=log_start) == expected
