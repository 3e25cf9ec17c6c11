"""Where the client must be defensive against SGLang, through the simulator's fault injection:
aborts that carry a status, 500s from a failed reasoning parse, answers without ``usage``.

Each fault is injected on every request (rate 1) so one request shows how the client classifies
it; SGLang's answers are in docs/sglang.md and the fault's docstring
(:class:`simulator.FaultConfig`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from consumers.servers import ChatResult, ServerClient
from simulator import DEFAULT_PROFILE, FaultConfig, SimulatedServer
from streams.config import GenerationSettings
from streams.errors import ConfigError, FatalRequestError, RetriableServerError
from tests.helpers import make_prompt

pytestmark = pytest.mark.timeout(20)

FAST = replace(DEFAULT_PROFILE, name="test", warmup_s=0.0)


async def chat_with(faults: FaultConfig) -> ChatResult:
    async with SimulatedServer(FAST, faults=faults, time_scale=1000) as server:
        client = ServerClient(server.url, GenerationSettings())
        try:
            await client.discover(wait_s=5)
            return await client.chat(client.request_body(make_prompt(1, max_tokens=64), "kg-defensive"))
        finally:
            await client.aclose()


async def test_a_graceful_abort_is_retried() -> None:
    with pytest.raises(RetriableServerError) as caught:
        await chat_with(FaultConfig(abort_rate=1.0))
    assert caught.value.status == 200


@pytest.mark.parametrize("status", [500, 503])
async def test_an_abort_with_a_server_status_is_retried(status: int) -> None:
    with pytest.raises(RetriableServerError) as caught:
        await chat_with(FaultConfig(abort_rate=1.0, abort_status=status))
    assert caught.value.status == status


async def test_an_abort_with_status_400_is_not_retried() -> None:
    with pytest.raises(FatalRequestError) as caught:
        await chat_with(FaultConfig(abort_rate=1.0, abort_status=400))
    assert caught.value.status == 400


async def test_a_failed_reasoning_parse_is_a_retriable_500() -> None:
    with pytest.raises(RetriableServerError, match="Failed to parse reasoning content") as caught:
        await chat_with(FaultConfig(reasoning_parse_error_rate=1.0))
    assert caught.value.status == 500


async def test_an_answer_without_usage_is_still_a_completion() -> None:
    result = await chat_with(FaultConfig(omit_usage=True))
    assert result.content or result.reasoning_content
    assert result.usage.completion_tokens == 0 and result.usage.cached_tokens is None


def test_abort_status_must_be_one_sglang_sends() -> None:
    with pytest.raises(ConfigError, match="abort_status"):
        FaultConfig(abort_status=418)


async def test_health_probes_do_not_wait_behind_generations_that_fill_the_pool() -> None:
    """The window can reach the pool size (SGLang's running limit is in the thousands): a health
    probe or a ``/metrics`` read must not queue behind long generations for a free connection,
    or a healthy server would be declared hung."""
    slow = replace(FAST, thinking_median_tokens=1e9, no_thinking_median_tokens=1e9, length_sigma=0.0)
    async with SimulatedServer(slow, time_scale=1.0) as server:
        client = ServerClient(server.url, GenerationSettings(), pool_size=1)
        try:
            await client.discover(wait_s=5)
            long = [
                asyncio.create_task(
                    client.chat(client.request_body(make_prompt(i, max_tokens=30_000), f"kg-long-{i}"))
                )
                for i in range(2)  # the chat pool's 2 connections (twice the pool size)
            ]
            await asyncio.sleep(0.5)
            assert server.stats().running == 2
            assert await asyncio.wait_for(client.healthy(timeout_s=5), timeout=5)
            assert await asyncio.wait_for(client.load(), timeout=5) is not None
            for task in long:
                task.cancel()
            await asyncio.gather(*long, return_exceptions=True)
        finally:
            await client.aclose()
