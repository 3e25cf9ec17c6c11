"""Reading rows whatever holds them: JSON arrays (streamed), Parquet files, folders of any of them, and
the bundled ShareGPT sample; the export's expected ids read them the same way. No Kafka, no S3."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sinks.export.expected import prompt_ids_from_inputs
from streams.errors import ConfigError, InputError
from streams.inputs import (
    InputSpec,
    MappingOptions,
    Row,
    open_input,
    parse_line,
    read_rows,
    resolve_inputs,
)
from streams.inputs.jsonarray import ArraySplitter
from streams.records import PromptRecord

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

AUTO = MappingOptions()
QUESTION = MappingOptions(prompt_field="question", keep_fields=("answer",))


def no_s3() -> S3Client:
    raise AssertionError("S3 must not be asked for local inputs")


def spec_of(path: Path) -> InputSpec:
    return InputSpec(path.name, "file", str(path.resolve()), path.stat().st_size)


def rows_of(path: Path, *, limit: int | None = None) -> tuple[str, list[Row]]:
    """(container, rows) of a local file."""
    with open_input(spec_of(path), no_s3) as opened:
        return opened.container, list(read_rows(opened, source=path.name, limit=limit))


def records(path: Path, options: MappingOptions = AUTO) -> list[PromptRecord | InputError]:
    """Each row of ``path`` parsed as the producer does (an error in place of a bad row)."""
    out: list[PromptRecord | InputError] = []
    for number, row in enumerate(rows_of(path)[1], 1):
        assert row.text is not None
        try:
            out.append(parse_line(row.text, source=path.name, line=number, options=options))
        except InputError as exc:
            out.append(exc)
    return out


# --- JSON arrays ---------------------------------------------------------------------------------


def test_a_json_array_is_read_element_by_element_numbered_from_one(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    rows = [{"id": f"r{i}", "prompt": f"question {i}"} for i in range(5)]
    path.write_text(json.dumps(rows, indent=2))
    container, got = rows_of(path)
    assert container == "json_array"
    assert [json.loads(r.text or b"") for r in got] == rows
    data = path.read_bytes()
    assert b"".join(r.raw for r in got) == data[: sum(r.size for r in got)], (
        "raw bytes are the file's, in order"
    )
    assert data[sum(r.size for r in got) :].strip() == b"]"
    parsed = records(path)
    assert [(r.id, r.metadata.line) for r in parsed if isinstance(r, PromptRecord)] == [
        (f"r{i}", i + 1) for i in range(5)
    ]


def test_a_gzipped_array_with_bom_and_a_malformed_element(tmp_path: Path) -> None:
    text = b'\xef\xbb\xbf \n[{"prompt": "a"}, {"prompt": tru}, 7, {"prompt": "d"}]\n'
    path = tmp_path / "rows.json.gz"
    path.write_bytes(gzip.compress(text))
    container, got = rows_of(path)
    assert container == "json_array" and len(got) == 4
    parsed = records(path)
    assert isinstance(parsed[0], PromptRecord) and parsed[0].id == "rows.json.gz:1"
    assert isinstance(parsed[1], InputError) and str(parsed[1]).startswith("rows.json.gz:2: invalid JSON")
    assert isinstance(parsed[2], InputError) and str(parsed[2]) == (
        "rows.json.gz:3: row is a number, expected a JSON object"
    )
    assert isinstance(parsed[3], PromptRecord) and parsed[3].metadata.line == 4


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            b'[{"prompt": "a"} {"prompt": "b"}]',
            "expected ',' or ']' after a record, found '{' at byte 17 (after record 1)",
        ),
        (b'[{"prompt": "a"}, {"prompt": "b"]', "']' closes '{' at byte 32 (after record 1)"),
        (b'[{"prompt": "a"},', "it ends without its closing ']' (after record 1, 17 bytes)"),
        (b'[{"prompt": "a"},]', "a ',' before ']'"),
        (b'[{"prompt": "a"}] []', "'[' after the array's closing ']'"),
    ],
)
def test_a_broken_array_stops_with_the_byte_and_the_last_good_record(
    tmp_path: Path, text: bytes, reason: str
) -> None:
    path = tmp_path / "broken.json"
    path.write_bytes(text)
    with pytest.raises(InputError) as caught:
        rows_of(path)
    assert str(caught.value).startswith("broken.json: not a valid JSON array: ")
    assert reason in str(caught.value)


def test_an_element_over_the_limit_keeps_its_first_bytes_only() -> None:
    splitter = ArraySplitter("big.json", 20)
    data = b'[{"prompt": "' + b"y" * 100 + b'"}, {"prompt": "ok"}]'
    got = [row for i in range(0, len(data), 7) for row in splitter.feed(data[i : i + 7])]
    splitter.close()
    assert got[0] == Row(data[:20], data.index(b"}") + 1, None) and got[0].too_long
    assert got[1].text == b'{"prompt": "ok"}' and not got[1].too_long


def test_strings_with_brackets_and_escapes_cut_anywhere() -> None:
    rows = [{"prompt": 'a "]}[{" \\', "k": [1, {"x": "\\\\"}]}, "s", 1.5, None, [], {}]
    data = json.dumps(rows).encode()
    for chunk in (1, 2, 3, 5, 11, len(data)):
        splitter = ArraySplitter("x.json", None)
        got = [row for i in range(0, len(data), chunk) for row in splitter.feed(data[i : i + chunk])]
        splitter.close()
        assert [json.loads(r.text or b"") for r in got] == rows, chunk


# --- the bundled ShareGPT sample -----------------------------------------------------------------


def test_every_row_of_the_bundled_sharegpt_sample_is_good(sample_data: Path) -> None:
    path = sample_data / "sharegpt" / "glaive_toolcall_en_demo.json"
    parsed = records(path)
    good = [r for r in parsed if isinstance(r, PromptRecord)]
    assert len(good) == len(parsed) == 300
    source = json.loads(path.read_bytes())
    calls = answers = 0
    for record, row in zip(good, source, strict=True):
        assert record.id == f"glaive_toolcall_en_demo.json:{record.metadata.line}"
        tools = [{"type": "function", "function": f} for f in json.loads(row["tools"])]
        assert record.tools == (tools or None)
        assert record.metadata.extra["reference"] == row["conversations"][-1]["value"]
        assert len(record.messages) == len(row["conversations"]) - 1
        for message, turn in zip(record.messages, row["conversations"], strict=False):
            if turn["from"] == "function_call":
                calls += 1
                (call,) = message["tool_calls"]
                value = json.loads(turn["value"])
                assert call["function"]["name"] == value["name"]
                assert json.loads(call["function"]["arguments"]) == value["arguments"]
                pending = call["id"]
            elif turn["from"] == "observation":
                answers += 1
                assert message == {"role": "tool", "tool_call_id": pending, "content": turn["value"]}
    assert calls == answers == 211


# --- Parquet -------------------------------------------------------------------------------------


def write_parquet(path: Path, columns: dict[str, list[Any]], *, row_group_size: int | None = None) -> None:
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)


def test_parquet_rows_take_the_jsonl_mapping_options_and_report_nulls(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    write_parquet(
        path,
        {
            "qid": ["q1", "q2", "q3", None],
            "question": ["What is 2+2?", None, "Why?", "How?"],
            "answer": ["4", "x", None, "so"],
            "meta": [{"level": 1}, None, {"level": 3}, {"level": 4}],
        },
    )
    assert rows_of(path)[0] == "parquet"
    options = MappingOptions(prompt_field="question", id_field="qid", keep_fields=("answer", "meta"))
    got = records(path, options)
    first = got[0]
    assert isinstance(first, PromptRecord)
    assert (first.id, first.messages, first.metadata.line) == (
        "q1",
        [{"role": "user", "content": "What is 2+2?"}],
        1,
    )
    assert first.metadata.extra == {"answer": "4", "meta": {"level": 1}}
    assert str(got[1]) == "train.parquet:2: question is null, expected a string"
    third = got[2]
    assert isinstance(third, PromptRecord) and third.metadata.extra == {"answer": None, "meta": {"level": 3}}
    assert str(got[3]) == "train.parquet:4: id field 'qid' is missing"


def test_a_non_string_prompt_is_a_bad_row_and_derived_ids_count_rows(tmp_path: Path) -> None:
    path = tmp_path / "nums.parquet"
    write_parquet(path, {"question": [1, 2]})
    got = records(path, QUESTION)
    assert [str(e) for e in got] == [
        "nums.parquet:1: question is a number, expected a string",
        "nums.parquet:2: question is a number, expected a string",
    ]
    path = tmp_path / "chat.parquet"
    messages = [[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]]
    write_parquet(path, {"messages": messages * 3}, row_group_size=2)
    chat = records(path, MappingOptions(last_turn="reference"))
    assert [r.id for r in chat if isinstance(r, PromptRecord)] == [f"chat.parquet:{i}" for i in (1, 2, 3)]
    assert all(isinstance(r, PromptRecord) and r.metadata.extra == {"reference": "Yo"} for r in chat)


def test_a_parquet_row_over_the_limit_and_the_raw_bytes_are_its_json(tmp_path: Path) -> None:
    path = tmp_path / "long.parquet"
    write_parquet(path, {"prompt": ["short", "y" * 500]})
    _, got = rows_of(path, limit=100)
    assert got[0] == Row(b'{"prompt":"short"}', 18, b'{"prompt":"short"}')
    assert got[1].too_long and got[1].size == len('{"prompt":""}') + 500 and got[1].text is None


def test_a_folder_stands_for_its_parquet_files_at_any_depth_in_path_order(tmp_path: Path) -> None:
    folder = tmp_path / "dataset"
    (folder / "data").mkdir(parents=True)
    write_parquet(folder / "data" / "train-00001-of-00002.parquet", {"question": ["c", "d"]})
    write_parquet(folder / "data" / "train-00000-of-00002.parquet", {"question": ["a", "b"]})
    (folder / ".gitattributes").write_text("*.parquet filter=lfs\n")  # hidden: not looked at
    specs = resolve_inputs([str(folder)], no_s3)
    assert [Path(s.name).name for s in specs] == [
        "train-00000-of-00002.parquet",
        "train-00001-of-00002.parquet",
    ]
    expected = prompt_ids_from_inputs([str(folder)], QUESTION, no_s3)
    assert expected.ids == {f"train-0000{f}-of-00002.parquet:{n}" for f in (0, 1) for n in (1, 2)}
    assert expected.unreadable == 0


@pytest.mark.parametrize("limit", [0, -3, True])
def test_a_limit_below_one_is_refused(limit: int) -> None:
    with pytest.raises(ConfigError, match="--limit must be at least 1"):
        MappingOptions(limit=limit)


def test_the_export_expects_the_first_limit_rows_as_the_producer_reads_them(tmp_path: Path) -> None:
    folder = tmp_path / "dataset"
    folder.mkdir()
    write_parquet(folder / "a.parquet", {"question": ["a", "b", "c"]})
    (folder / "b.jsonl").write_text(
        '{"question": "d", "id": "d"}\n\n{"nope": 1}\n{"question": "e", "id": "e"}\n'
    )
    write_parquet(folder / "c.parquet", {"question": ["f"]})
    limited = dataclasses.replace(QUESTION, limit=5)  # 3 rows of a, then d, the bad row; not e, not c
    expected = prompt_ids_from_inputs([str(folder)], limited, no_s3)
    assert expected.ids == {"a.parquet:1", "a.parquet:2", "a.parquet:3", "d"} and expected.unreadable == 1
    assert len(prompt_ids_from_inputs([str(folder)], QUESTION, no_s3).ids) == 6


def test_a_folder_reads_every_prompt_file_by_name_or_content_and_refuses_any_other(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    (folder / "deep" / "er").mkdir(parents=True)
    (folder / ".cache").mkdir()
    line = b'{"prompt": "p"}\n'
    (folder / "a.jsonl").write_bytes(line * 2)
    (folder / "b.json").write_text(json.dumps([{"prompt": "x"}, {"prompt": "y"}]))
    write_parquet(folder / "c.parquet", {"prompt": ["q"]})
    (folder / "d.ndjson.gz").write_bytes(gzip.compress(line))
    (folder / "deep" / "er" / "part-00000").write_bytes(line)  # no suffix: JSON Lines by content
    (folder / "deep" / "rows.dat").write_bytes(gzip.compress(b"\n  " + line))  # gzip by magic
    (folder / "_SUCCESS").write_bytes(b"")  # empty: no rows, nothing to lose
    (folder / ".cache" / "lock").write_text("pid 12")  # hidden folder: not looked at
    (folder / "notes.txt").write_text("where these prompts came from\n")
    (folder / "deep" / "README.md").write_text("# about\n")
    with pytest.raises(InputError) as refused:
        resolve_inputs([str(folder)], no_s3)
    assert str(refused.value).startswith(
        f"{folder}: is a folder holding 2 file(s) that are not prompt files (deep/README.md, notes.txt)"
    )
    with pytest.raises(InputError, match="not prompt files"):
        prompt_ids_from_inputs([str(folder)], AUTO, no_s3)  # the export's --input refuses it too

    specs = resolve_inputs([str(folder)], no_s3, skip_unreadable=True)
    assert [Path(s.name).relative_to(folder).as_posix() for s in specs] == [
        "_SUCCESS",
        "a.jsonl",
        "b.json",
        "c.parquet",
        "d.ndjson.gz",
        "deep/er/part-00000",
        "deep/rows.dat",
    ]
    expected = prompt_ids_from_inputs([str(folder)], AUTO, no_s3, skip_unreadable=True)
    assert expected.ids == {
        "a.jsonl:1",
        "a.jsonl:2",
        "b.json:1",
        "b.json:2",
        "c.parquet:1",
        "d.ndjson.gz:1",
        "part-00000:1",
        "rows.dat:2",  # its first line is blank: ids are line numbers
    }
    assert expected.unreadable == 0


def test_a_folder_of_nothing_readable_is_refused_even_when_skipping(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "notes.txt").write_text("nothing to generate\n")
    with pytest.raises(InputError, match="is a folder without prompt files"):
        resolve_inputs([str(folder)], no_s3, skip_unreadable=True)


def test_parquet_that_cannot_be_read_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.parquet"
    write_parquet(path, {"question": ["a"]})
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(InputError, match=r"^cut\.parquet: cannot be read as Parquet at its start"):
        rows_of(path)
    zipped = tmp_path / "zipped.parquet.gz"
    write_parquet(tmp_path / "z.parquet", {"question": ["a"]})
    zipped.write_bytes(gzip.compress((tmp_path / "z.parquet").read_bytes()))
    with pytest.raises(InputError, match="read from a local path only"):
        rows_of(zipped)


# --- the export reads what the producer reads ----------------------------------------------------


def test_expected_ids_of_an_array_count_bad_rows_as_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "talks.json"
    rows: list[Any] = [
        {"id": "a", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]},
        {"id": "b", "conversations": [{"from": "bot", "value": "Hi"}]},
        {"conversations": [{"from": "human", "value": "Hi"}]},
    ]
    path.write_text(json.dumps(rows))
    expected = prompt_ids_from_inputs([str(path)], AUTO, no_s3)
    assert (expected.ids, expected.unreadable) == ({"a", "talks.json:3"}, 1)
