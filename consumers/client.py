"""The inference-server client: one OpenAI/SGLang server, its discovery, health, load and errors.

Talks to SGLang (production) and to llama.cpp's ``llama-server`` (local stand-in) over the
OpenAI-compatible ``POST /v1/chat/completions``, with an httpx keep-alive pool sized to the
consumer's in-flight window. Facts used here come from docs/sglang.md (SGLang
0.5.x source): endpoints, the ``reasoning_content`` split, ``usage.reasoning_tokens``,
``rid``, ``chat_template_kwargs``, and the error classes:

==========================================  ============================================
server answer                               class
==========================================  ============================================
400, 404, 413, 422                          :class:`FatalRequestError` (dead-letter at once)
408, 429, 5xx (503 queue full, 500), abort  :class:`RetriableServerError` (backoff, retry)
connect/read errors, timeouts               :class:`RetriableServerError`, ``status=None``
==========================================  ============================================
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import msgspec
from prometheus_client.parser import text_string_to_metric_families

from streams.config import GenerationSettings
from streams.errors import FatalRequestError, RetriableServerError, ServerError
from streams.records import PromptRecord, Usage

ServerKind = Literal["sglang", "llama.cpp", "openai"]

_FATAL_STATUSES = frozenset({400, 404, 413, 422})


@dataclass(frozen=True)
class ServerInfo:
    """What discovery learned about a server.

    Attributes:
        kind: ``sglang`` (has ``/server_info``), ``llama.cpp`` (has ``/props``) or ``openai``.
        model: served model name (SGLang ``/model_info`` ``served_model_name``/``model_path``,
            llama.cpp ``/v1/models``).
        max_running_requests: concurrent decode slots (SGLang ``max_running_requests``,
            llama.cpp ``total_slots``); None when the server does not say.
        context_length: tokens per request (SGLang ``context_length``, llama.cpp ``n_ctx`` per slot).
        version: the server's version string, when reported.
    """

    url: str
    kind: ServerKind
    model: str
    max_running_requests: int | None
    context_length: int | None
    version: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ServerLoad:
    """Running and waiting requests as the server's ``/metrics`` reports them (summed over ranks)."""

    running: int
    queued: int


@dataclass(frozen=True)
class ChatResult:
    """One chat completion as the server returned it. Lengths in tokens, latency in seconds."""

    content: str
    reasoning_content: str | None
    tool_calls: list[dict[str, Any]] | None
    finish_reason: str
    usage: Usage
    model: str
    latency_s: float


def request_id(run_id: str, prompt_id: str, attempt: int, send: int) -> str:
    """SGLang's request id (``rid``) for the ``send``-th send (1-based) of attempt ``attempt`` of
    prompt ``prompt_id`` in run ``run_id`` (``send`` < 2**32): ``kg-<40 hex digits>-<send as 8 hex
    digits>``.

    Deterministic, so a consumer restarted after a crash sends the same rid as its predecessor
    and SGLang refuses a duplicate still in flight. Fixed length, so no rid is a prefix of
    another: SGLang aborts every request whose rid *starts with* the rid it aborts, on
    ``/abort_request`` and on a client disconnect (docs/sglang.md, "Errors and overload"); with
    the raw id in the rid, aborting ``run-p1-0-1`` would also abort ``run-p1-0-10`` and
    ``run-p1-0-1-0-1``.
    """
    digest = hashlib.blake2b(msgspec.json.encode([run_id, prompt_id, attempt]), digest_size=20)
    return f"kg-{digest.hexdigest()}-{send:08x}"


