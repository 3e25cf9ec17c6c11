"""What an inference server's answers mean: pure parsing of SGLang's (and llama.cpp's,
OpenAI-compatible) responses, no I/O. The requests themselves are :mod:`consumers.client`'s.

* a chat completion (``POST /v1/chat/completions``): :func:`parse_chat_answer`, which also
  classifies the error answers (docs/sglang.md, "Errors and overload"):

  ==========================================  ============================================
  server answer                               class
  ==========================================  ============================================
  400, 404, 413, 422                          :class:`FatalRequestError` (dead-letter at once)
  408, 429, 5xx (503 queue full, 500), abort  :class:`RetriableServerError` (backoff, retry)
  ==========================================  ============================================

* ``/server_info``: :func:`sglang_running_limit`;
* ``/metrics`` (Prometheus text): :func:`parse_load`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from streams.errors import FatalRequestError, RetriableServerError, ServerError
from streams.records import Usage

__all__ = [
    "FATAL_STATUSES",
    "ChatResult",
    "ServerLoad",
    "int_or_none",
    "parse_chat_answer",
    "parse_load",
    "sglang_running_limit",
]

FATAL_STATUSES = frozenset({400, 404, 413, 422})
"""HTTP statuses of a chat request that sending again cannot fix."""


@dataclass(frozen=True)
class ServerLoad:
    """Running and waiting requests as the server's ``/metrics`` reports them, summed over its
    data-parallel ranks, and the KV-cache usage (fraction 0..1 of the fullest rank's pool; None
    when the server does not report it)."""

    running: int
    queued: int
    token_usage: float | None = None


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


def parse_chat_answer(
    status: int, content: bytes, *, base_url: str, latency_s: float, requested_model: str
) -> ChatResult:
    """The :class:`ChatResult` of a chat-completion answer: HTTP ``status`` and body ``content``
    from the server at ``base_url``, ``latency_s`` seconds after it was sent. ``requested_model``
    (the request's ``model``) names the model when the answer does not.

    Raises:
        FatalRequestError: 400/404/413/422 (invalid request, prompt longer than the context,
            duplicate in-flight ``rid``): sending it again cannot succeed. ``status`` set.
        RetriableServerError: any other non-200 status, ``finish_reason == "abort"``, or a 200
            whose body is not a chat completion (``status`` 200).
    """
    if status != 200:
        detail = content[:500].decode("utf-8", "replace")
        cls: type[ServerError] = FatalRequestError if status in FATAL_STATUSES else RetriableServerError
        raise cls(f"{base_url}: HTTP {status}: {detail}", status=status)
    try:
        data = msgspec.json.decode(content, type=_ChatResponse)
        choice = data.choices[0]
    except (msgspec.DecodeError, IndexError) as exc:
        raise RetriableServerError(f"{base_url}: malformed chat completion: {exc}", status=200) from None
    if choice.finish_reason == "abort":
        raise RetriableServerError(f"{base_url}: request aborted by the server", status=200)
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
            cached_tokens=int_or_none(prompt_details.get("cached_tokens")),
        ),
        model=data.model or requested_model,
        latency_s=latency_s,
    )


def sglang_running_limit(server_info: dict[str, Any]) -> int | None:
    """The number of requests an SGLang server runs at once, from its ``/server_info``.

    The sum over data-parallel ranks of ``internal_states[i].effective_max_running_requests_per_dp``
    (what each rank's scheduler really uses, automatic defaults included); the top-level
    ``max_running_requests`` only when no rank reports it (it is the command-line value, null by
    default). SGLang 0.5.20/0.5.23 ``entrypoints/http_server.py`` ``server_info``,
    ``managers/scheduler.py`` ``get_internal_state``; docs/sglang.md, "Discovery".
    """
    states = server_info.get("internal_states")
    per_rank = [
        int_or_none(state.get("effective_max_running_requests_per_dp"))
        for state in (states if isinstance(states, list) else [])
        if isinstance(state, dict)
    ]
    if per_rank and all(n is not None and n > 0 for n in per_rank):
        return sum(n for n in per_rank if n is not None)
    return int_or_none(server_info.get("max_running_requests"))


_LOAD_SERIES = (
    ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"),
    ("llamacpp:requests_processing", "llamacpp:requests_deferred", None),
)


def parse_load(text: str) -> ServerLoad | None:
    """Running/queued requests and KV-cache usage from a ``/metrics`` body (Prometheus text).

    SGLang exports one series per scheduler: labels ``dp_rank`` (data parallel; different
    requests), ``tp_rank``/``pp_rank``/``moe_ep_rank`` (the same requests, reported by several
    ranks only with ``--enable-metrics-for-all-schedulers``) and, with
    ``--enable-priority-scheduling``, ``priority``: the total under ``priority=""`` beside one
    series per priority value. So: per-priority series are skipped, the ranks of one DP rank
    count once (their largest value), DP ranks are summed; token usage is the largest over ranks
    (the bottleneck pool). SGLang 0.5.20 ``observability/metrics_collector.py``
    (``_log_gauge_queue_count``, the scheduler collector's labels). llama.cpp:
    ``llamacpp:requests_processing`` / ``requests_deferred``.

    Returns None when the text is not Prometheus text or has none of these series.
    """
    values: dict[str, dict[str, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("priority", "") != "":
                    continue  # a per-priority breakdown of the total beside it
                dp = sample.labels.get("dp_rank", "")
                ranks = values.setdefault(sample.name, {})
                ranks[dp] = max(ranks.get(dp, sample.value), sample.value)
    except ValueError:  # not Prometheus text (a proxy's error page, a truncated body)
        return None
    for running_name, queued_name, usage_name in _LOAD_SERIES:
        if running_name in values:
            usage = values.get(usage_name or "", {})
            return ServerLoad(
                running=int(sum(values[running_name].values())),
                queued=int(sum(values.get(queued_name, {}).values())),
                token_usage=max(usage.values()) if usage else None,
            )
    return None


def int_or_none(value: Any) -> int | None:
    """``value`` as an int, or None when it is None or not a number (a server's optional field)."""
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
