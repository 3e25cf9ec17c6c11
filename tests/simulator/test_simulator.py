"""Tests of the SGLang-API simulator over real sockets on 127.0.0.1.

Time runs 10–1000× faster than real time, so every test takes well under a second.
Latency checks read the simulator's ``X-Simulator-*-Seconds`` headers (simulated
seconds), which do not depend on wall-clock jitter.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.servers.requests import request_id
from simulator import (
    DEFAULT_PROFILE,
    FaultConfig,
    SimulatedServer,
    SimulatorProfile,
    estimate_prompt_tokens,
    plan_output,
    request_seed,
)
from streams.errors import ConfigError
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(10)

REPO = Path(__file__).resolve().parents[2]
FAST = replace(DEFAULT_PROFILE, name="test", warmup_s=0.0)
"""The default profile without warm-up (run at time_scale 1000)."""


def steady(**changes: Any) -> SimulatorProfile:
    """Exactly 100 tokens/s per request, no batch slowdown, no prefill or warm-up time, and
    outputs that always run to ``max_tokens``."""
    profile = replace(
        DEFAULT_PROFILE,
        name="steady",
        thinking_median_tokens=1e9,
        no_thinking_median_tokens=1e9,
        decode_tok_s_min=100.0,
        decode_tok_s_max=100.0,
        batch_slowdown=0.0,
        prefill_tok_s=1e12,
        warmup_s=0.0,
    )
    return replace(profile, **changes)


def chat(content: str = "Tell me something.", **extra: Any) -> dict[str, Any]:
    return {"model": "qwen3", "messages": [{"role": "user", "content": content}], **extra}


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as http:
        yield http


@pytest.fixture
async def server() -> AsyncIterator[SimulatedServer]:
    async with SimulatedServer(FAST, time_scale=10_000, port=0) as simulator:
        yield simulator


async def post_chat(http: httpx.AsyncClient, server: SimulatedServer, body: dict[str, Any]) -> httpx.Response:
    return await http.post(f"{server.url}/v1/chat/completions", json=body)


async def ok_chat(http: httpx.AsyncClient, server: SimulatedServer, body: dict[str, Any]) -> dict[str, Any]:
    response = await post_chat(http, server, body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def wait_until(check: Callable[[], bool], within_s: float = 2.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def e2e_s(response: httpx.Response) -> float:
    return float(response.headers["X-Simulator-E2E-Seconds"])


def queue_s(response: httpx.Response) -> float:
    return float(response.headers["X-Simulator-Queue-Seconds"])


# -- response shape --------------------------------------------------------------------


async def test_thinking_response_has_reasoning_split_and_usage(
    client: httpx.AsyncClient, server: SimulatedServer
) -> None:
    body = await ok_chat(client, server, chat(rid="shape-1"))  # no max_tokens: budget is the context

    assert body["id"] == "shape-1"
    assert body["object"] == "chat.completion"
    assert body["model"] == "qwen3"
    assert isinstance(body["created"], int)
    [choice] = body["choices"]
    message, usage = choice["message"], body["usage"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "stop"
    assert message["role"] == "assistant"
    assert message["tool_calls"] is None  # SGLang 0.5.20 keeps the key
    assert message["content"] and message["reasoning_content"]
    n_reasoning, n_answer = len(message["reasoning_content"].split()), len(message["content"].split())
    assert usage["reasoning_tokens"] == n_reasoning
    assert "completion_tokens_details" not in usage  # 0.5.20 has no such field
    assert usage["completion_tokens"] == n_reasoning + n_answer
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert 0 < usage["prompt_tokens"] < 20


async def test_thinking_off_answers_without_reasoning(
    client: httpx.AsyncClient, server: SimulatedServer
) -> None:
    for extra in ({"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_effort": "none"}):
        body = await ok_chat(client, server, chat(rid="off", **extra))
        message, usage = body["choices"][0]["message"], body["usage"]
        assert message["reasoning_content"] is None
        assert message["content"]
        assert usage["reasoning_tokens"] == 0
        assert "completion_tokens_details" not in usage
        assert usage["completion_tokens"] == len(message["content"].split())


async def test_default_thinking_comes_from_the_profile(client: httpx.AsyncClient) -> None:
    profile = replace(FAST, default_enable_thinking=False)
    async with SimulatedServer(profile, time_scale=1000) as server:
        body = await ok_chat(client, server, chat(rid="d"))
        assert body["choices"][0]["message"]["reasoning_content"] is None
        body = await ok_chat(client, server, chat(rid="d", chat_template_kwargs={"enable_thinking": True}))
        assert body["choices"][0]["message"]["reasoning_content"]


async def test_separate_reasoning_false_keeps_the_think_block_in_content(
    client: httpx.AsyncClient, server: SimulatedServer
) -> None:
    body = await ok_chat(client, server, chat(rid="sep", separate_reasoning=False))
    message = body["choices"][0]["message"]
    assert message["reasoning_content"] is None
    assert message["content"].startswith("<think>\n")
    assert "\n</think>\n\n" in message["content"]


async def test_output_is_deterministic_per_rid_or_messages(
    client: httpx.AsyncClient, server: SimulatedServer
) -> None:
    first = await ok_chat(client, server, chat(rid="same"))
    again = await ok_chat(client, server, chat("different prompt, same rid", rid="same"))
    other = await ok_chat(client, server, chat(rid="other"))
    assert first["choices"] == again["choices"]
    assert first["usage"]["completion_tokens"] == again["usage"]["completion_tokens"]
    assert first["choices"] != other["choices"]

    no_rid = await ok_chat(client, server, chat("no rid"))
    no_rid_again = await ok_chat(client, server, chat("no rid"))
    no_rid_other = await ok_chat(client, server, chat("no rid, other messages"))
    assert no_rid["choices"] == no_rid_again["choices"]
    assert no_rid["id"] != no_rid_again["id"]
    assert no_rid["choices"] != no_rid_other["choices"]


async def test_max_tokens_cuts_the_output_with_finish_reason_length(
    client: httpx.AsyncClient, server: SimulatedServer
) -> None:
    body = await ok_chat(client, server, chat(rid="short", max_tokens=20))
    choice, usage = body["choices"][0], body["usage"]
    assert choice["finish_reason"] == "length"
    assert usage["completion_tokens"] == 20
    # The budget ran out inside the reasoning: Qwen3's parser puts it all in reasoning_content.
    assert choice["message"]["content"] == ""
    assert usage["reasoning_tokens"] == 20 == len(choice["message"]["reasoning_content"].split())

    # max_completion_tokens wins over max_tokens; both count reasoning and answer together.
    body = await ok_chat(client, server, chat(rid="short", max_tokens=20, max_completion_tokens=7))
    assert body["usage"]["completion_tokens"] == 7

    full = await ok_chat(client, server, chat(rid="short"))
    cut = full["usage"]["reasoning_tokens"] + 3
    body = await ok_chat(client, server, chat(rid="short", max_tokens=cut))
    assert body["choices"][0]["finish_reason"] == "length"
    assert (
        body["choices"][0]["message"]["reasoning_content"]
        == full["choices"][0]["message"]["reasoning_content"]
    )
    assert len(body["choices"][0]["message"]["content"].split()) == 3


async def test_tools_give_tool_calls_with_json_arguments(
    client: httpx.AsyncClient, server: SimulatedServer
) -> None:
    body = await ok_chat(client, server, chat(rid="t", tools=[WEATHER_TOOL], tool_choice="required"))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == ""
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function"
    assert call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    arguments = json.loads(call["function"]["arguments"])
    assert isinstance(arguments["city"], str)
    assert set(arguments) <= {"city", "days"}

    finishes = []
    for i in range(30):
        body = await ok_chat(client, server, chat(rid=f"auto-{i}", tools=[WEATHER_TOOL], max_tokens=30000))
        finishes.append(body["choices"][0]["finish_reason"])
    assert "tool_calls" in finishes and "stop" in finishes

    body = await ok_chat(client, server, chat(rid="t", tools=[WEATHER_TOOL], tool_choice="none"))
    assert body["choices"][0]["message"]["tool_calls"] is None


# -- request errors --------------------------------------------------------------------


async def test_duplicate_in_flight_rid_is_rejected(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(steady(), time_scale=10) as server:
        first = asyncio.create_task(post_chat(client, server, chat(rid="dup", max_tokens=1000)))  # 1 s wall
        await wait_until(lambda: server.stats().running == 1)

        duplicate = await post_chat(client, server, chat(rid="dup", max_tokens=5))

        assert duplicate.status_code == 400
        assert duplicate.json()["message"] == "Duplicate request ID detected: dup"
        assert (await first).status_code == 200
        assert (await post_chat(client, server, chat(rid="dup", max_tokens=5))).status_code == 200
        assert server.stats().requests_rejected == 1


async def test_too_long_prompt_is_rejected(client: httpx.AsyncClient, server: SimulatedServer) -> None:
    response = await post_chat(client, server, chat("word " * 30_000))  # ~37,500 tokens > 32,768
    assert response.status_code == 400
    assert "longer than the model's context length (32768 tokens)" in response.json()["message"]

    response = await post_chat(client, server, chat("word " * 4_000, max_tokens=30_000))  # 5,000 + 30,000
    assert response.status_code == 400
    assert response.json()["message"].startswith("Requested token count exceeds the model's maximum context")

    response = await post_chat(client, server, {"messages": []})
    assert response.status_code == 400
    assert server.stats().requests_rejected == 3
    assert server.stats().requests_received == 0


# -- batching model --------------------------------------------------------------------


def test_per_request_rate_falls_with_batch_size_and_throughput_rises_sublinearly() -> None:
    profile = DEFAULT_PROFILE
    assert profile.per_request_rate(1) == pytest.approx(245.0)
    assert profile.per_request_rate(16) == pytest.approx(245.0 / 1.75)
    throughputs = [profile.total_throughput(b) for b in range(1, 17)]
    assert all(b > a for a, b in itertools.pairwise(throughputs))
    assert throughputs[15] < 16 * throughputs[0]


async def test_continuous_batching_queues_beyond_max_running_requests(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(steady(max_running_requests=2), time_scale=10) as server:
        finished: list[str] = []

        async def run(rid: str) -> httpx.Response:
            response = await post_chat(client, server, chat(rid=rid, max_tokens=100))  # 1 s simulated
            finished.append(rid)
            return response

        async def metrics() -> str:
            return (await client.get(f"{server.url}/metrics")).text

        first = [asyncio.create_task(run(rid)) for rid in ("a", "b")]
        await wait_until(lambda: server.stats().running == 2)
        later = [asyncio.create_task(run(rid)) for rid in ("c", "d")]
        await wait_until(lambda: server.stats().queued == 2)
        text = await metrics()
        assert metric(text, "sglang:num_running_reqs") == 2
        assert metric(text, "sglang:num_queue_reqs") == 2
        assert metric(text, "sglang:gen_throughput") == pytest.approx(200.0)

        a, b = await asyncio.gather(*first)
        c, d = await asyncio.gather(*later)

        assert set(finished[:2]) == {"a", "b"}
        assert queue_s(a) == queue_s(b) == 0
        assert e2e_s(a) == pytest.approx(1.0, abs=1e-6)
        for queued in (c, d):
            assert 0.5 < queue_s(queued) <= 1.0  # waited for a slot
            assert e2e_s(queued) == pytest.approx(queue_s(queued) + 1.0, abs=1e-6)
        stats = server.stats()
        assert (stats.requests_started, stats.requests_finished, stats.running) == (4, 4, 0)
        assert 0 < stats.mean_running <= 2


async def test_requests_sharing_the_batch_decode_slower(client: httpx.AsyncClient) -> None:
    # alpha = 1: two running requests each decode at half speed. 400 tokens take 4 s simulated
    # alone, 1 s of wall time: y overlaps x however late a loaded machine sends it within that.
    async with SimulatedServer(steady(batch_slowdown=1.0), time_scale=4) as server:
        alone = await post_chat(client, server, chat(rid="alone", max_tokens=400))
        assert e2e_s(alone) == pytest.approx(4.0, abs=1e-6)
        await asyncio.gather(*(client.get(f"{server.url}/health") for _ in range(2)))  # open 2 connections
        x, y = await asyncio.gather(*(post_chat(client, server, chat(rid=r, max_tokens=400)) for r in "xy"))
        # With y arriving d seconds after x, both take exactly 8 - d (x alone for d, then both at half
        # speed): slower than alone while they overlap (d < 4).
        assert e2e_s(x) == pytest.approx(e2e_s(y), abs=1e-5)
        assert 4.0 + 1e-3 < e2e_s(x) <= 8.0 + 1e-6


async def test_first_request_after_start_is_slow(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(steady(warmup_s=3.0), time_scale=100) as server:
        first = await post_chat(client, server, chat(rid="w1", max_tokens=10))
        second = await post_chat(client, server, chat(rid="w2", max_tokens=10))
        assert e2e_s(first) == pytest.approx(3.1, abs=1e-6)
        assert e2e_s(second) == pytest.approx(0.1, abs=1e-6)


async def test_client_disconnect_aborts_the_request_and_frees_its_slot(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(steady(max_running_requests=1), time_scale=100) as server:
        with pytest.raises(httpx.ReadTimeout):  # 10,000 tokens would take 1 s of wall time
            await client.post(
                f"{server.url}/v1/chat/completions",
                json=chat(rid="gone", max_tokens=10_000),
                timeout=httpx.Timeout(10.0, read=0.1),  # the connect must not time out on a busy machine
            )
        await wait_until(lambda: server.stats().running == 0, within_s=1.0)  # polled every 4 s simulated
        assert server.stats().requests_aborted == 1

        after = await post_chat(client, server, chat(rid="next", max_tokens=10))
        assert after.status_code == 200
        assert queue_s(after) == 0
        assert (
            metric((await client.get(f"{server.url}/metrics")).text, "sglang:num_aborted_requests_total") == 1
        )


async def test_abort_request_endpoint_ends_the_request_with_abort(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(steady(), time_scale=10) as server:
        pending = asyncio.create_task(post_chat(client, server, chat(rid="stop-me", max_tokens=1000)))
        await wait_until(lambda: server.stats().generation_tokens_total >= 5)
        assert (await client.post(f"{server.url}/abort_request", json={"rid": "stop-me"})).status_code == 200
        body = (await pending).json()
        assert body["choices"][0]["finish_reason"] == "abort"
        assert 5 <= body["usage"]["completion_tokens"] < 1000


async def test_abort_request_ends_every_request_whose_rid_starts_with_it(client: httpx.AsyncClient) -> None:
    """As in SGLang, an abort matches rids by prefix: aborting ``x-1`` ends ``x-10`` too."""
    async with SimulatedServer(steady(), time_scale=10) as server:
        tasks = {
            rid: asyncio.create_task(post_chat(client, server, chat(rid=rid, max_tokens=1000)))
            for rid in ("x-1", "x-10", "x-2")
        }
        await wait_until(lambda: server.stats().generation_tokens_total >= 15)
        assert (await client.post(f"{server.url}/abort_request", json={"rid": "x-1"})).status_code == 200
        reasons = {rid: (await task).json()["choices"][0]["finish_reason"] for rid, task in tasks.items()}
        assert reasons == {"x-1": "abort", "x-10": "abort", "x-2": "length"}


def test_request_ids_are_deterministic_and_never_a_prefix_of_one_another() -> None:
    first = request_id("run", "p1", 0, 1)
    assert first == request_id("run", "p1", 0, 1), "a restarted consumer sends the same rid"
    others = [
        request_id("run", "p1", 0, 10),
        request_id("run", "p1-0-1", 0, 1),
        request_id("run", "p1", 1, 1),
        request_id("run2", "p1", 0, 1),
    ]
    rids = [first, *others]
    assert len(set(rids)) == len(rids)
    assert not [(a, b) for a in rids for b in rids if a != b and b.startswith(a)]


# -- health, info, metrics ---------------------------------------------------------------


async def test_health_is_503_while_starting_but_chat_is_served(client: httpx.AsyncClient) -> None:
    # 200 s simulated = 1 s wall: room for three requests on a busy machine
    async with SimulatedServer(replace(FAST, startup_s=200.0), time_scale=200) as server:
        assert (await client.get(f"{server.url}/health")).status_code == 503
        assert (await client.get(f"{server.url}/health_generate")).status_code == 503
        # SGLang accepts generation during warm-up (no ServerStatus check on the chat path)
        assert (await post_chat(client, server, chat(max_tokens=5))).status_code == 200

        async def started() -> bool:
            return (await client.get(f"{server.url}/health")).status_code == 200

        await wait_for(started, timeout_s=5, what="start-up to end (200 simulated s)", interval_s=0.05)
        assert (await client.get(f"{server.url}/health_generate")).status_code == 200
        assert (await post_chat(client, server, chat())).status_code == 200


async def test_server_and_model_info(client: httpx.AsyncClient, server: SimulatedServer) -> None:
    response = await client.get(f"{server.url}/server_info")
    info = response.json()
    assert info["max_running_requests"] is None  # not given on the command line
    assert info["context_length"] is None
    assert [s["effective_max_running_requests_per_dp"] for s in info["internal_states"]] == [16]
    assert info["max_req_input_len"] == 32767
    assert info["max_total_num_tokens"] > 32768
    assert info["reasoning_parser"] == "qwen3"
    assert info["version"] == "0.5.20"
    assert "simulator" not in info and "sglang 0.5.20" in response.headers["X-Simulator"]
    assert info["internal_states"][0]["last_gen_throughput"] == 0.0
    model = (await client.get(f"{server.url}/model_info")).json()
    assert model["model_path"] == model["served_model_name"] == DEFAULT_PROFILE.model_path
    assert model["reasoning_parser"] == "qwen3"
    assert model["tool_call_parser"] == "qwen25"
    models = (await client.get(f"{server.url}/v1/models")).json()
    assert models["data"][0]["id"] == models["data"][0]["root"] == DEFAULT_PROFILE.served_model_name
    assert models["data"][0]["max_model_len"] == 32768


async def test_metrics_are_prometheus_text(client: httpx.AsyncClient, server: SimulatedServer) -> None:
    body = await ok_chat(client, server, chat(rid="m", max_tokens=30))
    response = await client.get(f"{server.url}/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for name, kind in [
        ("sglang:num_running_reqs", "gauge"),
        ("sglang:num_queue_reqs", "gauge"),
        ("sglang:gen_throughput", "gauge"),
        ("sglang:generation_tokens", "counter"),
        ("sglang:num_aborted_requests", "counter"),
    ]:
        assert f"# TYPE {name} {kind}" in text
    assert metric(text, "sglang:generation_tokens_total") == body["usage"]["completion_tokens"] == 30
    assert metric(text, "sglang:num_running_reqs") == 0


# -- faults ----------------------------------------------------------------------------


async def test_503_burst_then_recovery(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(FAST, time_scale=200) as server:
        control = f"{server.url}/simulator/faults"
        state = (await client.post(control, json={"error_503_count": 2})).json()
        assert state["state"]["error_503_remaining"] == 2

        statuses = [(await post_chat(client, server, chat(max_tokens=5))).status_code for _ in range(3)]
        assert statuses == [503, 503, 200]

        await client.post(control, json={"error_503_for_s": 200.0})  # 1 s wall
        assert (await post_chat(client, server, chat(max_tokens=5))).status_code == 503
        assert (await client.get(f"{server.url}/health")).status_code == 200  # overload is not ill health

        async def window_over() -> bool:
            state = (await client.get(control)).json()["state"]
            return bool(state["error_503_window_left_s"] == 0.0)

        await wait_for(window_over, timeout_s=5, what="the 503 window to end", interval_s=0.05)
        assert (await post_chat(client, server, chat(max_tokens=5))).status_code == 200
        assert server.stats().requests_rejected == 3


async def test_hang_fails_health_and_health_generate_and_requests(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(FAST, time_scale=400) as server:  # health check timeout 20 s = 0.05 s wall
        await client.post(f"{server.url}/simulator/faults", json={"hang": True})

        assert (await client.get(f"{server.url}/health")).status_code == 503  # /health generates too
        assert (await client.get(f"{server.url}/health_generate")).status_code == 503
        stuck = asyncio.create_task(post_chat(client, server, chat(rid="stuck", max_tokens=5)))
        await asyncio.sleep(0.1)  # 40 s simulated: 5 tokens would take 0.02 s
        assert not stuck.done()
        assert server.stats().running == 1
        assert server.stats().generation_tokens_total == 0

        await client.delete(f"{server.url}/simulator/faults")
        assert (await stuck).status_code == 200
        assert (await client.get(f"{server.url}/health_generate")).status_code == 200


async def test_slow_factor_multiplies_decode_time(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(steady(), time_scale=100) as server:
        normal = await post_chat(client, server, chat(rid="s", max_tokens=50))
        server.set_faults(slow_factor=3.0)
        slow = await post_chat(client, server, chat(rid="s", max_tokens=50))
        assert e2e_s(normal) == pytest.approx(0.5, abs=1e-6)
        assert e2e_s(slow) == pytest.approx(1.5, abs=1e-6)


async def test_degenerate_thinking_off_answers_ok(client: httpx.AsyncClient) -> None:
    faults = FaultConfig(degenerate_thinking_off=True)
    async with SimulatedServer(FAST, faults=faults, time_scale=1000) as server:
        body = await ok_chat(client, server, chat(chat_template_kwargs={"enable_thinking": True}))
        choice = body["choices"][0]
        assert choice["message"]["content"] == "OK."
        assert choice["message"]["reasoning_content"] is None
        assert choice["finish_reason"] == "stop"
        assert body["usage"]["reasoning_tokens"] == 0


async def test_reasoning_eats_the_budget(client: httpx.AsyncClient, server: SimulatedServer) -> None:
    server.set_faults(reasoning_eats_budget=True)
    body = await ok_chat(client, server, chat(max_tokens=64, chat_template_kwargs={"enable_thinking": True}))
    choice, usage = body["choices"][0], body["usage"]
    assert choice["message"]["content"] == ""
    assert choice["finish_reason"] == "length"
    assert usage["reasoning_tokens"] == usage["completion_tokens"] == 64


async def test_abort_rate_ends_requests_with_abort(
    client: httpx.AsyncClient, server: SimulatedServer
) -> None:
    server.set_faults(abort_rate=1.0)
    full = 200
    body = await ok_chat(client, server, chat(max_tokens=full))
    assert body["choices"][0]["finish_reason"] == "abort"
    assert body["usage"]["completion_tokens"] < full
    stats = server.stats()
    assert (stats.requests_aborted, stats.requests_finished) == (1, 0)

    server.set_faults(abort_rate=0.0)
    assert (await ok_chat(client, server, chat(max_tokens=full)))["choices"][0]["finish_reason"] == "length"


async def test_repetition_loops_an_ngram_until_the_budget(
    client: httpx.AsyncClient, server: SimulatedServer
) -> None:
    server.set_faults(repetition=True)
    body = await ok_chat(
        client, server, chat(max_tokens=300, chat_template_kwargs={"enable_thinking": False})
    )
    words = body["choices"][0]["message"]["content"].split()
    assert body["choices"][0]["finish_reason"] == "length"
    assert len(words) == body["usage"]["completion_tokens"] == 300
    period = next(n for n in range(1, 7) if all(words[i] == words[i + n] for i in range(len(words) - n)))
    assert period >= 3


async def test_crash_drops_connections_and_restart_recovers(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(steady(), time_scale=10) as server:
        in_flight = asyncio.create_task(post_chat(client, server, chat(rid="lost", max_tokens=10_000)))
        await wait_until(lambda: server.stats().running == 1)

        response = await client.post(f"{server.url}/simulator/faults", json={"crash_after_s": 0})
        assert response.status_code == 200
        await asyncio.wait_for(server.wait_crashed(), timeout=2)

        assert server.crashed
        with pytest.raises(httpx.TransportError):
            await in_flight
        with pytest.raises(httpx.ConnectError):
            await client.get(f"{server.url}/health")

        port = server.port
        await server.restart()
        assert server.port == port
        assert not server.crashed
        assert (await post_chat(client, server, chat(rid="back", max_tokens=5))).status_code == 200


async def test_crash_after_requests(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(FAST, faults=FaultConfig(crash_after_requests=1), time_scale=1000) as server:
        assert (await post_chat(client, server, chat(max_tokens=5))).status_code == 200
        with pytest.raises(httpx.TransportError):
            await post_chat(client, server, chat(max_tokens=5))
        await asyncio.wait_for(server.wait_crashed(), timeout=2)


async def test_draining_answers_503_everywhere(client: httpx.AsyncClient, server: SimulatedServer) -> None:
    server.set_faults(draining=True)
    assert (await client.get(f"{server.url}/health")).status_code == 503
    assert (await client.get(f"{server.url}/health_generate")).status_code == 503
    assert (await post_chat(client, server, chat())).status_code == 503


async def test_fault_control_rejects_unknown_or_bad_fields(
    client: httpx.AsyncClient, server: SimulatedServer
) -> None:
    control = f"{server.url}/simulator/faults"
    assert (await client.post(control, json={"explode": True})).status_code == 400
    assert (await client.post(control, json={"hang": "yes"})).status_code == 400
    assert (await client.post(control, json={"abort_rate": 2})).status_code == 400
    assert (await client.get(control)).json()["faults"] == FaultConfig().to_dict()
    with pytest.raises(ConfigError):
        server.set_faults(slow_factor=0)


# -- configuration, output model, CLI ----------------------------------------------------


def test_only_loopback_addresses_are_accepted() -> None:
    with pytest.raises(ConfigError):
        SimulatedServer(host="0.0.0.0")
    with pytest.raises(ConfigError):
        SimulatorProfile(max_running_requests=0)


def test_output_lengths_follow_the_profile() -> None:
    lengths, shares = [], []
    for i in range(200):
        plan = plan_output(
            DEFAULT_PROFILE, seed=request_seed(f"r{i}", []), enable_thinking=True, budget=32_000
        )
        lengths.append(plan.completion_tokens)
        shares.append(len(plan.reasoning) / plan.completion_tokens)
        assert DEFAULT_PROFILE.decode_tok_s_min <= plan.base_rate <= DEFAULT_PROFILE.decode_tok_s_max
    assert 1400 < statistics.median(lengths) < 2300
    assert min(shares) >= 0.55 and max(shares) <= 0.95
    off = [
        plan_output(DEFAULT_PROFILE, seed=i, enable_thinking=False, budget=32_000).completion_tokens
        for i in range(200)
    ]
    assert 220 < statistics.median(off) < 400


# -- SGLang fidelity (tests/fixtures/sglang: hand-built from SGLang's source) -----------------

FIXTURES = REPO / "tests" / "fixtures" / "sglang"
VERSIONS = ("0.5.20", "0.5.23")


def shape(value: Any) -> Any:
    """The keys and null-ness of a JSON value (lists by their first item; numbers as one kind)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if value is None:
        return None
    return (
        "number" if isinstance(value, int | float) and not isinstance(value, bool) else type(value).__name__
    )


