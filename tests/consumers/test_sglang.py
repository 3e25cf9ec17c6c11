"""What a chat-completion answer means (consumers.servers.answers.parse_chat_answer): pure, no server.
SGLang's real answers are in test_client_fixtures."""

from __future__ import annotations

import json

import pytest

from consumers.servers.answers import ChatResult, int_or_none, parse_chat_answer
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
