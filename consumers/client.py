"""The inference-server client: one OpenAI/SGLang server, its discovery, health, load and errors.

Talks to SGLang (production) and to llama.cpp's ``llama-server`` (local stand-in) over the
OpenAI-compatible ``POST /v1/chat/completions``, with an aiohttp keep-alive pool sized to the
consumer's in-flight window. aiohttp, not httpx: httpcore 1.0's pool scans every connection on
each request event (``AsyncConnectionPool._assign_requests_to_connections``), which took 71% of
a consumer's CPU at 200 completions/s with 68 connections (py-spy; BENCHMARKS.md, "Rate matrix").

Facts used here come from docs/sglang.md (SGLang 0.5.x source): endpoints, ``rid``, the
discovery fields. What the answers mean (the chat completion and its error classes, ``/metrics``,
``/server_info``) is parsed in :mod:`consumers.sglang`; the request body is built in
:mod:`consumers.requests`. Transport failures (connect/read errors, timeouts) are
:class:`RetriableServerError` with ``status=None``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import msgspec

from consumers.requests import chat_request_body, request_id
from consumers.sglang import (
    ChatResult,
    ServerLoad,
    int_or_none,
    parse_chat_answer,
    parse_load,
    sglang_running_limit,
)
from streams.config import GenerationSettings
from streams.errors import RetriableServerError
from streams.records import PromptRecord

__all__ = [
    "ChatResult",
    "ServerClient",
    "ServerInfo",
    "ServerKind",
    "ServerLoad",
    "parse_load",
    "request_id",
    "sglang_running_limit",
]
"""``ChatResult``, ``ServerLoad``, ``parse_load``, ``sglang_running_limit`` (:mod:`consumers.sglang`)
and ``request_id`` (:mod:`consumers.requests`) are re-exported for existing callers."""

ServerKind = Literal["sglang", "llama.cpp", "openai"]

_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)
"""what a request raises when the server cannot be reached or does not answer in time."""


@dataclass(frozen=True)
class ServerInfo:
    """What discovery learned about a server.

    Attributes:
        kind: ``sglang`` (has ``/server_info``), ``llama.cpp`` (has ``/props``) or ``openai``.
        model: served model name (SGLang ``/model_info`` ``served_model_name``/``model_path``,
            llama.cpp ``/v1/models``).
        max_running_requests: requests the server runs at once. SGLang: the scheduler's
            ``internal_states[i].effective_max_running_requests_per_dp`` summed over the
            data-parallel ranks (the top-level ``max_running_requests`` is only the command-line
            value, null by default); llama.cpp: ``total_slots``. None when the server does not say.
        context_length: tokens per request: ``max_model_len`` of ``/v1/models`` (SGLang: the
            context length really used), else SGLang's ``context_length`` or llama.cpp's
            ``n_ctx`` per slot.
        max_total_num_tokens: SGLang's KV-cache capacity in tokens (``/server_info``
            ``max_total_num_tokens``, per DP rank); None elsewhere.
        version: the server's version string, when reported.

    SGLang facts: docs/sglang.md, "Discovery".
    """

    url: str
    kind: ServerKind
    model: str
    max_running_requests: int | None
    context_length: int | None
    version: str | None = None
    max_total_num_tokens: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


class ServerClient:
    """An async client for one inference server at ``base_url``.

    Args:
        base_url: e.g. ``http://10.0.0.7:30000`` (no trailing ``/v1``).
        generation: default generation parameters; a record's ``params`` override them.
        pool_size: the consumer's in-flight cap: chat completions may use twice as many
            connections (requests of partitions being handed over still hold theirs);
            discovery, health probes and ``/metrics`` have a pool of their own, so they never
            wait behind generations.
        request_timeout_s: seconds for one whole generation, waiting for a free connection
            included (opening a connection: 10 s).
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
        self._pool_size = pool_size
        # sock_connect, not connect: aiohttp's ``connect`` also bounds the wait for a free
        # connection of the pool, which must not fail a request the server never saw.
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s, sock_connect=10.0)
        self._sessions: dict[bool, aiohttp.ClientSession] = {}

    def _http(self, *, control: bool) -> aiohttp.ClientSession:
        """The connection pool for chat completions, or with ``control`` the small one for
        discovery, health probes and metrics; made on first use (aiohttp wants a running event
        loop). Idle connections are dropped after 2 s, well before the server's keep-alive
        timeout (SGLang: ``SGLANG_TIMEOUT_KEEP_ALIVE``, 5 s, 0.5.20 ``environ.py``) closes them
        under a request we send (aiohttp does not resend a POST on a stale connection)."""
        session = self._sessions.get(control)
        if session is None or session.closed:
            limit = 4 if control else 2 * self._pool_size
            connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, keepalive_timeout=2.0)
            session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
            self._sessions[control] = session
        return session

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        control: bool = True,
    ) -> tuple[int, bytes]:
        """``(status, body)`` of one request to ``path``, on the control pool unless ``control``
        is False (chat completions).

        Raises:
            aiohttp.ClientError: a transport error (refused, reset, disconnected).
            TimeoutError: no whole answer within ``timeout_s`` (default: the request timeout).
        """
        timeout = self._timeout if timeout_s is None else aiohttp.ClientTimeout(total=timeout_s)
        data = None if body is None else msgspec.json.encode(body)
        headers = None if body is None else {"Content-Type": "application/json"}
        async with self._http(control=control).request(
            method, self.base_url + path, data=data, headers=headers, timeout=timeout
        ) as resp:
            return resp.status, await resp.read()

    async def aclose(self) -> None:
        """Close the connection pool (in-flight requests are cancelled by the caller first)."""
        for session in self._sessions.values():
            await session.close()

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
                    status, _ = await self._request("GET", path, timeout_s=10.0)
                except _TRANSPORT_ERRORS:
                    break  # not listening yet
                if status == 200:
                    return kind  # type: ignore[return-value]
                if status == 503:
                    break  # starting up
            else:
                return "openai"
            if time.monotonic() >= deadline:
                raise RetriableServerError(f"{self.base_url}: no answer from the server")
            await asyncio.sleep(1.0)

    async def _get_json(self, *paths: str) -> dict[str, Any]:
        for path in paths:
            try:
                status, content = await self._request("GET", path, timeout_s=10.0)
            except _TRANSPORT_ERRORS:
                continue
            if status == 200:
                try:
                    data = msgspec.json.decode(content)
                except msgspec.DecodeError:
                    continue  # not JSON (a proxy's page): as if the path did not answer
                return data if isinstance(data, dict) else {"data": data}
        return {}

    async def _read_info(self, kind: ServerKind) -> ServerInfo:
        models = await self._get_json("/v1/models")
        cards = [m for m in models.get("data", []) if isinstance(m, dict)]
        max_model_len = int_or_none(cards[0].get("max_model_len")) if cards else None
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
                max_running_requests=sglang_running_limit(server),
                context_length=max_model_len or int_or_none(server.get("context_length")),
                version=server.get("version"),
                max_total_num_tokens=int_or_none(server.get("max_total_num_tokens")),
                raw={"server_info": server, "model_info": model, "models": models},
            )
        props = await self._get_json("/props") if kind == "llama.cpp" else {}
        names = [m.get("id") for m in cards]
        n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
        return ServerInfo(
            url=self.base_url,
            kind=kind,
            model=str(names[0] if names and names[0] else props.get("model_alias") or self.generation.model),
            max_running_requests=int_or_none(props.get("total_slots")),
            context_length=int_or_none(n_ctx) or max_model_len,
            version=props.get("build_info"),
            raw={"props": props, "models": models},
        )

    async def healthy(self, kind: ServerKind | None = None, *, timeout_s: float = 30.0) -> bool:
        """True when the server can generate now.

        SGLang: ``GET /health_generate``: it submits a 1-token generation and passes once the
        scheduler produced output (since 0.5, ``/health`` is the same handler; in 0.4.x it was a
        plain 200; docs/sglang.md, "Endpoints"). Other servers: a 1-token chat completion
        (llama.cpp's ``/health`` does not generate).
        """
        kind = kind or (self.info.kind if self.info else "openai")
        try:
            if kind == "sglang":
                status, _ = await self._request("GET", "/health_generate", timeout_s=timeout_s)
                return status == 200
            body = {
                "model": self.info.model if self.info else self.generation.model,
                "messages": [{"role": "user", "content": "Say OK."}],
                "max_tokens": 1,
                "temperature": 0.0,
            }
            status, _ = await self._request("POST", "/v1/chat/completions", body=body, timeout_s=timeout_s)
            return status == 200
        except _TRANSPORT_ERRORS:
            return False

    async def load(self) -> ServerLoad | None:
        """Running and queued requests and KV-cache usage from ``/metrics`` (Prometheus text,
        parsed by prometheus_client; :func:`parse_load`). None when the server exposes no metrics
        (SGLang without ``--enable-metrics``) or answers with something that is not Prometheus
        text."""
        try:
            status, content = await self._request("GET", "/metrics", timeout_s=5.0)
        except _TRANSPORT_ERRORS:
            return None
        if status != 200:
            return None
        return parse_load(content.decode("utf-8", "replace"))

    # -- generation ---------------------------------------------------------------------------
    def request_body(self, prompt: PromptRecord, rid: str) -> dict[str, Any]:
        """The ``/v1/chat/completions`` body (:func:`consumers.requests.chat_request_body`):
        configured defaults, then the record's overrides, for the model discovery found.

        ``rid`` is SGLang's request id (deterministic per prompt and attempt, so a retry after a
        crash never collides with a request still running elsewhere); other servers ignore it.
        """
        return chat_request_body(prompt, rid, self.generation, model=self.info.model if self.info else None)

    async def chat(self, body: dict[str, Any]) -> ChatResult:
        """Send one chat completion and parse the answer (:func:`consumers.sglang.parse_chat_answer`).

        Raises:
            FatalRequestError: 400/404/413/422 (invalid request, prompt longer than the context,
                duplicate in-flight ``rid``): sending it again cannot succeed.
            RetriableServerError: 408/429/5xx, a transport error or timeout, ``finish_reason
                == "abort"``, or a 200 whose body is not a chat completion.
        """
        started = time.monotonic()
        try:
            status, content = await self._request("POST", "/v1/chat/completions", body=body, control=False)
        except TimeoutError as exc:
            raise RetriableServerError(f"{self.base_url}: timeout ({type(exc).__name__})") from None
        except aiohttp.ClientError as exc:
            raise RetriableServerError(f"{self.base_url}: {type(exc).__name__}: {exc}") from None
        return parse_chat_answer(
            status,
            content,
            base_url=self.base_url,
            latency_s=time.monotonic() - started,
            requested_model=body.get("model", ""),
        )