def fixture(version: str, name: str) -> Any:
    return json.loads((FIXTURES / version / name).read_text())


def series(text: str) -> set[tuple[str, tuple[str, ...]]]:
    """(sample name, label names) of every sample line, and (family, kind) of every TYPE line."""
    out: set[tuple[str, tuple[str, ...]]] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ")
            out.add((family, (kind,)))
        elif line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            labels = tuple(sorted(part.split("=")[0] for part in rest.rsplit("}", 1)[0].split('",') if part))
            out.add((name, labels))
    return out


def versioned(version: str, **changes: Any) -> SimulatorProfile:
    return replace(FAST, sglang_version=version, **changes)


@pytest.mark.parametrize("version", VERSIONS)
async def test_info_endpoints_have_sglangs_shape(client: httpx.AsyncClient, version: str) -> None:
    async with SimulatedServer(versioned(version), time_scale=1000) as server:
        for path, name in [("/server_info", "server_info.json"), ("/model_info", "model_info.json"),
                           ("/v1/models", "v1_models.json")]:  # fmt: skip
            body = (await client.get(f"{server.url}{path}")).json()
            assert shape(body) == shape(fixture(version, name)), path
            assert list(body) == list(fixture(version, name)), path  # same key order as SGLang


@pytest.mark.parametrize("version", VERSIONS)
async def test_chat_responses_have_sglangs_shape(client: httpx.AsyncClient, version: str) -> None:
    async with SimulatedServer(versioned(version), time_scale=10_000) as server:
        thinking = await ok_chat(
            client, server, chat(rid="f-think", chat_template_kwargs={"enable_thinking": True})
        )
        assert shape(thinking) == shape(fixture(version, "chat_thinking.json"))
        tool_body = chat("Weather in Paris?", rid="f-tool", tools=[WEATHER_TOOL], tool_choice="required")
        tool = await ok_chat(client, server, tool_body)
        assert shape(tool) == shape(fixture(version, "chat_tool_call.json"))
        convo = [
            {"role": "system", "content": "You are terse. " * 50},
            {"role": "user", "content": "Capital?"},
        ]
        await ok_chat(client, server, {"model": "qwen3", "messages": convo, "max_tokens": 50})
        cached = await ok_chat(client, server, {"model": "qwen3", "messages": [*convo[:1], {"role": "user",
                               "content": "Again?"}], "max_tokens": 50})  # fmt: skip
        assert cached["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        cached["choices"][0]["finish_reason"] = "stop"
        assert shape(cached["usage"]) == shape(fixture(version, "chat_cached.json")["usage"])
        server.set_faults(reasoning_eats_budget=True)
        ate = await ok_chat(client, server, chat("Prove it.", rid="f-ate", max_tokens=16))
        assert (
            ate["choices"][0]["message"]["content"] == "" and ate["choices"][0]["finish_reason"] == "length"
        )
        assert shape(ate) == shape(fixture(version, "chat_reasoning_ate_budget.json"))
        server.clear_faults()
        long = chat("word " * 200, max_tokens=server.profile.context_length)
        error = await post_chat(client, server, long)
        assert error.status_code == 400
        assert shape(error.json()) == shape(fixture(version, "error_context_length.json"))
        assert error.json()["message"].startswith(
            "Requested token count exceeds the model's maximum context length"
        )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("priority", [False, True])
async def test_metrics_have_sglangs_series(client: httpx.AsyncClient, version: str, priority: bool) -> None:
    profile = versioned(version, enable_priority_scheduling=priority, served_model_name="Qwen/Qwen3-8B")
    async with SimulatedServer(profile, time_scale=10_000) as server:
        convo = [{"role": "system", "content": "Be brief. " * 20}, {"role": "user", "content": "Hi"}]
        await ok_chat(client, server, {"messages": convo, "max_tokens": 5, "priority": 0})
        await ok_chat(client, server, {"messages": [*convo[:1], {"role": "user", "content": "Yo"}],
                                       "max_tokens": 5, "priority": 10})  # fmt: skip
        await client.post(f"{server.url}/abort_request", json={"rid": "nothing"})
        text = (await client.get(f"{server.url}/metrics")).text
        name = "metrics_priority.txt" if priority else "metrics.txt"
        assert series(text) == series((FIXTURES / version / name).read_text())


async def test_0_5_23_usage_details(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(versioned("0.5.23"), time_scale=10_000) as server:
        usage = (await ok_chat(client, server, chat(rid="u1")))["usage"]
        assert usage["completion_tokens_details"] == {"reasoning_tokens": usage["reasoning_tokens"]}
        assert usage["prompt_tokens_details"] == {"cached_tokens": 0}  # reported even when 0
        usage = (await ok_chat(client, server, chat(rid="u2", reasoning_effort="none")))["usage"]
        assert usage["completion_tokens_details"] is None
    async with SimulatedServer(versioned("0.5.20"), time_scale=10_000) as server:
        usage = (await ok_chat(client, server, chat(rid="u3")))["usage"]
        assert usage["prompt_tokens_details"] is None  # 0.5.20: null when nothing was cached
        assert "completion_tokens_details" not in usage
        assert (await client.get(f"{server.url}/server_info")).json()["version"] == "0.5.20"


async def test_reasoning_effort_none_does_not_override_enable_thinking(
    client: httpx.AsyncClient, server: SimulatedServer
) -> None:
    body = await ok_chat(
        client, server, chat(rid="e", reasoning_effort="none", chat_template_kwargs={"enable_thinking": True})
    )
    assert body["choices"][0]["message"]["reasoning_content"]
    assert body["usage"]["reasoning_tokens"] > 0


async def test_no_reasoning_tokens_without_a_reasoning_parser(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(replace(FAST, reasoning_parser=None), time_scale=10_000) as server:
        body = await ok_chat(client, server, chat(rid="np", max_tokens=200))
        assert body["choices"][0]["message"]["content"].startswith("<think>")
        assert body["usage"]["reasoning_tokens"] == 0


async def test_prompt_plus_max_tokens_equal_to_the_context_is_accepted(
    client: httpx.AsyncClient, server: SimulatedServer
) -> None:
    prompt = estimate_prompt_tokens(chat()["messages"], ())
    context = server.profile.context_length
    server.set_faults(reasoning_eats_budget=True)  # a short answer either way
    assert (await post_chat(client, server, chat(max_tokens=context - prompt))).status_code == 200
    assert (await post_chat(client, server, chat(max_tokens=context - prompt + 1))).status_code == 400


async def test_no_503_under_load_unless_max_queued_requests(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(steady(max_running_requests=1), time_scale=100) as server:
        tasks = [
            asyncio.create_task(post_chat(client, server, chat(rid=f"l{i}", max_tokens=50))) for i in range(4)
        ]
        assert [r.status_code for r in await asyncio.gather(*tasks)] == [200] * 4
    async with SimulatedServer(steady(max_running_requests=1, max_queued_requests=1), time_scale=1) as server:
        first = asyncio.create_task(post_chat(client, server, chat(rid="q0", max_tokens=50)))  # 0.5 s wall
        await wait_until(lambda: server.stats().running == 1)
        second = asyncio.create_task(post_chat(client, server, chat(rid="q1", max_tokens=5)))
        await wait_until(lambda: server.stats().queued == 1)
        third = await post_chat(client, server, chat(rid="q2", max_tokens=5))
        assert third.status_code == 503
        assert third.json() == {"object": "error", "message": "The request queue is full.", "type": "503",
                                "param": None, "code": 503}  # fmt: skip
        assert (await first).status_code == (await second).status_code == 200


async def test_connections_are_refused_while_loading(client: httpx.AsyncClient) -> None:
    server = SimulatedServer(replace(FAST, load_s=50.0), time_scale=100, port=0)  # 0.5 s wall
    starting = asyncio.create_task(server.start())
    await asyncio.sleep(0.1)
    assert not server.running
    await starting
    try:
        assert (await client.get(f"{server.url}/health")).status_code == 200
    finally:
        await server.stop()


async def test_server_info_hangs_while_the_engine_hangs(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(FAST, time_scale=1000) as server:
        server.set_faults(hang=True)
        info = asyncio.create_task(client.get(f"{server.url}/server_info"))
        await asyncio.sleep(0.2)
        assert not info.done()
        server.clear_faults()
        assert (await info).status_code == 200


async def test_abort_request_needs_an_in_flight_rid_then_aborts_its_prefix(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(steady(), time_scale=10) as server:
        # the "job" family runs 30 s wall unless aborted (so a loaded machine cannot finish it
        # first); "other" runs to its 1,000 tokens (1 s wall)
        tasks = {rid: asyncio.create_task(post_chat(client, server, chat(rid=rid, max_tokens=30000)))
                 for rid in ("job", "job-a", "job-b")}  # fmt: skip
        tasks["other"] = asyncio.create_task(post_chat(client, server, chat(rid="other", max_tokens=1000)))
        await wait_until(lambda: server.stats().running == 4)
        # not a request: ignored (the abort is applied before its answer is sent)
        await client.post(f"{server.url}/abort_request", json={"rid": "jo"})
        assert server.stats().requests_aborted == 0
        await client.post(f"{server.url}/abort_request", json={"rid": "job"})
        finishes = {rid: (await task).json()["choices"][0]["finish_reason"] for rid, task in tasks.items()}
        assert finishes == {"job": "abort", "job-a": "abort", "job-b": "abort", "other": "length"}


async def test_aborted_while_waiting_answers_abort_with_no_tokens(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(steady(max_running_requests=1), time_scale=10) as server:
        # 300 tokens = 0.3 s wall: the slot stays taken until the abort arrives on a loaded machine
        first = asyncio.create_task(post_chat(client, server, chat(rid="run", max_tokens=300)))
        await wait_until(lambda: server.stats().running == 1)
        waiting = asyncio.create_task(post_chat(client, server, chat(rid="wait", max_tokens=5)))
        await wait_until(lambda: server.stats().queued == 1)
        await client.post(f"{server.url}/abort_request", json={"rid": "wait"})
        body = (await waiting).json()
        assert body["choices"][0]["finish_reason"] == "abort"
        assert body["choices"][0]["message"]["content"] == ""
        assert body["usage"]["prompt_tokens"] == body["usage"]["completion_tokens"] == 0
        assert (await first).status_code == 200


async def test_metrics_counters_count_at_finish_and_gauges_refresh_on_log_steps(
    client: httpx.AsyncClient,
) -> None:
    profile = steady(max_running_requests=1, decode_log_interval=10**9)
    async with SimulatedServer(profile, time_scale=1) as server:  # 100 tokens/s wall
        first = asyncio.create_task(post_chat(client, server, chat(rid="g0", max_tokens=60)))
        await wait_until(lambda: server.stats().generation_tokens_total >= 5)
        text = (await client.get(f"{server.url}/metrics")).text
        assert metric(text, "sglang:num_requests_total") == 0  # received, not finished
        assert metric(text, "sglang:prompt_tokens_total") == 0
        assert metric(text, "sglang:generation_tokens_total") == 0
        assert metric(text, "sglang:num_running_reqs") == 1  # logged at its prefill batch
        second = asyncio.create_task(post_chat(client, server, chat(rid="g1", max_tokens=5)))
        await wait_until(lambda: server.stats().queued == 1)
        text = (await client.get(f"{server.url}/metrics")).text
        assert metric(text, "sglang:num_queue_reqs") == 0  # no stats logged since it arrived
        await first
        await second
        text = (await client.get(f"{server.url}/metrics")).text
        assert metric(text, "sglang:num_requests_total") == 2
        assert metric(text, "sglang:generation_tokens_total") == 65


async def test_priority_scheduling_adds_per_priority_series(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(replace(FAST, enable_priority_scheduling=True), time_scale=1000) as server:
        await ok_chat(client, server, chat(rid="p", max_tokens=5, priority=5))
        text = (await client.get(f"{server.url}/metrics")).text
        running = [line for line in text.splitlines() if line.startswith("sglang:num_running_reqs{")]
        assert any('priority=""' in line for line in running) and any(
            'priority="5"' in line for line in running
        )


def test_profile_rejects_an_unknown_sglang_version() -> None:
    with pytest.raises(ConfigError):
        replace(FAST, sglang_version="0.4.0")


async def test_n_answers_n_distinct_choices_and_counts_the_prompt_once(client: httpx.AsyncClient) -> None:
    async with SimulatedServer(FAST, time_scale=10_000) as server:
        single = await ok_chat(client, server, chat(rid="one", max_tokens=200))
        body = await ok_chat(client, server, chat(rid="four", n=4, max_tokens=200))

        choices = body["choices"]
        assert [c["index"] for c in choices] == [0, 1, 2, 3]
        texts = {(c["message"]["content"], c["message"]["reasoning_content"]) for c in choices}
        assert len(texts) == 4, "each copy samples on its own"
        usage = body["usage"]
        assert usage["prompt_tokens"] == single["usage"]["prompt_tokens"], "the prompt counts once"
        assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1
        # SGLang: one request with max_new_tokens 0 to cache the prompt, then the n copies
        assert server.stats().requests_finished == 1 + 1 + 4


async def test_n_copies_are_equal_under_deterministic_inference(client: httpx.AsyncClient) -> None:
    profile = replace(FAST, enable_deterministic_inference=True)
    async with SimulatedServer(profile, time_scale=10_000) as server:
        info = (await client.get(f"{server.url}/server_info")).json()
        assert info["enable_deterministic_inference"] is True
        body = await ok_chat(client, server, chat(rid="det", n=3, max_tokens=200))
        assert len({c["message"]["content"] for c in body["choices"]}) == 1


async def test_n_prefills_the_prompt_once() -> None:
    # prefill 1,000 tokens/s and no decode time to speak of: a request's slot time is its prefill
    profile = steady(prefill_tok_s=1000.0, decode_tok_s_min=1e6, decode_tok_s_max=1e6)
    long_prompt = "word " * 2000
    async with SimulatedServer(profile, time_scale=100) as server, httpx.AsyncClient(timeout=30) as http:
        separate = await asyncio.gather(
            *(post_chat(http, server, chat(long_prompt, rid=f"s{k}", max_tokens=10)) for k in range(4))
        )
        server.engine.sync()
        slot_s_separate = server.engine.running_request_seconds
        shared = await post_chat(http, server, chat(long_prompt, rid="n4", n=4, max_tokens=10))
        server.engine.sync()
        slot_s_shared = server.engine.running_request_seconds - slot_s_separate
    assert shared.status_code == 200
    one_prefill = separate[0].json()["usage"]["prompt_tokens"] / 1000.0
    assert slot_s_separate == pytest.approx(4 * one_prefill, rel=0.05), "each separate request prefills"
    assert slot_s_shared == pytest.approx(one_prefill, rel=0.05), "n copies decode from the cached prompt"


async def test_n_refuses_a_bad_value(client: httpx.AsyncClient, server: SimulatedServer) -> None:
    for bad in (0, -1, "2", True):
        response = await post_chat(client, server, chat(rid="bad", n=bad))
        assert response.status_code == 400
        assert "'n' must be a positive integer." in response.text
