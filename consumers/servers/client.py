"""The inference-server client: one server's transport, with its kind (:mod:`consumers.servers.registry`)
deciding discovery, health, load and the request and answer shapes.

``POST /v1/chat/completions`` over an aiohttp keep-alive pool sized to the consumer's in-flight
window; aiohttp, not httpx: httpcore 1.0's pool took 71% of a consumer's CPU at 200 completions/s.
Transport failures are :class:`RetriableServerError` with ``status=None``.

Design: docs/servers.md, "Transport".
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import msgspec

from consumers.servers.answers import ChatResult
from consumers.servers.base import ServerInfo, ServerKind, ServerLoad, model_cards, parse_load
from consumers.servers.registry import FALLBACK, KINDS, LOAD_SERIES
from streams.config import GenerationSettings, Settings
from streams.errors import RetriableServerError
from streams.records import PromptRecord

__all__ = ["ServerClient"]

_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)
"""what a request raises when the server cannot be reached or does not answer in time."""


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
        self.kind: ServerKind | None = None
        """the server's kind, once :meth:`discover` or :meth:`describe` recognised it."""
        self._pool_size = pool_size
        # sock_connect, not connect: aiohttp's ``connect`` also bounds the wait for a free
        # connection of the pool, which must not fail a request the server never saw.
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s, sock_connect=10.0)
        self._sessions: dict[bool, aiohttp.ClientSession] = {}

    @classmethod
    def for_consumer(cls, base_url: str, settings: Settings) -> ServerClient:
        """A client for a generation consumer's requests to ``base_url`` (its own server, or an
        idle member's it lends to): pool ``consumer.max_in_flight``, one generation bounded by
        ``consumer.request_timeout_s`` seconds, ``settings.generation`` as its defaults."""
        cfg = settings.consumer
        return cls(
            base_url,
            settings.generation,
            pool_size=cfg.max_in_flight,
            request_timeout_s=cfg.request_timeout_s,
        )

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

    async def get_json(self, *paths: str) -> dict[str, Any]:
        """The JSON object of the first of ``paths`` that answers 200 with JSON (a list is
        wrapped as ``{"data": [...]}``); ``{}`` when none does."""
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

    async def status_of(
        self, method: str, path: str, *, body: dict[str, Any] | None = None, timeout_s: float
    ) -> int:
        """The HTTP status of one control request (raises the transport's errors)."""
        status, _ = await self._request(method, path, body=body, timeout_s=timeout_s)
        return status

    # -- discovery and health -----------------------------------------------------------------
    async def discover(self, *, wait_s: float = 600.0) -> ServerInfo:
        """Wait until the server can generate, then read what it is.

        The kind is the first of :data:`consumers.servers.registry.KINDS` whose probe path
        answers 200 (else the OpenAI-compatible fallback); readiness is that kind's
        :meth:`~consumers.servers.base.ServerKind.healthy`; then its discovery.

        Raises:
            RetriableServerError: not ready within ``wait_s`` seconds.
        """
        deadline = time.monotonic() + wait_s
        kind = await self._probe_kind(deadline)
        while not await self.healthy(kind):
            if time.monotonic() >= deadline:
                raise RetriableServerError(f"{self.base_url}: not ready after {wait_s:.0f} s")
            await asyncio.sleep(1.0)
        return await self._read_info(kind)

    async def describe(self, *, wait_s: float = 30.0) -> ServerInfo:
        """Read what the server is (as :meth:`discover`) without waiting for it to generate.

        Raises:
            RetriableServerError: the server did not answer within ``wait_s`` seconds.
        """
        return await self._read_info(await self._probe_kind(time.monotonic() + wait_s))

    async def _probe_kind(self, deadline: float) -> ServerKind:
        """The first kind whose probe path answers 200 with a body the kind recognises; a refused
        connection or a 503 (starting up) means wait and probe again, anything else the next path."""
        while True:
            for kind, path in ((k, path) for k in KINDS for path in k.probe_paths):
                try:
                    status, body = await self._request("GET", path, timeout_s=10.0)
                except _TRANSPORT_ERRORS:
                    break  # not listening yet
                if status == 200 and kind.recognises(path, body):
                    return kind
                if status == 503:
                    break  # starting up
            else:
                return FALLBACK
            if time.monotonic() >= deadline:
                raise RetriableServerError(f"{self.base_url}: no answer from the server")
            await asyncio.sleep(1.0)

    async def _read_info(self, kind: ServerKind) -> ServerInfo:
        models = await self.get_json("/v1/models")
        self.info = await kind.read_info(self, models=models, default_model=self.generation.model)
        self.kind = kind
        return self.info

    async def healthy(self, kind: ServerKind | None = None, *, timeout_s: float = 30.0) -> bool:
        """True when the server can generate now, as its kind (default: the discovered one, else
        the OpenAI-compatible fallback) judges it within ``timeout_s`` seconds. SGLang:
        ``/health_generate``; others: a 1-token chat completion. Before discovery the probe names
        the first ``/v1/models`` id (else ``generation.model``): vLLM answers 404 for a model it
        does not serve (docs/vllm.md, "Requests")."""
        kind = kind or self.kind or FALLBACK
        model = self.info.model if self.info else await self._served_model()
        try:
            return await kind.healthy(self, model=model, timeout_s=timeout_s)
        except _TRANSPORT_ERRORS:
            return False

    async def _served_model(self) -> str:
        cards = model_cards(await self.get_json("/v1/models"))
        first = cards[0].get("id") if cards else None
        return first if isinstance(first, str) and first else self.generation.model

    async def load(self) -> ServerLoad | None:
        """Running and queued requests and KV-cache usage from ``/metrics`` (Prometheus text,
        read by the kind's :meth:`~consumers.servers.base.ServerKind.parse_load`; before
        discovery, by every kind's series). None when the server exposes no metrics (SGLang
        without ``--enable-metrics``) or answers with something that is not Prometheus text."""
        try:
            status, content = await self._request("GET", "/metrics", timeout_s=5.0)
        except _TRANSPORT_ERRORS:
            return None
        if status != 200:
            return None
        text = content.decode("utf-8", "replace")
        return self.kind.parse_load(text) if self.kind else parse_load(text, LOAD_SERIES)

    # -- generation ---------------------------------------------------------------------------
    def request_body(self, prompt: PromptRecord, rid: str) -> dict[str, Any]:
        """The ``/v1/chat/completions`` body as the server's kind builds it
        (:func:`consumers.servers.requests.chat_request_body`): configured defaults, then the
        record's overrides, for the model discovery found. ``rid``: SGLang's request id
        (:func:`consumers.servers.requests.request_id`); other servers ignore it.
        """
        kind = self.kind or FALLBACK
        return kind.request_body(prompt, rid, self.generation, model=self.info.model if self.info else None)

    async def chat(self, body: dict[str, Any]) -> ChatResult:
        """Send one chat completion and parse the answer as the server's kind reads it
        (:func:`consumers.servers.answers.parse_chat_answer`).

        Raises:
            FatalRequestError: 400/404/413/422 (invalid request, prompt longer than the context,
                duplicate in-flight ``rid``): sending it again cannot succeed.
            RetriableServerError: 408/429/5xx, a transport error or timeout, ``finish_reason
                == "abort"``, or a 200 whose body is not a chat completion.
        """
        return (await self.chat_choices(body))[0]

    async def chat_choices(self, body: dict[str, Any]) -> list[ChatResult]:
        """Send one chat completion asking for ``body["n"]`` choices (default 1) and parse them
        (:func:`consumers.servers.answers.parse_chat_answers`). Raises as :meth:`chat`."""
        started = time.monotonic()
        try:
            status, content = await self._request("POST", "/v1/chat/completions", body=body, control=False)
        except TimeoutError as exc:
            raise RetriableServerError(f"{self.base_url}: timeout ({type(exc).__name__})") from None
        except aiohttp.ClientError as exc:
            raise RetriableServerError(f"{self.base_url}: {type(exc).__name__}: {exc}") from None
        return (self.kind or FALLBACK).parse_answers(
            status,
            content,
            base_url=self.base_url,
            latency_s=time.monotonic() - started,
            requested_model=body.get("model", ""),
            n=int(body.get("n", 1)),
        )
