"""The chat request of a prompt (consumers.servers.requests): pure, no server."""

from __future__ import annotations

import re

import msgspec
import pytest

from consumers.servers.requests import (
    chat_request_body,
    completion_digest,
    last_user_text,
    record_params,
    request_digest,
    request_id,
    thinking_requested,
)
from streams.config import GenerationSettings
from streams.records import GenerationParams, PromptMetadata, PromptRecord
from tests.helpers import make_prompt


def test_every_sampling_parameter_is_sent_when_set_and_extra_fields_go_last() -> None:
    bare = chat_request_body(make_prompt(1), "kg-1", GenerationSettings())
    for name in ("top_k", "min_p", "frequency_penalty", "presence_penalty", "seed", "stop", "logprobs"):
        assert name not in bare, f"{name} is left to the server unless set"
    g = GenerationSettings(
        top_k=20,
        min_p=0.05,
        repetition_penalty=1.1,
        frequency_penalty=0.3,
        presence_penalty=-0.2,
        stop=["END"],
        seed=9,
        logprobs=True,
        top_logprobs=2,
        extra_body={"stop_token_ids": [7], "top_k": 40},
    )
    row = msgspec.structs.replace(
        make_prompt(1), params=GenerationParams(presence_penalty=0.5, extra_body={"no_stop_trim": True})
    )
    body = chat_request_body(row, "kg-1", g)
    assert body["min_p"] == 0.05 and body["repetition_penalty"] == 1.1 and body["frequency_penalty"] == 0.3
    assert (
        body["stop"] == ["END"]
        and body["seed"] == 9
        and body["logprobs"] is True
        and body["top_logprobs"] == 2
    )
    assert body["presence_penalty"] == 0.5, "the row's value wins"
    assert body["top_k"] == 40 and body["stop_token_ids"] == [7], "--extra-body verbatim, over the settings"
    assert body["no_stop_trim"] is True and "extra_body" not in body
    assert record_params(body)["stop_token_ids"] == [7], "recorded with the completion"


def test_extra_body_names_are_checked_against_sglangs_request() -> None:
    with pytest.raises(
        ValueError,
        match=r"'stop_token_id' is not a field of SGLang's chat request \(did you mean stop_token_ids",
    ):
        GenerationSettings(extra_body={"stop_token_id": [7]})
    with pytest.raises(ValueError, match="kafkagen sets it from"):
        GenerationSettings(extra_body={"messages": []})
    with pytest.raises(ValueError, match=r"known: .*repetition_penalty"):
        GenerationSettings(extra_body={"qqqqqqqq": 1})


def test_the_body_has_the_defaults_then_the_records_overrides() -> None:
    g = GenerationSettings(model="m", max_tokens=100, chat_template_kwargs={"enable_thinking": True, "x": 1})
    prompt = PromptRecord(
        id="p",
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "f"}}],
        params=GenerationParams(max_tokens=7, chat_template_kwargs={"enable_thinking": False}),
        metadata=PromptMetadata(source="t", line=1),
    )
    body = chat_request_body(prompt, "kg-1", g)
    assert body["model"] == "m"
    assert body["max_tokens"] == 7
    assert body["chat_template_kwargs"] == {"enable_thinking": False, "x": 1}
    assert g.chat_template_kwargs == {"enable_thinking": True, "x": 1}  # the defaults are not touched
    assert body["tools"] == prompt.tools
    assert body["rid"] == "kg-1" and body["stream"] is False
    assert chat_request_body(prompt, "kg-1", g, model="served")["model"] == "served"
    assert "tools" not in chat_request_body(make_prompt(1), "kg-1", g)


def test_record_params_leave_out_the_conversation_and_transport_fields() -> None:
    body = chat_request_body(make_prompt(1, max_tokens=5), "kg-1", GenerationSettings())
    params = record_params(body)
    assert not {"messages", "tools", "rid", "stream"} & params.keys()
    assert params["max_tokens"] == 5
    assert thinking_requested(body)
    assert not thinking_requested({"chat_template_kwargs": None})
    assert not thinking_requested({})


def test_request_ids_are_deterministic_fixed_length_and_never_prefixes() -> None:
    one = request_id("run", "p1", 0, 1)
    assert one == request_id("run", "p1", 0, 1)
    assert re.fullmatch(r"kg-[0-9a-f]{40}-[0-9a-f]{8}", one)
    others = [request_id("run", "p1", 0, 10), request_id("run", "p1", 1, 1), request_id("run", "p10", 0, 1)]
    assert all(len(o) == len(one) and o != one and not o.startswith(one) for o in others)


def test_last_user_text() -> None:
    def prompt(messages: list[dict[str, object]]) -> PromptRecord:
        return PromptRecord(id="p", messages=messages, metadata=PromptMetadata(source="t", line=1))

    assert last_user_text(prompt([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])) == "b"
    parts = [{"type": "text", "text": "x"}, {"type": "image_url"}, {"type": "text", "text": "y"}]
    assert last_user_text(prompt([{"role": "user", "content": parts}])) == "x  y"
    assert last_user_text(prompt([{"role": "system", "content": "s"}])) is None
    assert last_user_text(prompt([{"role": "user", "content": None}])) is None


def test_a_completion_digest_is_the_digest_of_the_request_it_answered() -> None:
    g = GenerationSettings(model="m")
    tools = [{"type": "function", "function": {"name": "f"}}]
    prompt = msgspec.structs.replace(make_prompt(1, max_tokens=5), tools=tools)
    body = chat_request_body(prompt, "kg-1", g)
    assert completion_digest(prompt, record_params(body)) == request_digest(body)
    assert request_digest(body) == request_digest(chat_request_body(prompt, "kg-other-rid", g)), "ids aside"
    assert request_digest(body) == request_digest(dict(reversed(list(body.items())))), "key order aside"
    changed = [
        chat_request_body(prompt, "kg-1", g, model="other"),
        chat_request_body(msgspec.structs.replace(prompt, tools=None), "kg-1", g),
        chat_request_body(make_prompt(2, max_tokens=5), "kg-1", g),
        chat_request_body(make_prompt(1, max_tokens=6), "kg-1", g),
        chat_request_body(prompt, "kg-1", g.with_budget(thinking=False)),
    ]
    assert len({request_digest(b) for b in [body, *changed]}) == 6, "any change asks something else"
