"""What a chat-completion answer means (consumers.servers.answers.parse_chat_answer): pure, no server.
SGLang's real answers are in test_client_fixtures."""

from __future__ import annotations

import json

import pytest

from consumers.servers.answers import (
    ChatResult,
    apportion,
    int_or_none,
    parse_chat_answer,
    parse_chat_answers,
)
from streams.errors import FatalRequestError, RetriableServerError


def answer(**fields: object) -> bytes:
    choice = {"message": {"content": "4", "reasoning_content": "2+2"}, "finish_reason": "stop"}
    return json.dumps({"choices": [choice], "model": "m", **fields}).encode()


def parse(status: int, content: bytes) -> ChatResult:
    return parse_chat_answer(status, content, base_url="http://s", latency_s=1.5, requested_model="asked")


@pytest.mark.parametrize("status", [400, 404, 413, 422])
def test_an_invalid_request_is_fatal(status: int) -> None:
    with pytest.raises(FatalRequestError) as info:
        parse(status, b"nope")
    assert info.value.status == status and not info.value.retriable
    assert str(info.value) == f"http://s: HTTP {status}: nope"


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_overload_and_server_faults_are_retriable(status: int) -> None:
    with pytest.raises(RetriableServerError) as info:
        parse(status, b"busy")
    assert info.value.status == status and info.value.retriable


@pytest.mark.parametrize(
    "content", [b"<html>", b'{"choices": []}', answer(choices=[{"finish_reason": "abort"}])]
)
def test_a_malformed_or_aborted_answer_is_retriable(content: bytes) -> None:
    with pytest.raises(RetriableServerError) as info:
        parse(200, content)
    assert info.value.status == 200


def test_an_abort_is_retriable() -> None:
    body = json.dumps({"choices": [{"message": {"content": ""}, "finish_reason": "abort"}]}).encode()
    with pytest.raises(RetriableServerError, match="aborted"):
        parse(200, body)


def test_an_answer_parses_and_missing_parts_have_defaults() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 2}}
    result = parse(200, answer(usage=usage))
    assert result == parse_chat_answer(
        200, answer(usage=usage), base_url="x", latency_s=1.5, requested_model="other"
    )
    assert result.content == "4" and result.reasoning_content == "2+2"
    assert result.usage.reasoning_tokens == 2 and result.latency_s == 1.5
    bare = json.dumps({"choices": [{"message": {}}]}).encode()
    minimal = parse_chat_answer(200, bare, base_url="x", latency_s=0.0, requested_model="asked")
    assert (minimal.content, minimal.finish_reason, minimal.model) == ("", "stop", "asked")
    assert minimal.usage.completion_tokens == 0 and minimal.tool_calls is None


def test_int_or_none() -> None:
    values: list[object] = [None, "7", 7.9, "x", []]
    assert [int_or_none(v) for v in values] == [None, 7, 7, None, None]


def n_answer(choices: list[tuple[str, str | None, str]], usage: dict[str, int]) -> bytes:
    """An answer with these (content, reasoning, finish_reason) choices, listed out of order."""
    wire = [
        {"index": i, "message": {"content": c, "reasoning_content": r}, "finish_reason": f}
        for i, (c, r, f) in enumerate(choices)
    ]
    return json.dumps({"choices": wire[::-1], "model": "m", "usage": usage}).encode()


def parse_n(content: bytes, n: int) -> list[ChatResult]:
    return parse_chat_answers(200, content, base_url="http://s", latency_s=1.0, requested_model="m", n=n)


def test_n_choices_come_in_index_order_with_the_usage_apportioned() -> None:
    choices = [("a" * 10, "r" * 30, "stop"), ("b" * 30, None, "length"), ("c" * 20, "r" * 10, "stop")]
    usage = {"prompt_tokens": 50, "completion_tokens": 107, "reasoning_tokens": 40}
    results = parse_n(n_answer(choices, usage), 3)
    assert [r.content[0] for r in results] == ["a", "b", "c"]
    assert [r.finish_reason for r in results] == ["stop", "length", "stop"]
    assert results[1].reasoning_content is None
    assert sum(r.usage.completion_tokens for r in results) == 107, "the parts sum to the request's total"
    assert sum(r.usage.reasoning_tokens for r in results) == 40
    assert [r.usage.reasoning_tokens for r in results] == [30, 0, 10]
    assert [r.usage.completion_tokens - r.usage.reasoning_tokens for r in results] == [11, 34, 22]
    assert all(r.usage.prompt_tokens == 50 and r.usage.shared_by == 3 for r in results)


def test_one_choice_keeps_the_counts_as_reported() -> None:
    [result] = parse_n(n_answer([("x", None, "stop")], {"completion_tokens": 3, "reasoning_tokens": 9}), 1)
    assert (result.usage.completion_tokens, result.usage.reasoning_tokens, result.usage.shared_by) == (
        3,
        9,
        1,
    )


def test_fewer_choices_than_asked_or_an_aborted_one_is_retriable() -> None:
    two = n_answer([("a", None, "stop"), ("b", None, "stop")], {"completion_tokens": 2})
    with pytest.raises(RetriableServerError, match="2 choices, 3 asked for"):
        parse_n(two, 3)
    aborted = n_answer([("a", None, "stop"), ("", None, "abort")], {"completion_tokens": 1})
    with pytest.raises(RetriableServerError, match="aborted"):
        parse_n(aborted, 2)


@pytest.mark.parametrize(
    ("total", "weights", "parts"),
    [
        (10, [1, 1, 1], [4, 3, 3]),
        (0, [5, 5], [0, 0]),
        (7, [0, 0], [4, 3]),
        (-3, [1, 2], [0, 0]),
        (5, [0, 9], [0, 5]),
    ],
)
def test_apportion_splits_exactly(total: int, weights: list[int], parts: list[int]) -> None:
    assert apportion(total, weights) == parts
