"""What every server kind provides, and the shapes discovery and ``/metrics`` produce.

A kind (:class:`ServerKind`) says how to recognise a server, what it is (:class:`ServerInfo`),
whether it can generate now, how loaded it is (:class:`ServerLoad`), and how a chat request and
its answer look; it reads its server only through :class:`ServerHttp`.

Design: docs/servers.md ("What a kind provides", "Load", "Adding a kind").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from consumers.servers.answers import ChatResult, int_or_none, parse_chat_answers
from consumers.servers.requests import chat_request_body
from streams.config import GenerationSettings
from streams.records import PromptRecord

__all__ = ["LoadSeries", "ServerHttp", "ServerInfo", "ServerKind", "ServerLoad", "json_object", "parse_load"]


@dataclass(frozen=True)
class ServerInfo:
    """What discovery learned about a server.

    Attributes:
        url: the base URL (no trailing ``/v1``).
        kind: the :attr:`ServerKind.name` of the kind that recognised it.
        model: the served model name.
        max_running_requests: requests (slots) the server runs at once; None when it does not say.
        context_length: tokens per request; None when unknown.
        version: the server's version string, when reported.
        max_total_num_tokens: KV-cache capacity in tokens (SGLang, per DP rank); None elsewhere.
        parallel_samples: the server answers one request with ``n`` distinct choices, the prompt
            prefilled once (docs/sglang.md, "Parallel samples"); False where unknown.
        raw: the discovery answers as read, by endpoint.
    """

    url: str
    kind: str
    model: str
    max_running_requests: int | None
    context_length: int | None
    version: str | None = None
    max_total_num_tokens: int | None = None
    parallel_samples: bool = False
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ServerLoad:
    """Running and waiting requests as the server's ``/metrics`` reports them, summed over its
    data-parallel ranks, and the KV-cache usage (fraction 0..1 of the fullest rank's pool; None
    when the server does not report it)."""

    running: int
    queued: int
    token_usage: float | None = None


@dataclass(frozen=True)
class LoadSeries:
    """The Prometheus series names of a kind's load: running and queued requests, KV usage, and
    the label that tells its data-parallel ranks apart (their values are summed)."""

    running: str
    queued: str
    token_usage: str | None = None
    rank_label: str = "dp_rank"


class ServerHttp(Protocol):
    """The reads a kind may make of its server (implemented by the client's control pool)."""

    base_url: str

    async def get_json(self, *paths: str) -> dict[str, Any]:
        """The JSON object of the first of ``paths`` answering 200 with JSON; ``{}`` when none."""
        ...

    async def status_of(
        self, method: str, path: str, *, body: dict[str, Any] | None = None, timeout_s: float
    ) -> int:
        """The HTTP status of one request. Raises the transport's errors (refused, timeout)."""
        ...


class ServerKind:
    """One kind of inference server. Subclasses set :attr:`name` and override what differs.

    The defaults are the plain OpenAI-compatible server's: no way to recognise it (it is the
    fallback), health as a 1-token chat completion, no load metrics, the shared request body and
    answer parsing.
    """

    name: ClassVar[str] = "openai"
    probe_paths: ClassVar[tuple[str, ...]] = ()
    """GET paths whose 200, with a body :meth:`recognises`, says a server is of this kind (tried in
    order at discovery)."""
    load_series: ClassVar[LoadSeries | None] = None

    def recognises(self, path: str, body: bytes) -> bool:
        """Whether a 200 answer ``body`` to the probe ``path`` is this kind's (default: any 200)."""
        return True

    async def read_info(
        self, server: ServerHttp, *, models: dict[str, Any], default_model: str
    ) -> ServerInfo:
        """What the server is; ``models`` is its ``/v1/models`` answer (``{}`` when none)."""
        cards = model_cards(models)
        names = [m.get("id") for m in cards]
        return ServerInfo(
            url=server.base_url,
            kind=self.name,
            model=str(names[0] if names and names[0] else default_model),
            max_running_requests=None,
            context_length=max_model_len(models),
            raw={"models": models},
        )

    async def healthy(self, server: ServerHttp, *, model: str, timeout_s: float) -> bool:
        """True when a 1-token chat completion succeeds within ``timeout_s`` seconds. Raises the
        transport's errors."""
        body = {
            "model": model,
            "messages": [{"role": "user", "content": "Say OK."}],
            "max_tokens": 1,
            "temperature": 0.0,
        }
        return await server.status_of("POST", "/v1/chat/completions", body=body, timeout_s=timeout_s) == 200

    def parse_load(self, text: str) -> ServerLoad | None:
        """The load in a ``/metrics`` body, or None (no metrics of this kind in it)."""
        return parse_load(text, (self.load_series,) if self.load_series else ())

    def request_body(
        self, prompt: PromptRecord, rid: str, generation: GenerationSettings, *, model: str | None
    ) -> dict[str, Any]:
        """The ``/v1/chat/completions`` body (:func:`consumers.servers.requests.chat_request_body`)."""
        return chat_request_body(prompt, rid, generation, model=model)

    def parse_answers(
        self, status: int, content: bytes, *, base_url: str, latency_s: float, requested_model: str, n: int
    ) -> list[ChatResult]:
        """The ``n`` choices of the answer to a chat completion
        (:func:`consumers.servers.answers.parse_chat_answers`)."""
        return parse_chat_answers(
            status, content, base_url=base_url, latency_s=latency_s, requested_model=requested_model, n=n
        )


def json_object(body: bytes) -> dict[str, Any] | None:
    """``body`` decoded, when it is a JSON object; else None (not JSON, or another JSON value)."""
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    return data if isinstance(data, dict) else None


def model_cards(models: dict[str, Any]) -> list[dict[str, Any]]:
    """The model cards (dicts) of a ``/v1/models`` answer."""
    return [m for m in models.get("data", []) if isinstance(m, dict)]


def max_model_len(models: dict[str, Any]) -> int | None:
    """``max_model_len`` of the first model card of a ``/v1/models`` answer (SGLang, vLLM)."""
    cards = model_cards(models)
    return int_or_none(cards[0].get("max_model_len")) if cards else None


def parse_load(text: str, series: tuple[LoadSeries, ...]) -> ServerLoad | None:
    """Running/queued requests and KV-cache usage from a ``/metrics`` body (Prometheus text),
    read from the first of ``series`` present: DP ranks summed, other ranks counted once,
    per-priority series skipped, token usage the fullest rank's (SGLang 0.5.20
    ``observability/metrics_collector.py``; docs/servers.md, "Load").

    Returns None when the text is not Prometheus text or has none of these series.
    """
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("priority", "") != "":
                    continue  # a per-priority breakdown of the total beside it
                samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    except ValueError:  # not Prometheus text (a proxy's error page, a truncated body)
        return None

    def per_rank(name: str, rank_label: str) -> dict[str, float]:
        ranks: dict[str, float] = {}
        for labels, value in samples.get(name, []):
            rank = labels.get(rank_label, "")
            ranks[rank] = max(ranks.get(rank, value), value)
        return ranks

    for names in series:
        if names.running in samples:
            usage = per_rank(names.token_usage or "", names.rank_label)
            return ServerLoad(
                running=int(sum(per_rank(names.running, names.rank_label).values())),
                queued=int(sum(per_rank(names.queued, names.rank_label).values())),
                token_usage=max(usage.values()) if usage else None,
            )
    return None
