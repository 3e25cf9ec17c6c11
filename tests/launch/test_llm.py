"""Each local llama-server answers an OpenAI chat completion with ``usage`` and ``finish_reason``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

from launch.run.servers import wait_for_servers
from streams.config import GenerationSettings
from streams.errors import UnavailableError
from tests.helpers import wait_for


@pytest.mark.parametrize("index", [0, 1])
def test_each_server_answers_a_chat_completion(llm: list[str], index: int) -> None:
    assert len(llm) == 2, "the default local stack runs two llama-server instances"
    body = {
        "model": "gemma-3-270m-it",
        "messages": [
            {"role": "user", "content": "Natalia sold clips to 48 of her friends. How many is that?"}
        ],
        "max_tokens": 16,
        "temperature": 0.0,
    }
    resp = httpx.post(f"{llm[index]}/v1/chat/completions", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    choice = data["choices"][0]
    assert choice["finish_reason"] in {"stop", "length"}
    assert isinstance(choice["message"]["content"], str)
    usage = data["usage"]
    assert usage["prompt_tokens"] > 0
    assert 0 < usage["completion_tokens"] <= 16
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_servers_expose_slots_and_metrics(llm: list[str]) -> None:
    for url in llm:
        props = httpx.get(f"{url}/props", timeout=10).json()
        assert props["total_slots"] == 4
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        assert "llamacpp:requests_processing" in metrics


def test_servers_use_gemmas_turn_format(llm: list[str]) -> None:
    """Not llama.cpp's ChatML fallback, which made Gemma answer with <|im_start|> tokens."""
    body = {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}]
    }
    prompt = httpx.post(f"{llm[0]}/apply-template", json=body, timeout=10).json()["prompt"]
    assert prompt.endswith(
        "<start_of_turn>user\nBe brief.\n\nWhat is 2+3?<end_of_turn>\n<start_of_turn>model\n"
    )
    assert "<|im_start|>" not in prompt


async def test_a_server_busy_with_other_work_is_waited_for_not_called_down(llm: list[str]) -> None:
    """Issue 30 item 4: every slot of a real llama-server generating for someone else, so the
    1-token readiness probe waits behind them: the main job says the server is busy and goes on
    (its consumers queue behind that work), where it used to fail the run as "did not answer".

    Twice as many requests as slots, as a consumer with a standing queue sends: the queued ones
    hold llama-server HTTP threads too, and with ``--threads-http 2`` its ``/metrics`` went
    unanswered behind them, a flaky CI failure."""
    url = llm[1]
    long: dict[str, object] = {"messages": [{"role": "user", "content": "Count from 1 to 3000, one a line."}]}
    long |= {"max_tokens": 1200, "ignore_eos": True, "stream": True}  # a stream stops when its client goes

    async def processing() -> float:
        async with httpx.AsyncClient(timeout=10) as http:
            text = (await http.get(f"{url}/metrics")).text
        return next(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("llamacpp:requests_processing")
        )

    async with httpx.AsyncClient(timeout=600) as http:
        hogs = [asyncio.create_task(http.post(f"{url}/v1/chat/completions", json=long)) for _ in range(8)]
        try:
            await wait_for(lambda: _at_least(processing, 4), timeout_s=60, what="all 4 slots busy")
            lines: list[str] = []
            [info] = await wait_for_servers(
                [url], GenerationSettings(), timeout_s=3, hint="h", busy=lines.append
            )
            assert info.url == url and info.kind == "llama.cpp"
            [line] = lines
            assert "is busy, not down" in line and "4 running" in line, line
            queued = int(line.split(" running, ")[1].split(" queued")[0])
            assert queued >= 4, line  # the 4 beyond the slots, and perhaps the probe
            with pytest.raises(UnavailableError, match="did not answer within 3 s"):
                await wait_for_servers(
                    [url], GenerationSettings(), timeout_s=3, hint="h"
                )  # no busy: as before
        finally:
            for hog in hogs:
                hog.cancel()
            await asyncio.gather(*hogs, return_exceptions=True)
    # a disconnected request frees its slot: the other llama.cpp tests do not wait behind these
    await wait_for(lambda: _at_most(processing, 0), timeout_s=60, what="the slots freed")


async def _at_least(read: Callable[[], Awaitable[float]], n: float) -> bool:
    return await read() >= n


async def _at_most(read: Callable[[], Awaitable[float]], n: float) -> bool:
    return await read() <= n
