"""Each local llama-server answers an OpenAI chat completion with ``usage`` and ``finish_reason``."""

from __future__ import annotations

import httpx
import pytest


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
