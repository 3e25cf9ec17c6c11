"""ShareGPT rows and the last-turn rule (``--last-turn``) for ShareGPT and chat rows: pure, no files."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streams.errors import ConfigError, InputError
from streams.inputs import FormatName, MappingOptions, detect_format, normalise
from streams.records import PromptRecord

AUTO = MappingOptions()
KEEP = MappingOptions(last_turn="keep")
REFERENCE = MappingOptions(last_turn="reference")
TOOLS = [{"name": "add", "description": "Add two numbers", "parameters": {"type": "object"}}]


def one(row: object, options: MappingOptions = AUTO) -> PromptRecord:
    return normalise(row, source="talks.json", line=4, options=options)


def turn(speaker: str, value: object) -> dict[str, Any]:
    return {"from": speaker, "value": value}


def tool_row() -> dict[str, Any]:
    return {
        "id": "t-1",
        "system": "Be exact.",
        "tools": json.dumps(TOOLS),
        "conversations": [
            turn("human", "What is 2 + 3?"),
            turn("function_call", json.dumps({"name": "add", "arguments": {"a": 2, "b": 3}})),
            turn("observation", '{"sum": 5}'),
            turn("gpt", "2 + 3 = 5."),
        ],
    }


def test_conversations_are_detected_as_sharegpt() -> None:
    assert detect_format({"conversations": []}) is FormatName.SHAREGPT
    assert detect_format({"messages": [], "conversations": []}) is FormatName.CHAT


def test_tool_calls_become_openai_tool_calls_and_tool_messages() -> None:
    record = one(tool_row())
    assert record.id == "t-1"
    assert record.messages == [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "What is 2 + 3?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1_0",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a":2,"b":3}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1_0", "content": '{"sum": 5}'},
    ]
    assert record.tools == [{"type": "function", "function": TOOLS[0]}]
    assert record.metadata.extra == {"reference": "2 + 3 = 5."}
    assert one(tool_row()) == record, "the same row gives the same ids"


def test_user_assistant_synonyms_parallel_calls_and_tool_lists() -> None:
    calls = [{"name": "add", "arguments": '{"a": 1}'}, {"name": "neg", "arguments": {"x": 1}}]
    row = {
        "tools": [*TOOLS, {"type": "function", "function": {"name": "neg"}}],
        "conversations": [
            turn("system", "Hi."),
            turn("user", "Go."),
            turn("function_call", json.dumps(calls)),
            turn("tool", "1"),
            turn("observation", "-1"),
            turn("assistant", "Done."),
            turn("human", "Thanks!"),
        ],
    }
    record = one(row)
    assert [m["role"] for m in record.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
    ]
    call_ids = [c["id"] for c in record.messages[2]["tool_calls"]]
    assert call_ids == ["call_2_0", "call_2_1"]
    assert [m["tool_call_id"] for m in record.messages[3:5]] == call_ids
    assert record.messages[2]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert record.tools is not None and [t["function"]["name"] for t in record.tools] == ["add", "neg"]
    assert record.metadata.extra == {}, "a conversation ending with a human turn is the prompt as it is"
    assert record.id == "talks.json:4"


def test_keep_sends_the_whole_conversation() -> None:
    record = one(tool_row(), KEEP)
    assert record.messages[-1] == {"role": "assistant", "content": "2 + 3 = 5."}
    assert record.metadata.extra == {}


def test_a_last_function_call_is_kept_as_reference_tool_calls() -> None:
    row = {"conversations": tool_row()["conversations"][:2]}
    record = one(row)
    assert record.messages == [{"role": "user", "content": "What is 2 + 3?"}]
    assert record.metadata.extra["reference"] is None
    assert record.metadata.extra["reference_tool_calls"][0]["function"]["name"] == "add"


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"conversations": []}, "conversations is empty"),
        ({"conversations": None}, "conversations is missing"),
        ({"conversations": "hi"}, "conversations is a string, expected an array of turns"),
        ({"conversations": ["hi"]}, "conversations[0] is a string, expected a turn object"),
        (
            {"conversations": [turn("human", "a"), turn("bot", "b")]},
            "conversations[1].from is 'bot': unknown role; expected one of human, user, gpt",
        ),
        ({"conversations": [{"value": "a"}]}, "conversations[0].from is missing: unknown role"),
        ({"conversations": [turn("human", 3)]}, "conversations[0].value is a number, expected a string"),
        ({"conversations": [turn("human", None)]}, "conversations[0].value is null, expected a string"),
        ({"conversations": [turn("human", " ")]}, "conversations[0].content is an empty string"),
        ({"conversations": [turn("gpt", "Hello!")]}, "conversations has no human turn"),
        (
            {"conversations": [turn("system", "s"), turn("gpt", "Hello!")]},
            "conversations has no human turn",
        ),
        (
            {"conversations": [turn("human", "a"), turn("observation", "1")]},
            "conversations[1] (observation) answers no function_call",
        ),
        (
            {"conversations": [turn("human", "a"), turn("function_call", "add(1)")]},
            "conversations[1].value is not JSON",
        ),
        (
            {"conversations": [turn("human", "a"), turn("function_call", '{"arguments": {}}')]},
            "conversations[1].value.name is null, expected a string",
        ),
        (
            {"conversations": [turn("human", "a"), turn("function_call", '{"name": "f", "arguments": 3}')]},
            "conversations[1].value.arguments is a number",
        ),
        ({"conversations": [turn("human", "a")], "tools": "[{"}, "tools is a string but not JSON"),
        ({"conversations": [turn("human", "a")], "tools": [{"description": "x"}]}, "tools[0].function.name"),
        ({"conversations": [turn("human", "a")], "system": 1}, "system is a number, expected a string"),
    ],
)
def test_bad_sharegpt_rows_name_the_row_and_the_reason(row: dict[str, Any], reason: str) -> None:
    with pytest.raises(InputError) as caught:
        one(row)
    assert str(caught.value).startswith("talks.json:4: "), str(caught.value)
    assert reason in str(caught.value)


def test_empty_tools_mean_none() -> None:
    nothing: list[object] = ["", "[]", None, []]
    for tools in nothing:
        assert one({"conversations": [turn("human", "a")], "tools": tools}).tools is None


def test_chat_rows_keep_their_last_assistant_message_unless_asked() -> None:
    row = {
        "id": "c-1",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
        ],
    }
    assert one(row).messages == row["messages"], "off by default: existing chat rows are unchanged"
    assert one(row, KEEP).messages == row["messages"]
    split = one(row, REFERENCE)
    assert split.messages == [{"role": "user", "content": "Hi"}]
    assert split.metadata.extra == {"reference": "Hello."}
    ends_with_user = {"messages": [*row["messages"], {"role": "user", "content": "More?"}]}
    assert one(ends_with_user, REFERENCE).messages == ends_with_user["messages"]


def test_reference_keep_fields_and_system_apply_after_the_split() -> None:
    row = {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo."}],
        "src": "x",
    }
    options = MappingOptions(last_turn="reference", keep_fields=("src",), system="Be kind.")
    record = one(row, options)
    assert record.messages == [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}]
    assert record.metadata.extra == {"reference": "Yo.", "src": "x"}


def test_a_chat_row_that_is_only_an_assistant_turn_is_refused_with_reference() -> None:
    row = {"messages": [{"role": "system", "content": "S"}, {"role": "assistant", "content": "A"}]}
    with pytest.raises(InputError, match=r"^talks\.json:4: messages is only an assistant turn"):
        one(row, REFERENCE)
    assert one(row).messages == row["messages"], "kept as it is by default"


def test_an_unknown_last_turn_rule_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown last-turn rule 'drop'"):
        MappingOptions(last_turn="drop")  # type: ignore[arg-type]
