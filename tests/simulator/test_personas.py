"""The simulator's vLLM and generic OpenAI-compatible personas: the endpoints each serves and
none other, the shapes of tests/fixtures/vllm/0.11.0, vLLM's errors and limits; and that
discovery (consumers.servers) recognises each persona as its kind, and that the in-flight window
adapts on the generic one from completions and overloads alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.servers import ServerClient
from consumers.servers.registry import FALLBACK, kind_named
from consumers.window import WindowConfig, WindowPolicy
from simulator import DEFAULT_PROFILE, SimulatedServer
from simulator.cli import build_parser, profile_from_args
from streams.config import GenerationSettings
from streams.errors import ConfigError, FatalRequestError, RetriableServerError
from tests.helpers import make_prompt

pytestmark = pytest.mark.timeout(20)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "0.11.0"
MODEL = DEFAULT_PROFILE.served_model_name


def persona(name: str, **changes: Any) -> SimulatedServer:
    profile = replace(DEFAULT_PROFILE, name="test", warmup_s=0.0, persona=name, **changes)
    return SimulatedServer(profile, time_scale=10_000, port=0)


@pytest.fixture
async def vllm() -> AsyncIterator[SimulatedServer]:
    async with persona("vllm") as server:
        yield server


@pytest.fixture
async def generic() -> AsyncIterator[SimulatedServer]:
    async with persona("openai") as server:
        yield server


def body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Tell me something."}], **extra}


def keys(data: object) -> object:
    """The nested key structure of a JSON value (dicts by key, lists by their first item)."""
    if isinstance(data, dict):
        return {k: keys(v) for k, v in data.items()}
    if isinstance(data, list):
        return [keys(data[0])] if data else []
    return None


def test_an_unknown_persona_is_refused() -> None:
    with pytest.raises(ConfigError, match="persona"):
        replace(DEFAULT_PROFILE, persona="tgi")
    assert profile_from_args(build_parser().parse_args(["--persona", "vllm"])).persona == "vllm"


async def test_vllm_serves_vllms_endpoints_and_no_sglang_one(vllm: SimulatedServer) -> None:
    async with httpx.AsyncClient(base_url=vllm.url, timeout=5) as http:
        for path in ("/server_info", "/get_server_info", "/model_info", "/health_generate", "/props"):
            assert (await http.get(path)).status_code == 404, path
        assert (await http.post("/abort_request", json={"rid": "x"})).status_code == 404
        assert (await http.get("/health")).status_code == 200
        assert (await http.get("/version")).json() == {"version": "0.11.0"}
        models = (await http.get("/v1/models")).json()
        assert keys(models) == keys(json.loads((FIXTURES / "v1_models.json").read_text()))
        assert models["data"][0]["max_model_len"] == DEFAULT_PROFILE.context_length
        metrics = (await http.get("/metrics")).text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert f'{name}{{model_name="{MODEL}",engine="0"}}' in metrics
    assert "sglang:" not in metrics


@pytest.mark.parametrize("fixture", ["chat_thinking.json", "chat_tool_call.json"])
async def test_vllm_answers_in_vllms_shape(vllm: SimulatedServer, fixture: str) -> None:
    recorded = json.loads((FIXTURES / fixture).read_text())
    tools = fixture == "chat_tool_call.json"
    extra: dict[str, Any] = {"request_id": "kg-1", "rid": "ignored", "separate_reasoning": False}
    if tools:
        weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
        extra |= {"tools": [weather], "tool_choice": "required"}
    async with httpx.AsyncClient(base_url=vllm.url, timeout=5) as http:
        answer = (await http.post("/v1/chat/completions", json=body(**extra))).json()
        extra["request_id"] = "kg-2"
        again = (await http.post("/v1/chat/completions", json=body(**extra))).json()
    assert answer["id"] == "chatcmpl-kg-1"
    # prompt_tokens_details: null until a prompt has cached tokens (serving_chat.py)
    assert answer["usage"]["prompt_tokens_details"] is None
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    message = answer["choices"][0]["message"]
    assert message["reasoning_content"], "vLLM splits the reasoning whatever separate_reasoning says"
    expected = keys(recorded)
    assert isinstance(expected, dict)
    expected["usage"]["prompt_tokens_details"] = keys(answer["usage"]["prompt_tokens_details"])
    if not tools:
        assert message["tool_calls"] == []
        assert keys(answer) == expected
    else:
        assert answer["choices"][0]["finish_reason"] == "tool_calls" and message["content"] is None
        assert keys(message["tool_calls"]) == keys(recorded["choices"][0]["message"]["tool_calls"])
    assert "reasoning_tokens" not in answer["usage"]


async def test_vllm_cut_inside_its_thinking_keeps_the_think_block_in_content(vllm: SimulatedServer) -> None:
    async with httpx.AsyncClient(base_url=vllm.url, timeout=5) as http:
        answer = (await http.post("/v1/chat/completions", json=body(max_tokens=3))).json()
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "length"
    assert (
        choice["message"]["content"].startswith("<think>") and choice["message"]["reasoning_content"] is None
    )


async def test_vllm_refuses_as_vllm_does(vllm: SimulatedServer) -> None:
    recorded = json.loads((FIXTURES / "error_context_length.json").read_text())
    context = DEFAULT_PROFILE.context_length
    async with httpx.AsyncClient(base_url=vllm.url, timeout=5) as http:
        too_long = await http.post("/v1/chat/completions", json=body(max_tokens=context))
        assert too_long.status_code == 400
        error = too_long.json()
        assert keys(error) == keys(recorded["body"])
        assert error["error"]["type"] == "BadRequestError"
        assert error["error"]["message"].startswith("'max_tokens' or 'max_completion_tokens' is too large")
        assert error["error"]["message"].endswith(" None")
        bad = await http.post("/v1/chat/completions", json=body(max_tokens="many"))
        assert bad.status_code == 400 and set(bad.json()) == {"error"}
        other = await http.post("/v1/chat/completions", json=dict(body(), model="other"))
        assert other.status_code == 404 and other.json()["error"]["type"] == "NotFoundError"
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    async with persona("vllm", tool_call_parser=None) as plain, httpx.AsyncClient(timeout=5) as http:
        auto = await http.post(f"{plain.url}/v1/chat/completions", json=body(tools=tools))
    assert auto.status_code == 400 and "--enable-auto-tool-choice" in auto.json()["error"]["message"]


async def test_a_vllm_request_id_in_flight_is_refused_as_vllm_words_it() -> None:
    slow = replace(DEFAULT_PROFILE, decode_tok_s_min=1.0, decode_tok_s_max=1.0, warmup_s=0.0)
    async with (
        SimulatedServer(replace(slow, persona="vllm"), time_scale=1, port=0) as server,
        httpx.AsyncClient(base_url=server.url, timeout=5) as http,
    ):
        running = asyncio.ensure_future(http.post("/v1/chat/completions", json=body(request_id="same")))
        while server.stats().requests_received == 0:  # noqa: ASYNC110 - the engine has no "received" event
            await asyncio.sleep(0.01)
        again = await http.post("/v1/chat/completions", json=body(request_id="same"))
        running.cancel()
    assert again.status_code == 400
    assert again.json()["error"]["message"] == "Request id chatcmpl-same already running."


async def test_generic_serves_models_and_chat_only(generic: SimulatedServer) -> None:
    async with httpx.AsyncClient(base_url=generic.url, timeout=5) as http:
        for path in ("/metrics", "/health", "/version", "/server_info", "/get_server_info", "/props"):
            assert (await http.get(path)).status_code == 404, path
        models = (await http.get("/v1/models")).json()
        assert set(models["data"][0]) == {"id", "object", "created", "owned_by"}
        answer = (await http.post("/v1/chat/completions", json=body(request_id="kg-2", max_tokens=50))).json()
    assert set(answer) == {"id", "object", "created", "model", "choices", "usage"}
    assert set(answer["choices"][0]) == {"index", "message", "logprobs", "finish_reason"}
    assert set(answer["choices"][0]["message"]) <= {"role", "content", "reasoning_content", "tool_calls"}
    assert answer["id"] != "chatcmpl-kg-2"
    assert set(answer["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}


@pytest.mark.parametrize(("name", "kind"), [("vllm", "vllm"), ("openai", "openai"), ("sglang", "sglang")])
async def test_discovery_recognises_each_persona_as_its_kind(name: str, kind: str) -> None:
    async with persona(name) as server:
        client = ServerClient(server.url, GenerationSettings())
        try:
            info = await client.discover(wait_s=10)
            load = await client.load()
            assert await client.healthy()
            result = await client.chat(client.request_body(make_prompt(1, max_tokens=64), "kg-run-p1-1"))
        finally:
            await client.aclose()
    assert client.kind is kind_named(kind)
    assert info.kind == kind and info.model == MODEL
    if kind == "openai":
        assert client.kind is FALLBACK and load is None and info.context_length is None
    else:
        assert load is not None and info.context_length == DEFAULT_PROFILE.context_length
    if kind == "vllm":
        assert info.version == "0.11.0" and info.max_running_requests is None
    assert result.finish_reason in ("stop", "length")


async def test_a_vllm_prompt_over_the_context_is_fatal(vllm: SimulatedServer) -> None:
    client = ServerClient(vllm.url, GenerationSettings())
    try:
        await client.discover(wait_s=10)
        request = client.request_body(make_prompt(1, max_tokens=DEFAULT_PROFILE.context_length), "kg-r-p1-1")
        assert "rid" not in request and request["request_id"] == "kg-r-p1-1"
        with pytest.raises(FatalRequestError, match="too large"):
            await client.chat(request)
    finally:
        await client.aclose()


async def test_the_window_adapts_on_a_generic_server_from_completions_and_overloads() -> None:
    """No load series: the window grows by one per window of completions and halves on a 503."""
    async with persona("openai") as server:
        client = ServerClient(server.url, GenerationSettings())
        window = WindowPolicy(WindowConfig(initial_size=4, cooldown_s=5.0))
        now = 0.0
        try:
            await client.discover(wait_s=10)
            assert await client.load() is None  # nothing for observe_metrics
            for i in range(4 + 5 + 6):
                result = await client.chat(client.request_body(make_prompt(i, max_tokens=8), f"kg-r-p{i}-1"))
                now += 1.0
                window.observe_completion(result.latency_s, now)
            assert window.size == 7
            server.set_faults(error_503_count=1)
            with pytest.raises(RetriableServerError) as refused:
                await client.chat(client.request_body(make_prompt(99, max_tokens=8), "kg-r-p99-1"))
            assert refused.value.status == 503
            window.observe_overload(now)
        finally:
            await client.aclose()
    assert window.size == 3
