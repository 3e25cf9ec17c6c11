"""The export's first pass (:mod:`sinks.export.index`): winners, duplicates, conflicts and
foreign records. Milliseconds, no services."""

from __future__ import annotations

import msgspec

from sinks.export.index import IdIndex
from sinks.export.sources import RecordHead
from sinks.layout import Line, LineKind
from streams.records import GenerationParams, PromptMetadata, PromptRecord


def _prompt(text: str, max_tokens: int | None = None) -> PromptRecord:
    return PromptRecord(
        id="a",
        messages=[{"role": "user", "content": text}],
        params=GenerationParams(max_tokens=max_tokens),
        metadata=PromptMetadata(source="t", line=1),
    )


def _line(kind: LineKind, offset: int, topic: str = "c") -> Line:
    return Line(
        topic=topic, partition=0, offset=offset, timestamp_ms=0, key="a", kind=kind, value=msgspec.Raw(b"{}")
    )


def test_the_latest_attempt_then_a_completion_then_the_earliest_offset_wins() -> None:
    index = IdIndex("r", 10)
    lines = [
        (_line("completion", 5), RecordHead("a", attempt=0, run_id="r")),
        (_line("error", 3, "e"), RecordHead("a", attempt=1, run_id="r")),
        (_line("completion", 9), RecordHead("a", attempt=1, run_id="r")),
        (_line("completion", 7), RecordHead("a", attempt=1, run_id="r")),
    ]
    for line, head in lines:
        index.add(line, head)
    index.end_of_pass()
    assert [index.take_winner(line, head) for line, head in lines] == [False, False, False, True]
    assert not index.take_winner(*lines[3]), "an exact duplicate line is written once"
    assert index.duplicates() == {
        "records_dropped": 3,
        "ids": 1,
        "completion_beat_error": 1,
        "older_attempts_dropped": 1,
        "superseded_records": 1,
    }
    assert index.present == {"a"} and index.conflicts == []


def test_records_of_a_superseded_attempt_are_told_from_copies_of_the_kept_one() -> None:
    """Issue 30 item 3: the main job's summary called a regeneration's superseded attempts
    "duplicates". Of the records dropped, those of another attempt than the kept one are counted
    apart, each once, however many copies an attempt has and in whatever order they come."""
    heads = [("a", 0), ("a", 0), ("b", 0), ("a", 1), ("a", 0), ("a", 1), ("b", 0), ("c", 2), ("c", 1)]
    index = IdIndex("r", 10)
    for offset, (record_id, attempt) in enumerate(heads):
        index.add(_line("completion", offset), RecordHead(record_id, attempt=attempt, run_id="r"))
    index.end_of_pass()
    dup = index.duplicates()
    assert dup["records_dropped"] == 6 and dup["older_attempts_dropped"] == 2
    assert dup["superseded_records"] == 4, "a's 3 attempt-0 records and c's attempt 1, not a's or b's copies"


def test_different_prompts_under_one_id_are_one_conflict() -> None:
    index = IdIndex("r", 10)
    index.add(_line("completion", 1), RecordHead("a", prompt=_prompt("x")))
    index.add(_line("completion", 2), RecordHead("a", prompt=_prompt("x")))
    index.add(_line("completion", 3), RecordHead("a", prompt=_prompt("y")))
    index.add(_line("completion", 4), RecordHead("a", prompt=_prompt("z")))
    assert index.conflicts == [
        {
            "id": "a",
            "first": {"topic": "c", "partition": 0, "offset": 1, "attempt": 0},
            "second": {"topic": "c", "partition": 0, "offset": 3, "attempt": 0},
        }
    ]


def test_a_regenerated_attempt_may_change_the_parameters_not_the_prompt() -> None:
    index = IdIndex("r", 10)
    index.add(_line("completion", 1), RecordHead("a", prompt=_prompt("x", 512)))
    index.add(_line("completion", 2), RecordHead("a", attempt=1, prompt=_prompt("x", 4096)))
    assert index.conflicts == [], "new parameters in a new attempt are a regeneration"
    index.add(_line("completion", 3), RecordHead("a", attempt=0, prompt=_prompt("x", 1024)))
    assert [c["second"]["offset"] for c in index.conflicts] == [3], "two requests in one attempt"
    other = IdIndex("r", 10)
    other.add(_line("completion", 1), RecordHead("a", prompt=_prompt("x", 512)))
    other.add(_line("completion", 2), RecordHead("a", attempt=1, prompt=_prompt("y", 512)))
    assert [c["second"]["attempt"] for c in other.conflicts] == [1], "another prompt in a new attempt"


def test_records_of_another_run_are_counted_listed_up_to_the_cap_and_never_win() -> None:
    index = IdIndex("r", 1)
    foreign = [(_line("completion", n), RecordHead("a", run_id="other")) for n in (1, 2)]
    for line, head in foreign:
        index.add(line, head)
    assert index.foreign_count == 2 and index.foreign_runs == {"other": 2}
    assert index.foreign == [
        {"id": "a", "run_id": "other", "kind": "completion", "topic": "c", "partition": 0, "offset": 1}
        | {"attempt": 0}
    ]
    assert index.present == set() and not index.take_winner(*foreign[0])
    assert index.duplicates()["records_dropped"] == 0


def test_keep_best_prefers_an_unflagged_completion_then_the_latest_attempt() -> None:
    lines = [
        (_line("completion", 1), RecordHead("a", attempt=0, run_id="r")),
        (_line("completion", 2), RecordHead("a", attempt=1, run_id="r", quality=["repetition_loop"])),
        (_line("error", 3, "e"), RecordHead("a", attempt=2, run_id="r")),
    ]
    for keep, winner in (("latest", 2), ("best", 0)):
        index = IdIndex("r", 10, keep)  # type: ignore[arg-type]
        for line, head in lines:
            index.add(line, head)
        index.end_of_pass()
        assert [index.take_winner(line, head) for line, head in lines].index(True) == winner, keep
        assert index.lines_by_attempt == {0: 1, 1: 1, 2: 1}
        assert index.duplicates()["superseded_records"] == 2, "the attempts not kept, whichever it is"
    flagged = IdIndex("r", 10, "best")
    for line, head in lines[1:]:
        flagged.add(line, head)
    flagged.end_of_pass()
    assert [flagged.take_winner(line, head) for line, head in lines[1:]] == [True, False], (
        "flagged beats an error"
    )


def test_a_next_turn_asks_more_than_its_turn_without_a_conflict() -> None:
    def turn(messages: list[str], n: int) -> PromptRecord:
        return PromptRecord(
            id="a",
            messages=[{"role": "user", "content": m} for m in messages],
            metadata=PromptMetadata(source="t", line=1, extra={"turn": n} if n > 1 else {}),
        )

    index = IdIndex("r", 10)
    index.add(_line("completion", 1), RecordHead("a", prompt=turn(["q1"], 1)))
    index.add(_line("completion", 2), RecordHead("a", attempt=1, prompt=turn(["q1", "q2"], 2)))
    assert index.conflicts == [], "turn 2 extends turn 1"
    index.add(_line("completion", 3), RecordHead("a", attempt=2, prompt=turn(["q1", "other"], 2)))
    assert [c["second"]["offset"] for c in index.conflicts] == [3], "two different turns 2"
