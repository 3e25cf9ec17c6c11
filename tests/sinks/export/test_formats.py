"""The export formats' pure record → row functions (no Kafka, no S3): OpenAI Batch lines validated
with the ``openai`` package's own types, chat rows in each reasoning mode, Parquet rows against
their schema (nulls included), the dataset card, the ``--output-format`` values and the shard names."""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec
import openai.types.chat
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sinks.export.destination import EXPORT_DIR, Destination
from sinks.export.formats import FORMATS, SHARD_NAME, parse_formats
from sinks.export.formats.card import card, is_ours
from sinks.export.formats.chat import chat_row
from sinks.export.formats.openai_batch import batch_error_line, batch_output_line
from sinks.export.formats.parquet import (
    COMPLETION_SCHEMA,
    ERROR_SCHEMA,
    ParquetShards,
    completion_row,
    error_row,
)
from streams.inputs import FormatName
from tests.sinks.export.format_records import TOOL_CALLS, TOOLS, completion, dead_letter

RUN = "run-1"


def _table(rows: list[dict[str, object]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def test_a_batch_output_line_is_an_openai_chat_completion() -> None:
    record = completion(3, RUN, cached_tokens=8)
    line = json.loads(msgspec.json.encode(batch_output_line(record)))
    assert set(line) == {"id", "custom_id", "response", "error"} and line["error"] is None
    assert line["custom_id"] == "id-000003" and line["id"].startswith("batch_req_")
    assert line["response"]["status_code"] == 200 and line["response"]["request_id"].startswith("req_")
    body = openai.types.chat.ChatCompletion.model_validate(line["response"]["body"])
    assert (
        body.object == "chat.completion" and body.model == "test-model" and body.created == int(1.7e9 + 4.5)
    )
    choice = body.choices[0]
    assert (choice.index, choice.finish_reason, choice.message.role) == (0, "stop", "assistant")
    assert choice.message.content == "\n6" and choice.message.tool_calls is None
    assert line["response"]["body"]["choices"][0]["message"]["reasoning_content"] == "Add them.\n"
    assert body.usage is not None
    assert (body.usage.prompt_tokens, body.usage.completion_tokens, body.usage.total_tokens) == (30, 15, 45)
    assert body.usage.completion_tokens_details is not None
    assert body.usage.completion_tokens_details.reasoning_tokens == 5
    assert (
        body.usage.prompt_tokens_details is not None and body.usage.prompt_tokens_details.cached_tokens == 8
    )
    assert batch_output_line(record) == batch_output_line(record), "ids are deterministic"
    again = batch_output_line(msgspec.structs.replace(record, attempt=1))
    assert again["id"] != line["id"] and again["custom_id"] == line["custom_id"]


def test_a_batch_line_with_tool_calls_and_no_reasoning() -> None:
    line = batch_output_line(completion(4, RUN, tools=True, reasoning=None))
    body = openai.types.chat.ChatCompletion.model_validate(line["response"]["body"])
    message = body.choices[0].message
    assert message.content is None, "OpenAI returns null content beside tool calls"
    assert message.tool_calls is not None and len(message.tool_calls) == 1
    call = message.tool_calls[0]
    assert isinstance(call, openai.types.chat.ChatCompletionMessageFunctionToolCall)
    assert (call.id, call.function.name, call.function.arguments) == (
        "call_0",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert body.choices[0].finish_reason == "tool_calls"
    assert "reasoning_content" not in line["response"]["body"]["choices"][0]["message"]
    assert "prompt_tokens_details" not in line["response"]["body"]["usage"]


def test_a_dead_letter_is_a_batch_error_line() -> None:
    line = batch_error_line(dead_letter(5, RUN))
    assert line == {
        "id": line["id"],
        "custom_id": "id-000005",
        "response": None,
        "error": {"code": "FatalRequestError", "message": "400 Bad Request: the prompt is too long"},
    }
    assert line["id"].startswith("batch_req_")


def test_chat_rows_in_each_reasoning_mode() -> None:
    record = completion(2, RUN)
    field = chat_row(record, "field")
    assert field == {
        "id": "id-000002",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "\n4", "reasoning_content": "Add them.\n"},
        ],
    }
    inline = chat_row(record, "inline")
    assert inline["messages"][-1] == {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"}
    assert chat_row(record, "drop")["messages"][-1] == {"role": "assistant", "content": "\n4"}
    plain = completion(2, RUN, reasoning=None)
    assert chat_row(plain, "inline")["messages"][-1] == {"role": "assistant", "content": "\n4"}, (
        "no empty think"
    )


def test_a_chat_row_with_tools() -> None:
    row = chat_row(completion(1, RUN, tools=True), "inline")
    assert row["tools"] == TOOLS
    assert row["messages"][-1] == {
        "role": "assistant",
        "content": "<think>\nAdd them.\n</think>\n\n",
        "tool_calls": TOOL_CALLS,
    }
    assert row["messages"][1]["content"] == [{"type": "text", "text": "What is 1 + 1?"}], (
        "parts kept as given"
    )


def test_parquet_rows_fit_their_schema_with_nulls() -> None:
    rows = [
        completion_row(completion(0, RUN, quality=["repetition_loop", "truncated"])),
        completion_row(completion(1, RUN, reasoning=None, tools=True, cached_tokens=4)),
    ]
    table = _table(rows, COMPLETION_SCHEMA).to_pylist()
    assert table[0]["reasoning_content"] == "Add them.\n" and table[0]["tools"] is None
    assert table[0]["tool_calls"] is None and table[0]["cached_tokens"] is None
    assert table[0]["quality"] == ["repetition_loop", "truncated"] and table[1]["quality"] == []
    assert table[1]["reasoning_content"] is None
    assert json.loads(table[1]["tools"]) == TOOLS and json.loads(table[1]["tool_calls"]) == TOOL_CALLS
    assert table[1]["cached_tokens"] == 4 and table[1]["finish_reason"] == "tool_calls"
    assert json.loads(table[0]["messages"])[1] == {"role": "user", "content": "0+0?"}
    assert json.loads(table[0]["params"]) == {"max_tokens": 256, "temperature": 0.6}
    assert (table[0]["source_topic"], table[0]["source_partition"], table[0]["source_offset"]) == (
        "r.prompts",
        0,
        0,
    )
    assert (table[0]["metadata_source"], table[0]["metadata_line"], table[0]["metadata_tags"]) == (
        "in.jsonl",
        1,
        ["t"],
    )
    assert json.loads(table[0]["metadata_extra"]) == {"answer": 0}
    assert COMPLETION_SCHEMA.field("prompt_tokens").type == pa.int64()
    assert COMPLETION_SCHEMA.field("content").metadata[b"description"]

    errors = _table(
        [error_row(dead_letter(5, RUN)), error_row(dead_letter(6, RUN, with_prompt=False))], ERROR_SCHEMA
    )
    first, second = errors.to_pylist()
    assert (first["stage"], first["error_type"], first["status"], first["retriable"]) == (
        "generate",
        "FatalRequestError",
        400,
        False,
    )
    assert json.loads(first["params"]) == {"max_tokens": 256}
    assert second["messages"] is None and second["metadata_line"] is None and second["metadata_tags"] is None


def test_format_values() -> None:
    assert FORMATS == ("jsonl", "parquet", "openai_batch", "chat")
    assert parse_formats(()) == ("jsonl",)
    assert parse_formats(("parquet,chat", "jsonl", "parquet")) == ("parquet", "chat", "jsonl")
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        parse_formats(("jsonl,csv",))


def test_a_format_is_spelled_as_the_input_side_spells_it_and_the_other_spelling_is_taken() -> None:
    assert FormatName.OPENAI_BATCH.value in FORMATS  # produce --input-format openai_batch: Batch API requests
    assert parse_formats(("openai-batch",)) == parse_formats(("openai_batch",)) == ("openai_batch",)
    assert parse_formats(("openai-batch,jsonl", "openai_batch")) == ("openai_batch", "jsonl")
    with pytest.raises(ValueError, match=r"unknown format 'open-ai' .*openai_batch"):
        parse_formats(("open-ai",))


@pytest.mark.parametrize(
    ("name", "shard"),
    [
        ("completions-00000.jsonl.zst", True),
        ("errors-00012.jsonl.zst", True),
        ("completions-00001.parquet", True),
        ("errors-00000.parquet", True),
        ("batch-output-00000.jsonl", True),
        ("batch-errors-00003.jsonl", True),
        ("chat-00000.jsonl.zst", True),
        ("manifest.json", False),
        ("README.md", False),
        ("chat-00000.jsonl", False),
        ("notes-00000.parquet", False),
    ],
)
def test_shard_names(name: str, shard: bool) -> None:
    assert bool(SHARD_NAME.match(name)) is shard


def test_export_folders_sort_by_start_time_within_one_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """An S3 export deletes the export folders that sort before its own: one started 1 ms after
    another, in the same second, sorts after it whatever their random suffixes (a killed export's
    folder is deleted by the next export; CI seed of 2026-12-04)."""
    started = iter([1_796_000_000_999_000_000, 1_796_000_000_999_001_000] * 20)
    monkeypatch.setattr(time, "time_ns", lambda: next(started))  # the clock the export reads

    def export_id() -> str:
        destination = Destination("s3://bucket/prefix", None, lambda name, head: True)
        destination.close()
        return destination.export_id

    for _ in range(20):
        first, second = export_id(), export_id()
        assert EXPORT_DIR.match(first) and EXPORT_DIR.match(second), (first, second)
        assert first < second, (first, second)


def test_the_card_has_the_counts_and_the_configs() -> None:
    manifest = {
        "run_id": RUN,
        "created_at": "2026-01-01T00:00:00+00:00",
        "ok": True,
        "source": {"s3": "s3://b/p/run-1"},
        "attempts": {"keep": "latest"},
        "records": {"ids": 3, "completions": 2, "errors": 1},
        "missing": {"count": 0},
        "flagged_completions": 1,
        "by_finish_reason": {"stop": 2},
        "quality": {"results": 3, "classes": {"degenerate": 1, "error": 1, "repetition_loop": 1}},
        "by_attempt": {"0": 2, "1": 1},
        "errors_by_type": {"generate:FatalRequestError": 1},
        "tokens": {"prompt": 60, "completion": 30, "reasoning": 10},
        "shards": [
            {"path": "completions-00000.parquet", "format": "parquet", "kind": "completions", "records": 2},
            {"path": "errors-00000.parquet", "format": "parquet", "kind": "errors", "records": 1},
            {"path": "chat-00000.jsonl.zst", "format": "chat", "kind": "completions", "records": 2},
        ],
    }
    text = card(manifest)
    assert text.startswith("---\nconfigs:\n- config_name: completions\n")
    assert '  data_files: "errors-*.parquet"' in text and is_ours(text.encode()[:4096])
    assert "# kafkagen run `run-1`" in text
    assert "- ids: 3; completions: 2; errors: 1" in text
    assert "- by finish_reason: `stop` 2" in text
    assert "- by quality class (of 3 records): `degenerate` 1, `error` 1, `repetition_loop` 1" in text
    assert "- by attempt: `0` 2, `1` 1" in text
    assert "- tokens: prompt 60, completion 30 (of which reasoning 10)" in text
    assert "| `prompt_tokens` | int64 | tokens of the prompt |" in text
    assert "| `reasoning_content` | string, nullable |" in text
    assert not is_ours(b"# my own notes\n")


def test_parquet_shards_stream_in_row_groups(tmp_path: Path) -> None:
    dest = Destination(str(tmp_path / "out"), None, lambda name, head: True)
    try:
        shards = ParquetShards(dest, "completions", 4, COMPLETION_SCHEMA, {"k": "v"}, row_group_rows=2)
        for i in range(5):
            shards.add(completion_row(completion(i, RUN)), 100)
        shards.close()
        dest.commit([])  # the staged folder becomes out/
    finally:
        dest.close()
    assert [(s["path"], s["records"]) for s in shards.written] == [
        ("completions-00000.parquet", 4),
        ("completions-00001.parquet", 1),
    ]
    first = pq.ParquetFile(tmp_path / "out" / "completions-00000.parquet")
    assert first.metadata.num_row_groups == 2 and first.schema_arrow.metadata == {b"k": b"v"}
    assert pq.read_table(tmp_path / "out" / "completions-00001.parquet")["id"].to_pylist() == ["id-000004"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [s["path"] for s in shards.written]
