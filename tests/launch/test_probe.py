"""The probe (:mod:`launch.probe`) against real servers: the SGLang-API simulator as a process
(SGLang's answers, reasoning parser on or off) and the local llama.cpp server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from launch.probe import ProbeError, check_probes, probe_servers
from launch.stack.process import wait_until
from streams.config import GenerationSettings
from streams.errors import UnavailableError
from tests.helpers import REPO_ROOT, unused_port


def _simulator(*args: str) -> Iterator[str]:
    port = unused_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator", "--port", str(port), "--time-scale", "50", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/health_generate", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        assert wait_until(up, timeout_s=30, interval_s=0.2), "the simulator did not come up"
        yield url
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def sglang() -> Iterator[str]:
    """A simulated SGLang server started with ``--reasoning-parser qwen3``."""
    yield from _simulator("--reasoning-parser", "qwen3")


@pytest.fixture
def sglang_no_parser() -> Iterator[str]:
    """A simulated SGLang server started without a reasoning parser."""
    yield from _simulator("--reasoning-parser", "none")


def _generation(max_tokens: int, thinking: bool) -> GenerationSettings:
    return GenerationSettings(max_tokens=max_tokens, chat_template_kwargs={"enable_thinking": thinking})


def test_reasoning_that_eats_the_budget_fails_with_the_fix(sglang: str) -> None:
    results = probe_servers({"gpu-3": sglang}, _generation(512, thinking=True), timeout_s=60)
    assert results[0].finish_reason == "length"
    assert results[0].content_chars == 0 and results[0].reasoning
    with pytest.raises(ProbeError) as info:
        check_probes(results)
    message = str(info.value)
    assert "all 512 tokens went to reasoning on gpu-3" in message
    assert "raise --max-tokens" in message


def test_a_budget_with_room_for_the_answer_passes(sglang: str) -> None:
    results = probe_servers([sglang], _generation(8192, thinking=True), timeout_s=60)
    check_probes(results)
    (result,) = results
    assert result.name == sglang
    assert result.finish_reason == "stop" and result.reasoning and result.content_chars > 0
    assert result.reasoning_tokens > 0 and result.problem is None
    assert result.line().endswith(": ok")


def test_thinking_without_a_reasoning_parser_names_the_server_flag(sglang_no_parser: str) -> None:
    results = probe_servers({"gpu-0": sglang_no_parser}, _generation(8192, thinking=True), timeout_s=60)
    assert not results[0].reasoning
    with pytest.raises(ProbeError, match="gpu-0 sent no reasoning_content: start the server with"):
        check_probes(results)
    # The same server is fine for a run without thinking.
    check_probes(probe_servers({"gpu-0": sglang_no_parser}, _generation(8192, thinking=False), timeout_s=60))


def test_every_server_is_judged_and_only_the_failing_one_is_named(sglang: str, sglang_no_parser: str) -> None:
    servers = {"gpu-0": sglang, "gpu-1": sglang_no_parser}
    results = probe_servers(servers, _generation(8192, True), timeout_s=60)
    assert [r.name for r in results] == ["gpu-0", "gpu-1"]
    with pytest.raises(ProbeError) as info:
        check_probes(results)
    assert "1 of 2 server(s) failed" in str(info.value)
    assert "gpu-1" in str(info.value) and "gpu-0" not in str(info.value)


def test_a_server_that_does_not_answer_is_unavailable() -> None:
    url = f"http://127.0.0.1:{unused_port()}"
    results = probe_servers({"gpu-5": url}, _generation(512, True), timeout_s=2)
    assert results[0].finish_reason is None and results[0].problem
    with pytest.raises(UnavailableError, match="gpu-5"):
        check_probes(results)


def test_llama_cpp_answers_without_thinking_and_is_caught_with_it(llm: list[str]) -> None:
    """The local llama.cpp server (Gemma-3-270M, no thinking mode): fine with thinking off, and the
    probe names the fix when thinking is asked of a model that has none."""
    check_probes(probe_servers(llm[:1], _generation(64, thinking=False), timeout_s=300))
    with pytest.raises(ProbeError, match="--no-thinking if the model has no thinking mode"):
        check_probes(probe_servers(llm[:1], _generation(64, thinking=True), timeout_s=300))


@pytest.fixture
def sglang_always_thinks() -> Iterator[str]:
    """A simulated SGLang server whose model reasons whatever ``enable_thinking`` says, until the
    budget is gone (the simulator's ``reasoning_eats_budget`` fault)."""
    yield from _simulator("--reasoning-parser", "qwen3", "--faults", '{"reasoning_eats_budget": true}')


def test_thinking_off_but_the_model_still_reasons_is_not_told_to_turn_thinking_off(
    sglang_always_thinks: str,
) -> None:
    results = probe_servers({"gpu-2": sglang_always_thinks}, _generation(512, thinking=False), timeout_s=60)
    with pytest.raises(ProbeError) as info:
        check_probes(results)
    message = str(info.value)
    assert "thinking is off but gpu-2 still reasoned" in message
    assert "ignores enable_thinking=false" in message and "raise --max-tokens" in message
    assert "--no-thinking" not in message  # it is off already


def test_a_server_named_by_its_url_is_named_once_per_line() -> None:
    url = f"http://127.0.0.1:{unused_port()}"
    with pytest.raises(UnavailableError) as info:
        check_probes(probe_servers([url], _generation(512, True), timeout_s=2))
    assert all(line.count(url) == 1 for line in str(info.value).splitlines()[1:]), str(info.value)
