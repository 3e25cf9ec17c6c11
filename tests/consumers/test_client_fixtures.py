"""The server client against SGLang's real responses: the JSON fixtures of SGLang 0.5.20 and 0.5.23
in ``tests/fixtures/sglang/`` (built from SGLang's source, see its README), served over a real
socket on 127.0.0.1 by a small aiohttp app that answers every request with the fixture for it.

What must hold on either version: the running limit and the context length are discovered
(SGLang leaves the top-level ``max_running_requests`` and ``context_length`` null unless they
were set on the command line), the window starts from them, ``/metrics`` is read without
double counting, and the chat answers parse into what the consumer records.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from consumers.servers import ChatResult, ServerClient
from consumers.servers.sglang import SGLang, sglang_running_limit
from consumers.window import WindowConfig, WindowPolicy
from streams.config import GenerationSettings
from streams.errors import FatalRequestError
from tests.helpers import make_prompt, serving

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
VERSIONS = ("0.5.20", "0.5.23")


def fixture_json(version: str, name: str) -> Any:
    return json.loads((FIXTURES / version / name).read_text())


def fixture_text(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


@asynccontextmanager
async def sglang_fixture_server(version: str, chat: Callable[[], web.Response]) -> AsyncIterator[str]:
    """An HTTP server on 127.0.0.1 answering as the fixtures of ``version`` say; ``chat`` builds
    the ``/v1/chat/completions`` answer. Yields its base URL."""

    def serve_json(name: str) -> Callable[[web.Request], Any]:
        async def handler(request: web.Request) -> web.Response:
            return web.json_response(fixture_json(version, name))

        return handler

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=fixture_text(version, "metrics.txt"), content_type="text/plain")

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def chat_handler(request: web.Request) -> web.Response:
        await request.json()
        return chat()

    app = web.Application()
    app.router.add_get("/server_info", serve_json("server_info.json"))
    app.router.add_get("/model_info", serve_json("model_info.json"))
    app.router.add_get("/v1/models", serve_json("v1_models.json"))
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health_generate", health)
    app.router.add_post("/v1/chat/completions", chat_handler)
    async with serving(app) as url:
        yield url


def chat_fixture(version: str, name: str, status: int = 200) -> Callable[[], web.Response]:
    return lambda: web.json_response(fixture_json(version, name), status=status)


async def chat_against(version: str, name: str, status: int = 200) -> ChatResult:
    """One chat completion through :class:`ServerClient` against the fixture ``name``."""
    async with sglang_fixture_server(version, chat_fixture(version, name, status)) as url:
        client = ServerClient(url, GenerationSettings())
        try:
            return await client.chat(client.request_body(make_prompt(1), "kg-test"))
        finally:
            await client.aclose()


@pytest.mark.parametrize("version", VERSIONS)
async def test_discovery_finds_the_running_limit_and_context_that_sglang_leaves_null(version: str) -> None:
    server_info = fixture_json(version, "server_info.json")
    assert server_info["max_running_requests"] is None, "the fixture is a server started without the flag"
    assert server_info["context_length"] is None
    per_rank = [s["effective_max_running_requests_per_dp"] for s in server_info["internal_states"]]
    max_model_len = fixture_json(version, "v1_models.json")["data"][0]["max_model_len"]
    async with sglang_fixture_server(version, chat_fixture(version, "chat_thinking.json")) as url:
        client = ServerClient(url, GenerationSettings())
        try:
            info = await client.discover(wait_s=10)
        finally:
            await client.aclose()
    assert info.kind == "sglang"
    assert info.version == version
    assert info.max_running_requests == sum(per_rank) > 0
    assert info.context_length == max_model_len > 0
    assert info.max_total_num_tokens == server_info["max_total_num_tokens"]
    model_info = fixture_json(version, "model_info.json")
    assert info.model == (model_info.get("served_model_name") or model_info["model_path"])


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_window_starts_full_from_the_discovered_limit(version: str) -> None:
    """The window no longer starts at 8 and crawls up: SGLang's automatic running limit is in the
    thousands, so it starts at the configured cap and the KV cache decides what runs."""
    async with sglang_fixture_server(version, chat_fixture(version, "chat_thinking.json")) as url:
        client = ServerClient(url, GenerationSettings())
        try:
            info = await client.discover(wait_s=10)
            load = await client.load()
        finally:
            await client.aclose()
    policy = WindowPolicy(WindowConfig(max_size=256, max_running=info.max_running_requests, target_queue=4))
    assert info.max_running_requests is not None
    assert policy.size == min(256, info.max_running_requests + 4)
    assert load is not None and load.token_usage is not None
    assert 0.0 <= load.token_usage <= 1.0


def test_two_data_parallel_ranks_are_summed() -> None:
    server_info = fixture_json("0.5.20", "server_info.json")
    rank = dict(server_info["internal_states"][0])
    two = {**server_info, "internal_states": [rank, {**rank, "dp_rank": 1}]}
    assert sglang_running_limit(two) == 2 * rank["effective_max_running_requests_per_dp"]
    assert sglang_running_limit({**server_info, "internal_states": []}) is None
    assert sglang_running_limit({"max_running_requests": 48, "internal_states": []}) == 48


@pytest.mark.parametrize("version", VERSIONS)
def test_metrics_read_the_running_and_queued_gauges(version: str) -> None:
    text = fixture_text(version, "metrics.txt")
    load = SGLang().parse_load(text)
    assert load is not None
    running = _gauge(text, "sglang:num_running_reqs")
    queued = _gauge(text, "sglang:num_queue_reqs")
    assert (load.running, load.queued) == (running, queued)


@pytest.mark.parametrize("version", VERSIONS)
def test_per_priority_series_are_not_added_to_the_total(version: str) -> None:
    """With ``--enable-priority-scheduling`` SGLang writes the total under ``priority=""`` beside
    one series per priority: summing every series would double the load."""
    text = fixture_text(version, "metrics_priority.txt")
    assert 'priority="' in text
    load = SGLang().parse_load(text)
    assert load is not None
    assert load.running == _gauge(text, "sglang:num_running_reqs", priority="")
    assert load.queued == _gauge(text, "sglang:num_queue_reqs", priority="")
    assert load.running < _gauge_all(text, "sglang:num_running_reqs"), "the fixture has per-priority series"


def _samples(text: str, name: str) -> list[tuple[str, float]]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line.rpartition(" ")
            out.append((labels, float(value)))
    return out


def _gauge(text: str, name: str, *, priority: str | None = None) -> int:
    samples = _samples(text, name)
    if priority is not None:
        samples = [(labels, v) for labels, v in samples if f'priority="{priority}"' in labels]
    assert samples, f"{name} missing from the fixture"
    return int(sum(v for _, v in samples))


def _gauge_all(text: str, name: str) -> int:
    return int(sum(v for _, v in _samples(text, name)))


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_thinking_answer_keeps_reasoning_apart_from_content(version: str) -> None:
    wire = fixture_json(version, "chat_thinking.json")
    result = await chat_against(version, "chat_thinking.json")
    message = wire["choices"][0]["message"]
    assert result.content == message["content"] != ""
    assert result.reasoning_content == message["reasoning_content"]
    assert result.finish_reason == "stop"
    assert result.usage.completion_tokens == wire["usage"]["completion_tokens"]
    assert result.usage.reasoning_tokens > 0
    if wire["usage"].get("prompt_tokens_details") is None:
        assert result.usage.cached_tokens is None, "nothing cached is 'not reported', not 0"


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_budget_eaten_by_reasoning_leaves_empty_content(version: str) -> None:
    result = await chat_against(version, "chat_reasoning_ate_budget.json")
    assert result.content == ""
    assert result.reasoning_content
    assert result.finish_reason == "length"


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_cached_prefix_is_recorded(version: str) -> None:
    wire = fixture_json(version, "chat_cached.json")
    result = await chat_against(version, "chat_cached.json")
    assert result.usage.cached_tokens == wire["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_tool_call_is_parsed(version: str) -> None:
    result = await chat_against(version, "chat_tool_call.json")
    assert result.finish_reason == "tool_calls"
    assert result.tool_calls and result.tool_calls[0]["function"]["name"]


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_prompt_longer_than_the_context_is_fatal(version: str) -> None:
    with pytest.raises(FatalRequestError) as caught:
        await chat_against(version, "error_context_length.json", 400)
    assert caught.value.status == 400
