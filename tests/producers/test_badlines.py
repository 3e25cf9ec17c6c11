"""The bad-lines report: created only when a line is bad, the first lines shown, every line written."""

from __future__ import annotations

import json
from pathlib import Path

from producers.reading.badlines import BadLineReport, id_of_bad_row
from streams.inputs import MappingOptions


def test_no_bad_line_no_report_file(tmp_path: Path) -> None:
    shown: list[str] = []
    report = BadLineReport(tmp_path / "bad.jsonl", echo=shown.append)
    report.close()
    assert not (tmp_path / "bad.jsonl").exists()
    assert shown == []
    assert report.count == 0


def test_rows_are_written_and_only_the_first_are_shown(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("left over from an earlier run\n")
    shown: list[str] = []
    report = BadLineReport(path, echo=shown.append, shown=2)
    report.add("a.jsonl", 3, "invalid JSON", None)
    report.add("a.jsonl", 7, "duplicate id, first seen at line 1", "q-1")
    report.add("b.jsonl", 1, "row is an array, expected a JSON object")
    report.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [
        {"file": "a.jsonl", "line": 3, "reason": "invalid JSON"},
        {"file": "a.jsonl", "line": 7, "reason": "duplicate id, first seen at line 1", "id": "q-1"},
        {"file": "b.jsonl", "line": 1, "reason": "row is an array, expected a JSON object"},
    ]
    assert shown == [
        "bad line a.jsonl:3: invalid JSON",
        "bad line a.jsonl:7: duplicate id, first seen at line 1",
        "... and 1 more bad lines",
        f"bad-lines report: {path} (3 rows)",
    ]
    assert report.count == 3


def test_the_id_of_a_bad_row_comes_from_its_id_fields() -> None:
    plain = MappingOptions()
    assert id_of_bad_row(b'{"id": "a", "messages": []}', plain) == "a"
    assert id_of_bad_row(b'{"custom_id": "c", "id": "a"}', plain) == "c"
    assert id_of_bad_row(b'{"question_id": 81}', plain) == "81"
    assert id_of_bad_row(b'{"key": "k", "id": "a"}', MappingOptions(id_field="key")) == "k"
    assert id_of_bad_row(b'{"id": true}', plain) is None
    assert id_of_bad_row(b'{"id": 1.5}', plain) is None
    assert id_of_bad_row(b"[1, 2]", plain) is None
    assert id_of_bad_row(b"{not json", plain) is None
    assert id_of_bad_row(b'{"id": "\xff"}', plain) is None
