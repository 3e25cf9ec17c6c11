"""Input format detection and normalisation: real sample files and every kind of bad row."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from streams.errors import ConfigError, InputError
from streams.inputs import (
    FormatName,
    MappingOptions,
    derived_id,
    detect_format,
    normalise,
    parse_line,
)
from streams.records import GenerationParams, PromptRecord

AUTO = MappingOptions()
GSM8K = MappingOptions(format=FormatName.DATASET, prompt_field="question", keep_fields=("answer",))
SCHEMA_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}


def read_file(path: Path, options: MappingOptions) -> list[PromptRecord]:
    """Every line of a JSON Lines file through parse_line, as the producer would."""
    lines = path.read_bytes().splitlines()
    return [parse_line(raw, source=str(path), line=n, options=options) for n, raw in enumerate(lines, 1)]


def row_at(path: Path, line: int) -> dict[str, Any]:
    row: dict[str, Any] = json.loads(path.read_bytes().splitlines()[line - 1])
    return row


def one(
    row: object, options: MappingOptions = AUTO, *, source: str = "in.jsonl", line: int = 7
) -> PromptRecord:
    return normalise(row, source=source, line=line, options=options)


def schema_types(schema: Any) -> list[Any]:
    """Every ``type`` value in a schema, walking properties, items and combinators."""
    found: list[Any] = []
    if isinstance(schema, dict):
        if "type" in schema:
            found.append(schema["type"])
        for sub in schema.get("properties", {}).values():
            found += schema_types(sub)
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                found += schema_types(schema[key])
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            for sub in schema.get(key, []):
                found += schema_types(sub)
    return found


# --- GSM8K (dataset) -------------------------------------------------------------------------


def test_gsm8k_question_becomes_the_user_message(sample_data: Path) -> None:
    path = sample_data / "gsm8k" / "test.jsonl"
    records = read_file(path, GSM8K)
    assert len(records) == 1319
    first = records[0]
    expected = row_at(path, 1)
    assert first.id == "test.jsonl:1"
    assert first.messages == [{"role": "user", "content": expected["question"]}]
    assert first.messages[0]["content"].startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert first.metadata.extra == {"answer": expected["answer"]}
    assert first.metadata.extra["answer"].endswith("#### 18")
    assert (first.metadata.source, first.metadata.line) == (str(path), 1)
    assert first.tools is None
    assert first.params == GenerationParams()
    assert records[11].id == "test.jsonl:12"
    assert records[11].messages[0]["content"].startswith("Toula went to the bakery")
    assert len({r.id for r in records}) == 1319


def test_prompt_field_with_auto_format_means_dataset(sample_data: Path) -> None:
    path = sample_data / "gsm8k" / "test.jsonl"
    options = MappingOptions(prompt_field="question", system="Answer with a number.", tags=("gsm8k",))
    record = parse_line(path.read_bytes().splitlines()[0], source="gsm8k.jsonl", line=1, options=options)
    assert record.messages[0] == {"role": "system", "content": "Answer with a number."}
    assert record.messages[1]["content"].startswith("Janet")
    assert record.metadata.tags == ["gsm8k"]
    assert record.metadata.extra == {}


def test_gsm8k_without_prompt_field_asks_for_it(sample_data: Path) -> None:
    raw = (sample_data / "gsm8k" / "test.jsonl").read_bytes().splitlines()[0]
    with pytest.raises(InputError) as info:
        parse_line(raw, source="test.jsonl", line=1, options=AUTO)
    message = str(info.value)
    assert message.startswith("test.jsonl:1: cannot tell this row's format")
    assert "answer, question" in message
    assert "--input-format" in message
    assert "--prompt-field" in message


def test_dataset_prompt_field_may_hold_messages() -> None:
    row = {"conv": [{"role": "user", "content": "hi"}], "id": 3}
    record = one(row, MappingOptions(prompt_field="conv"))
    assert record.messages == [{"role": "user", "content": "hi"}]
    assert record.id == "3"


# --- MT-Bench --------------------------------------------------------------------------------


def test_mt_bench_first_turn_only(sample_data: Path) -> None:
    path = sample_data / "mt_bench" / "question.jsonl"
    records = read_file(path, AUTO)
    assert [r.id for r in records] == [str(n) for n in range(81, 161)]
    first = records[0]
    assert first.messages == [
        {
            "role": "user",
            "content": "Compose an engaging travel blog post about a recent trip to Hawaii, "
            "highlighting cultural experiences and must-see attractions.",
        }
    ]
    assert first.metadata.extra["category"] == "writing"
    assert (
        first.metadata.extra["turns"][1]
        == "Rewrite your previous response. Start every sentence with the letter A."
    )
    assert "reference" not in first.metadata.extra
    assert all(len(r.messages) == 1 for r in records)


def test_mt_bench_reference_is_kept(sample_data: Path) -> None:
    path = sample_data / "mt_bench" / "question.jsonl"
    record = read_file(path, AUTO)[14]
    assert record.id == "95"
    assert record.metadata.extra["category"] == "roleplay"
    assert record.metadata.extra["reference"] == row_at(path, 15)["reference"]
    assert record.metadata.extra["turns"][1] == "Ich verstehe nur Bahnhof"


# --- BFCL ------------------------------------------------------------------------------------


def test_bfcl_simple_row_becomes_messages_and_tools(sample_data: Path) -> None:
    records = read_file(sample_data / "bfcl" / "BFCL_v4_simple_python.json", AUTO)
    assert len(records) == 400
    first = records[0]
    assert first.id == "simple_python_0"
    assert first.messages == [
        {
            "role": "user",
            "content": "Find the area of a triangle with a base of 10 units and height of 5 units.",
        }
    ]
    assert first.tools == [
        {
            "type": "function",
            "function": {
                "name": "calculate_triangle_area",
                "description": "Calculate the area of a triangle given its base and height.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "base": {"type": "integer", "description": "The base of the triangle."},
                        "height": {"type": "integer", "description": "The height of the triangle."},
                        "unit": {
                            "type": "string",
                            "description": "The unit of measure (defaults to 'units' if not specified)",
                        },
                    },
                    "required": ["base", "height"],
                },
            },
        }
    ]
    assert "bfcl_function_names" not in first.metadata.extra


def test_bfcl_dotted_name_is_renamed_and_remembered(sample_data: Path) -> None:
    record = read_file(sample_data / "bfcl" / "BFCL_v4_simple_python.json", AUTO)[1]
    assert record.id == "simple_python_1"
    assert record.tools is not None
    assert record.tools[0]["function"]["name"] == "math_factorial"
    assert record.metadata.extra["bfcl_function_names"] == {"math_factorial": "math.factorial"}


def test_bfcl_nested_dict_in_items_becomes_object(sample_data: Path) -> None:
    record = read_file(sample_data / "bfcl" / "BFCL_v4_simple_python.json", AUTO)[96]
    assert record.id == "simple_python_96"
    assert record.tools is not None
    params = record.tools[0]["function"]["parameters"]
    assert params["type"] == "object"
    conditions = params["properties"]["conditions"]
    assert conditions["type"] == "array"
    assert conditions["items"]["type"] == "object"
    assert conditions["items"]["properties"]["operation"]["enum"] == ["<", ">", "=", ">=", "<="]


def test_bfcl_tuple_float_and_any(sample_data: Path) -> None:
    records = read_file(sample_data / "bfcl" / "BFCL_v4_simple_python.json", AUTO)
    assert records[83].tools is not None
    coord = records[83].tools[0]["function"]["parameters"]["properties"]["coord1"]
    assert coord == {
        "type": "array",
        "description": "The first coordinate as (latitude, longitude).",
        "items": {"type": "number"},
    }
    assert records[109].tools is not None
    data = records[109].tools[0]["function"]["parameters"]["properties"]["data"]
    assert data == {"description": "The training data for the model."}


def test_bfcl_multiple_every_schema_is_json_schema(sample_data: Path) -> None:
    records = read_file(sample_data / "bfcl" / "BFCL_v4_multiple.json", AUTO)
    assert len(records) == 200
    first = records[0]
    assert first.id == "multiple_0"
    assert first.tools is not None
    assert [t["function"]["name"] for t in first.tools] == [
        "triangle_properties_get",
        "circle_properties_get",
    ]
    assert first.metadata.extra["bfcl_function_names"] == {
        "triangle_properties_get": "triangle_properties.get",
        "circle_properties_get": "circle_properties.get",
    }
    radius = first.tools[1]["function"]["parameters"]["properties"]["radius"]
    assert radius["type"] == "number"
    for record in records:
        assert record.tools
        for tool in record.tools:
            assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["function"]["name"])
            types = schema_types(tool["function"]["parameters"])
            assert types
            assert set(types) <= SCHEMA_TYPES


def test_bfcl_schema_normalised_recursively_without_touching_input() -> None:
    params = {
        "type": "dict",
        "properties": {
            "type": {"type": "string"},  # a parameter called "type" is not a type keyword
            "outer": {
                "type": "dict",
                "properties": {"inner": {"type": "array", "items": {"type": "dict", "properties": {}}}},
                "additionalProperties": {"type": "float"},
            },
            "either": {"anyOf": [{"type": "dict"}, {"type": ["float", "null"]}]},
            "loose": {"type": ["any", "string"]},
        },
    }
    row = {
        "id": "x",
        "question": [[{"role": "user", "content": "q"}]],
        "function": [{"name": "f", "parameters": params}],
    }
    original = json.dumps(row)
    record = one(row)
    assert record.tools is not None
    out = record.tools[0]["function"]["parameters"]
    assert out["type"] == "object"
    assert out["properties"]["type"] == {"type": "string"}
    assert out["properties"]["outer"]["type"] == "object"
    assert out["properties"]["outer"]["properties"]["inner"]["items"]["type"] == "object"
    assert out["properties"]["outer"]["additionalProperties"] == {"type": "number"}
    assert out["properties"]["either"]["anyOf"] == [{"type": "object"}, {"type": ["number", "null"]}]
    assert out["properties"]["loose"] == {}
    assert record.tools[0]["function"]["description"] == ""
    assert json.dumps(row) == original


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (
            {
                "question": [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
                "function": [],
            },
            "question has 2 turns: multi-turn BFCL rows are not supported",
        ),
        ({"question": [], "function": []}, "question is an array, expected [[message, ...]]"),
        (
            {"question": [[{"role": "user", "content": "a"}]], "function": []},
            "function is an array, expected a non-empty array",
        ),
        (
            {
                "question": [[{"role": "user", "content": "a"}]],
                "function": [{"name": "a.b"}, {"name": "a_b"}],
            },
            "function[1].name 'a_b' becomes 'a_b', which another function already uses",
        ),
        (
            {"question": [[{"role": "user", "content": "a"}]], "function": [{"name": "x" * 65}]},
            "cannot be made a valid OpenAI function name",
        ),
        (
            {"question": [[{"role": "user", "content": "a"}]], "function": [{"name": "f", "parameters": []}]},
            "function[0].parameters is an array, expected a JSON Schema object",
        ),
        (
            {
                "question": [[{"role": "user", "content": "a"}]],
                "function": [
                    {"name": "f", "parameters": {"type": "dict", "properties": {"p": {"type": "list"}}}}
                ],
            },
            "function[0].parameters.properties.p.type 'list' is not a JSON Schema or BFCL type",
        ),
    ],
)
def test_bad_bfcl_rows(row: dict[str, Any], reason: str) -> None:
    with pytest.raises(InputError) as info:
        one(row, MappingOptions(format=FormatName.BFCL))
    assert str(info.value).startswith("in.jsonl:7: ")
    assert reason in str(info.value)


# --- chat, prompt and OpenAI batch -------------------------------------------------------------


def test_chat_row_with_tools_and_params() -> None:
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    row = {
        "id": "c1",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Time?"}],
        "tools": tools,
        "max_tokens": 64,
        "temperature": 0,
        "stop": "END",
        "chat_template_kwargs": {"enable_thinking": False},
        "category": "ignored unless kept",
    }
    record = one(row, MappingOptions(system="not used: the row has one", run_id="r1"))
    assert record.id == "c1"
    assert record.messages == row["messages"]
    assert record.tools == tools
    assert record.params == GenerationParams(
        max_tokens=64, temperature=0.0, stop=["END"], chat_template_kwargs={"enable_thinking": False}
    )
    assert record.run_id == "r1"
    assert record.metadata.extra == {}


def test_prompt_row() -> None:
    record = one({"prompt": "Say hi", "seed": 3}, MappingOptions(system="sys", keep_fields=("missing",)))
    assert record.messages == [{"role": "system", "content": "sys"}, {"role": "user", "content": "Say hi"}]
    assert record.params == GenerationParams(seed=3)
    assert record.id == "in.jsonl:7"
    assert record.metadata.extra == {}


def test_openai_batch_row() -> None:
    row = {
        "custom_id": "request-1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": "Hello world!"}],
            "max_completion_tokens": 1000,
            "top_p": 0.9,
            "n": 1,
        },
    }
    record = one(row)
    assert record.id == "request-1"
    assert record.messages == [{"role": "user", "content": "Hello world!"}]
    assert record.params == GenerationParams(max_tokens=1000, top_p=0.9)
    assert record.tools is None


@pytest.mark.parametrize(
    ("body_extra", "reason"),
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
            'response_format json_schema needs {"json_schema": {"name": "...", "schema": {...}}} (in body)',
        ),
        (
            {"response_format": {"type": "json_object"}, "regex": "a+"},
            "only one output constraint at a time (SGLang's rule), not response_format json_object and regex",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}},
            "response_format's schema is not a valid JSON Schema: 5 is not valid",
        ),
        ({"frequency_penalty": 2.5}, "body.frequency_penalty = 2.5 is out of range: must be in [-2, 2]"),
        ({"logit_bias": {"7": 1}}, "body.logit_bias = "),
        ({"extra_body": {"stop_token_id": [7]}}, "extra_body field 'stop_token_id' is not a field of SGLang"),
        ({"extra_body": {"n": 2}}, "extra_body may not set 'n': kafkagen sets it from --samples"),
        ({"verbosity": "low"}, "unsupported request field(s) body.verbosity"),
        (
            {"max_tokens": "lots"},
            "invalid generation parameter: Expected `int | null`, got `str` - at `body.max_tokens`",
        ),
        (
            {"max_tokens": 10, "max_completion_tokens": 20},
            "body.max_tokens and body.max_completion_tokens disagree",
        ),
        ({"max_completion_tokens": 2.5}, "body.max_completion_tokens is 2.5, expected an integer"),
        ({"temperature": -1}, "body.temperature = -1.0 is out of range"),
        ({"top_p": 0}, "body.top_p = 0.0 is out of range"),
        ({"tools": [{"type": "retrieval"}]}, "body.tools[0].type is 'retrieval': only 'function' tools"),
    ],
)
def test_bad_openai_batch_body(body_extra: dict[str, Any], reason: str) -> None:
    row = {"custom_id": "r", "body": {"messages": [{"role": "user", "content": "q"}], **body_extra}}
    with pytest.raises(InputError) as info:
        one(row)
    assert str(info.value).startswith("in.jsonl:7: ")
    assert reason in info.value.reason


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (
            {"custom_id": "r", "url": "/v1/embeddings", "body": {}},
            "url is '/v1/embeddings': only POST /v1/chat/completions requests",
        ),
        ({"custom_id": "r", "method": "GET", "body": {}}, "method is 'GET': only POST"),
        ({"custom_id": "r", "body": "x"}, "body is a string, expected the request object"),
        (
            {"custom_id": "", "body": {"messages": [{"role": "user", "content": "q"}]}},
            "id field 'custom_id' is ''",
        ),
    ],
)
def test_bad_openai_batch_rows(row: dict[str, Any], reason: str) -> None:
    with pytest.raises(InputError, match=re.escape(reason)):
        one(row, MappingOptions(format=FormatName.OPENAI_BATCH))


def test_batch_row_without_custom_id_is_rejected() -> None:
    row = {"body": {"messages": [{"role": "user", "content": "q"}]}}
    with pytest.raises(InputError, match="id field 'custom_id' is missing"):
        one(row, MappingOptions(format=FormatName.OPENAI_BATCH))


# --- detection -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"custom_id": "a", "body": {"messages": []}}, FormatName.OPENAI_BATCH),
        ({"messages": [], "prompt": "x"}, FormatName.CHAT),
        ({"id": "b", "question": [[]], "function": []}, FormatName.BFCL),
        ({"question_id": 1, "turns": ["a"]}, FormatName.MT_BENCH),
        ({"prompt": "x"}, FormatName.PROMPT),
    ],
)
def test_detect_format(row: dict[str, Any], expected: FormatName) -> None:
    assert detect_format(row) is expected


def test_detect_format_failure_names_text_fields() -> None:
    with pytest.raises(InputError) as info:
        detect_format({"q": "text", "n": 3})
    assert info.value.source is None
    assert "fields (n, q)" in str(info.value)
    assert "text fields here: q" in str(info.value)


# --- bad rows ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[1, 2]", "row is an array, expected a JSON object"),
        (b'"text"', "row is a string, expected a JSON object"),
        (b"{}", "cannot tell this row's format from its fields (none)"),
        (b'{"messages": []}', "messages is empty: at least one message is needed"),
        (b'{"messages": {"role": "user"}}', "messages is an object, expected an array of messages"),
        (b'{"messages": ["hi"]}', "messages[0] is a string, expected a message object"),
        (b'{"messages": [{"role": "bot", "content": "x"}]}', "messages[0].role is 'bot': expected one of"),
        (b'{"messages": [{"content": "x"}]}', "messages[0].role is missing"),
        (b'{"messages": [{"role": "user"}]}', "messages[0] (user) has no content"),
        (b'{"messages": [{"role": "user", "content": "  "}]}', "messages[0].content is an empty string"),
        (
            b'{"messages": [{"role": "user", "content": 5}]}',
            "messages[0].content is a number, expected a string",
        ),
        (b'{"messages": [{"role": "user", "content": []}]}', "messages[0].content is an empty array"),
        (
            b'{"messages": [{"role": "user", "content": [{"type": "text"}]}]}',
            "content[0] is a text part without",
        ),
        (b'{"messages": [{"role": "system", "content": "s"}]}', "messages holds only system messages"),
        (
            b'{"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}]}',
            "messages[1] is a tool message without a string tool_call_id",
        ),
        (
            b'{"messages": [{"role": "user", "content": "q", "tool_calls": []}]}',
            "messages[0] has tool_calls but role 'user'",
        ),
        (
            b'{"messages": [{"role": "user", "content": "q"}], "tools": {}}',
            "tools is an object, expected an array",
        ),
        (
            b'{"messages": [{"role": "user", "content": "q"}], "tools": [1]}',
            "tools[0] is a number, expected a tool",
        ),
        (
            b'{"messages": [{"role": "user", "content": "q"}], '
            b'"tools": [{"type": "function", "function": {}}]}',
            "tools[0].function.name is null, expected a string",
        ),
        (
            b'{"messages": [{"role": "user", "content": "q"}], "tools": [{"type": "function"}]}',
            "tools[0].function is null, expected an object",
        ),
        (
            b'{"messages": [{"role": "user", "content": "q"}], "max_tokens": "lots"}',
            "invalid generation parameter: Expected `int | null`, got `str` - at `max_tokens`",
        ),
        (
            b'{"messages": [{"role": "user", "content": "q"}], "max_tokens": 0}',
            "max_tokens = 0 is out of range",
        ),
        (b'{"messages": [{"role": "user", "content": "q"}], "n": 2}', "n = 2 is not supported"),
        (b'{"messages": [{"role": "user", "content": "q"}], "id": true}', "id field 'id' is True"),
        (b'{"prompt": ""}', "prompt is an empty string"),
        (b'{"prompt": ["a"]}', "prompt is an array, expected a string"),
        (b'{"turns": []}', "turns is an array, expected a non-empty array of strings"),
        (b'{"turns": ["a", 2]}', "turns[1] is a number, expected a string"),
        (b"", "blank line"),
        (b'{"prompt": "x",}', "invalid JSON: JSON is malformed: trailing comma in object (byte 15)"),
        (b'{"prompt": "caf\xe9"}', "not valid UTF-8: byte 0xe9 at byte offset 15 of the line"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    ],
)
def test_bad_rows_name_source_line_and_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(InputError) as info:
        parse_line(raw, source="data/in.jsonl", line=42, options=AUTO)
    assert str(info.value).startswith("data/in.jsonl:42: ")
    assert reason in info.value.reason
    assert (info.value.source, info.value.line) == ("data/in.jsonl", 42)


def test_dataset_missing_prompt_field_lists_the_fields() -> None:
    with pytest.raises(InputError, match=r"in.jsonl:7: prompt field 'question' is missing; the row has a, b"):
        one({"a": 1, "b": 2}, MappingOptions(prompt_field="question"))


def test_missing_id_field_is_an_error() -> None:
    with pytest.raises(InputError, match="id field 'uid' is missing"):
        one({"prompt": "x"}, MappingOptions(id_field="uid"))


def test_bom_and_newline_are_tolerated() -> None:
    record = parse_line(b'\xef\xbb\xbf{"prompt": "x", "id": 12}\r\n', source="-", line=1, options=AUTO)
    assert record.id == "12"
    assert record.messages == [{"role": "user", "content": "x"}]


# --- ids ---------------------------------------------------------------------------------------


def test_derived_ids_are_deterministic(sample_data: Path) -> None:
    path = sample_data / "gsm8k" / "test.jsonl"
    first = [r.id for r in read_file(path, GSM8K)]
    second = [r.id for r in read_file(path, GSM8K)]
    assert first == second
    assert first[:3] == ["test.jsonl:1", "test.jsonl:2", "test.jsonl:3"]


def test_derived_id_uses_the_base_name() -> None:
    assert derived_id("data/gsm8k-test.jsonl", 12) == "gsm8k-test.jsonl:12"
    assert derived_id("/abs/elsewhere/gsm8k-test.jsonl", 12) == "gsm8k-test.jsonl:12"
    assert derived_id("s3://bucket/in/p.jsonl", 1) == "p.jsonl:1"
    assert derived_id("-", 5) == "stdin:5"


def test_id_field_option_overrides_the_format_default(sample_data: Path) -> None:
    path = sample_data / "mt_bench" / "question.jsonl"
    options = MappingOptions(id_field="category")
    assert read_file(path, options)[0].id == "writing"


# --- options -----------------------------------------------------------------------------------


def test_options_accept_format_strings_and_lists() -> None:
    options = MappingOptions(format="bfcl", keep_fields=["a"], tags=["t"])  # type: ignore[arg-type]
    assert options.format is FormatName.BFCL
    assert options.keep_fields == ("a",)
    assert dataclasses.replace(options, format=FormatName.CHAT).keep_fields == ("a",)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"format": "csv"}, "unknown input format 'csv': expected one of auto, chat"),
        ({"format": FormatName.DATASET}, "--input-format dataset needs --prompt-field"),
        (
            {"format": FormatName.CHAT, "prompt_field": "q"},
            "--prompt-field applies to --input-format dataset only",
        ),
        ({"system": " "}, "the system prompt is empty"),
        ({"keep_fields": ("",)}, "keep_fields must be non-empty strings"),
    ],
)
def test_bad_options(kwargs: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(reason)):
        MappingOptions(**kwargs)