class ServerClient:
    """An async client for one inference server at ``base_url``.

    Args:
        base_url: e.g. ``http://10.0.0.7:30000`` (no trailing ``/v1``).
        generation: default generation parameters; a record's ``params`` override them.
        pool_size: keep-alive connections (set it to the consumer's in-flight cap).
        request_timeout_s: seconds for one whole generation (connect timeout is 10 s).
    """

    def __init__(
        self,
        base_url: str,
        generation: GenerationSettings,
        *,
        pool_size: int = 64,
        request_timeout_s: float = 3600.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.generation = generation
        self.info: ServerInfo | None = None
        limits = httpx.Limits(max_connections=pool_size, max_keepalive_connections=pool_size)
        timeout = httpx.Timeout(request_timeout_s, connect=10.0)
        self._http = httpx.AsyncClient(base_url=self.base_url, limits=limits, timeout=timeout)

    async def aclose(self) -> None:
        """Close the connection pool (in-flight requests are cancelled by the caller first)."""
        await self._http.aclose()

    # -- discovery and health -----------------------------------------------------------------
    async def discover(self, *, wait_s: float = 600.0) -> ServerInfo:
        """Wait until the server can generate, then read what it is.

        Readiness: :meth:`healthy` (SGLang ``/health_generate``; elsewhere a 1-token chat
        completion). Then SGLang ``/server_info`` + ``/model_info`` (or their pre-0.4 names
        ``/get_server_info``, ``/get_model_info``), else llama.cpp ``/props`` + ``/v1/models``.

        Raises:
            RetriableServerError: not ready within ``wait_s`` seconds.
        """
        deadline = time.monotonic() + wait_s
        kind = await self._probe_kind(deadline)
        while not await self.healthy(kind):
            if time.monotonic() >= deadline:
                raise RetriableServerError(f"{self.base_url}: not ready after {wait_s:.0f} s")
            await asyncio.sleep(1.0)
        self.info = await self._read_info(kind)
        return self.info

    async def describe(self, *, wait_s: float = 30.0) -> ServerInfo:
        """Read what the server is (as :meth:`discover`) without waiting for it to generate.

        Raises:
            RetriableServerError: the server did not answer within ``wait_s`` seconds.
        """
        self.info = await self._read_info(await self._probe_kind(time.monotonic() + wait_s))
        return self.info

    async def _probe_kind(self, deadline: float) -> ServerKind:
        while True:
            for path, kind in (
                ("/server_info", "sglang"),
                ("/get_server_info", "sglang"),
                ("/props", "llama.cpp"),
            ):
                try:
                    resp = await self._http.get(path, timeout=10.0)
                except httpx.HTTPError:
                    break  # not listening yet
                if resp.status_code == 200:
                    return kind  # type: ignore[return-value]
                if resp.status_code == 503:
                    break  # starting up
            else:
                return "openai"
            if time.monotonic() >= deadline:
                raise RetriableServerError(f"{self.base_url}: no answer from the server")
            await asyncio.sleep(1.0)

    async def _get_json(self, *paths: str) -> dict[str, Any]:
        for path in paths:
            try:
                resp = await self._http.get(path, timeout=10.0)
            except httpx.HTTPError:
                continue
            if resp.status_code == 200:
                data = resp.json()
                return data if isinstance(data, dict) else {"data": data}
        return {}

    async def _read_info(self, kind: ServerKind) -> ServerInfo:
        if kind == "sglang":
            server = await self._get_json("/server_info", "/get_server_info")
            model = await self._get_json("/model_info", "/get_model_info")
            name = (
                model.get("served_model_name") or model.get("model_path") or server.get("served_model_name")
            )
            return ServerInfo(
                url=self.base_url,
                kind=kind,
                model=str(name or self.generation.model),
                max_running_requests=_sglang_slots(server),
                context_length=_int_or_none(server.get("context_length")),
                version=server.get("version"),
                raw={"server_info": server, "model_info": model},
            )
        props = await self._get_json("/props") if kind == "llama.cpp" else {}
        models = await self._get_json("/v1/models")
        names = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
        n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
        return ServerInfo(
            url=self.base_url,
            kind=kind,
            model=str(names[0] if names and names[0] else props.get("model_alias") or self.generation.model),
            max_running_requests=_int_or_none(props.get("total_slots")),
            context_length=_int_or_none(n_ctx),
            version=props.get("build_info"),
            raw={"props": props, "models": models},
        )

    async def healthy(self, kind: ServerKind | None = None, *, timeout_s: float = 30.0) -> bool:
        """True when the server can generate now.

        SGLang: ``GET /health_generate`` (it runs a 1-token generation; plain ``/health`` stays
        200 on a wedged server, per docs/sglang.md). Other servers: a 1-token chat
        completion, for the same reason (llama.cpp's ``/health`` does not generate).
        """
        kind = kind or (self.info.kind if self.info else "openai")
        try:
            if kind == "sglang":
                resp = await self._http.get("/health_generate", timeout=timeout_s)
                return resp.status_code == 200
            body = {
                "model": self.info.model if self.info else self.generation.model,
                "messages": [{"role": "user", "content": "Say OK."}],
                "max_tokens": 1,
                "temperature": 0.0,
            }
            resp = await self._http.post("/v1/chat/completions", json=body, timeout=timeout_s)
            return resp.status_code == 200
        except httpx.HTTPError:
            return False

    async def load(self) -> ServerLoad | None:
        """Running and queued requests from ``/metrics`` (Prometheus text, parsed by
        prometheus_client): SGLang ``sglang:num_running_reqs`` / ``sglang:num_queue_reqs``,
        llama.cpp ``llamacpp:requests_processing`` / ``llamacpp:requests_deferred``.
        None when the server exposes no metrics (SGLang without ``--enable-metrics``) or answers
        with something that is not Prometheus text."""
        try:
            resp = await self._http.get("/metrics", timeout=5.0)
        except httpx.HTTPError:
            return None
        if resp.status_code != 200:
            return None
        totals: dict[str, float] = {}
        try:
            for family in text_string_to_metric_families(resp.text):
                for sample in family.samples:
                    totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
        except ValueError:  # not Prometheus text (a proxy's error page, a truncated body)
            return None
        for running_name, queued_name in (
            ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
            ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
        ):
            if running_name in totals:
                return ServerLoad(int(totals[running_name]), int(totals.get(queued_name, 0)))
        return None

    # -- generation ---------------------------------------------------------------------------
    def request_body(self, prompt: PromptRecord, rid: str) -> dict[str, Any]:
        """The ``/v1/chat/completions`` body: configured defaults, then the record's overrides.

        ``rid`` is SGLang's request id (deterministic per prompt and attempt, so a retry after a
        crash never collides with a request still running elsewhere); other servers ignore it.
        """
        g = self.generation
        body: dict[str, Any] = {
            "model": self.info.model if self.info else g.model,
            "messages": prompt.messages,
            "max_tokens": g.max_tokens,
            "temperature": g.temperature,
            "top_p": g.top_p,
            "chat_template_kwargs": dict(g.chat_template_kwargs),
            "separate_reasoning": g.separate_reasoning,
            "rid": rid,
            "stream": False,
        }
        if prompt.tools:
            body["tools"] = prompt.tools
        overrides = prompt.params.as_request_fields()
        if "chat_template_kwargs" in overrides:
            body["chat_template_kwargs"].update(overrides.pop("chat_template_kwargs"))
        body.update(overrides)
        return body

    async def chat(self, body: dict[str, Any]) -> ChatResult:
        """Send one chat completion and parse the answer.

        Raises:
            FatalRequestError: 400/404/413/422 (invalid request, prompt longer than the context,
                duplicate in-flight ``rid``): sending it again cannot succeed.
            RetriableServerError: 408/429/5xx, a transport error or timeout, ``finish_reason
                == "abort"``, or a 200 whose body is not a chat completion.
        """
        started = time.monotonic()
        try:
            resp = await self._http.post("/v1/chat/completions", json=body)
        except httpx.TimeoutException as exc:
            raise RetriableServerError(f"{self.base_url}: timeout ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise RetriableServerError(f"{self.base_url}: {type(exc).__name__}: {exc}") from None
        latency = time.monotonic() - started
        if resp.status_code != 200:
            detail = resp.text[:500]
            cls: type[ServerError] = (
                FatalRequestError if resp.status_code in _FATAL_STATUSES else RetriableServerError
            )
            raise cls(f"{self.base_url}: HTTP {resp.status_code}: {detail}", status=resp.status_code)
        try:
            data = msgspec.json.decode(resp.content, type=_ChatResponse)
            choice = data.choices[0]
        except (msgspec.DecodeError, IndexError) as exc:
            raise RetriableServerError(
                f"{self.base_url}: malformed chat completion: {exc}", status=200
            ) from None
        if choice.finish_reason == "abort":
            raise RetriableServerError(f"{self.base_url}: request aborted by the server", status=200)
        usage = data.usage or _UsageWire()
        details = usage.completion_tokens_details or {}
        prompt_details = usage.prompt_tokens_details or {}
        reasoning = choice.message.reasoning_content
        return ChatResult(
            content=choice.message.content or "",
            reasoning_content=reasoning or None,
            tool_calls=choice.message.tool_calls or None,
            finish_reason=choice.finish_reason or "stop",
            usage=Usage(
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                reasoning_tokens=usage.reasoning_tokens or int(details.get("reasoning_tokens") or 0),
                cached_tokens=_int_or_none(prompt_details.get("cached_tokens")),
            ),
            model=data.model or body.get("model", ""),
            latency_s=latency,
        )


def _sglang_slots(server_info: dict[str, Any]) -> int | None:
    """SGLang's running-request limit: the top-level ``max_running_requests`` is null unless
    given on the command line, so sum ``internal_states[i].effective_max_running_requests_per_dp``
    over DP ranks (SGLang 0.5.20 python/sglang/srt/managers/scheduler.py ``get_internal_state``)."""
    states = server_info.get("internal_states")
    if isinstance(states, list):
        per_rank = [
            _int_or_none(s.get("effective_max_running_requests_per_dp"))
            for s in states
            if isinstance(s, dict)
        ]
        if per_rank and all(n is not None for n in per_rank):
            return sum(n for n in per_rank if n is not None)
    return _int_or_none(server_info.get("max_running_requests"))


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


class _MessageWire(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class _ChoiceWire(msgspec.Struct):
    message: _MessageWire
    finish_reason: str | None = None


class _UsageWire(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int | None = None
    completion_tokens_details: dict[str, Any] | None = None
    prompt_tokens_details: dict[str, Any] | None = None


class _ChatResponse(msgspec.Struct):
    choices: list[_ChoiceWire]
    model: str | None = None
    usage: _UsageWire | None = None
