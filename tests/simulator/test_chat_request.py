"""Reading a chat-completions body (:mod:`simulator.chat_request`): pure, no server."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from simulator import DEFAULT_PROFILE
from simulator.chat_request import BadRequest, context_error, parse_chat

MESSAGES = [{"role": "user", "content": "Hi."}]


def body(**fields: Any) -> dict[str, Any]:
    return {"messages": MESSAGES, **fields}


def test_defaults() -> None:
    chat = parse_chat(body(), DEFAULT_PROFILE)
    assert chat.rid is None and chat.model is None and chat.priority is None
    assert chat.max_tokens is None and chat.min_tokens == 0
    assert chat.enable_thinking is DEFAULT_PROFILE.default_enable_thinking
    assert chat.separate_reasoning is True
    assert chat.tools == [] and chat.tool_choice == "auto"


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert parse_chat(body(max_completion_tokens=5, max_tokens=9), DEFAULT_PROFILE).max_tokens == 5
    assert parse_chat(body(max_tokens=9), DEFAULT_PROFILE).max_tokens == 9


def test_thinking_explicit_value_wins_over_reasoning_effort() -> None:
    no_default = replace(DEFAULT_PROFILE, default_enable_thinking=False)
    assert parse_chat(body(reasoning_effort="low"), no_default).enable_thinking is True
    assert parse_chat(body(reasoning_effort="none"), DEFAULT_PROFILE).enable_thinking is False
    explicit = body(reasoning_effort="none", chat_template_kwargs={"enable_thinking": True})
    assert parse_chat(explicit, no_default).enable_thinking is True


def test_a_non_string_model_is_ignored() -> None:
    assert parse_chat(body(model=3), DEFAULT_PROFILE).model is None
    assert parse_chat(body(model="m"), DEFAULT_PROFILE).model == "m"


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"messages": []},
        {"messages": [{"content": "no role"}]},
        body(stream=True),
        body(n=0),
        body(max_tokens=True),
        body(max_tokens=-1),
        body(min_tokens=-1),
        body(chat_template_kwargs=["x"]),
        body(priority="high"),
        body(separate_reasoning="yes"),
        body(tools={"name": "f"}),
        body(rid=""),
    ],
)
def test_bad_bodies_are_400(bad: object) -> None:
    with pytest.raises(BadRequest):
        parse_chat(bad, DEFAULT_PROFILE)


def test_context_error() -> None:
    assert context_error(99, None, 100) is None
    assert context_error(90, 10, 100) is None
    too_long = context_error(100, None, 100)
    assert too_long is not None and "longer than the model's context length (100 tokens)" in too_long
    over = context_error(90, 11, 100)
    assert over is not None and "a total of 101 tokens" in over
