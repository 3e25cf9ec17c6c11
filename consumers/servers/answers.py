"""What a chat completion's answer means, for every server kind: the OpenAI shape that SGLang,
llama.cpp and other OpenAI-compatible servers share. Pure parsing, no I/O.

:func:`parse_chat_answer` classifies the error answers: 400/404/413/422 are fatal (dead-letter at
once), 408, 429, 5xx and an abort are retriable. Design: docs/servers.md, "Answers and errors".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from streams.errors import FatalRequestError, RetriableServerError, ServerError
from streams.records import Usage

__all__ = [
    "FATAL_STATUSES",
    "ChatResult",
    "apportion",
    "int_or_none",
    "parse_chat_answer",
    "parse_chat_answers",
]

FATAL_STATUSES = frozenset({400, 404, 413, 422})
"""HTTP statuses of a chat request that sending again cannot fix."""


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
    logprobs: dict[str, Any] | None = None
    """the choice's ``logprobs`` as returned (when the request asked for them)."""


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
    return parse_chat_answers(
        status, content, base_url=base_url, latency_s=latency_s, requested_model=requested_model, n=1
    )[0]


def parse_chat_answers(
    status: int, content: bytes, *, base_url: str, latency_s: float, requested_model: str, n: int
) -> list[ChatResult]:
    """The ``n`` choices of a chat-completion answer to a request with ``n`` (as
    :func:`parse_chat_answer` reads one), in ``index`` order.

    With ``n`` over 1 the usage covers the whole request (SGLang 0.5.20/0.5.23
    ``entrypoints/openai/usage_processor.py`` ``calculate_response_usage``: the prompt counted
    once, the completion tokens summed over the choices; vLLM likewise): each result carries the
    prompt's counts and its share of the completion and reasoning tokens, apportioned by the
    length of its output, with :attr:`~streams.records.Usage.shared_by` set to ``n``.

    Raises:
        FatalRequestError, RetriableServerError: as :func:`parse_chat_answer`; also retriable when
            the answer has fewer than ``n`` choices, or any choice was aborted.
    """
    if status != 200:
        detail = content[:500].decode("utf-8", "replace")
        cls: type[ServerError] = FatalRequestError if status in FATAL_STATUSES else RetriableServerError
        raise cls(f"{base_url}: HTTP {status}: {detail}", status=status)
    try:
        data = msgspec.json.decode(content, type=_ChatResponse)
    except msgspec.DecodeError as exc:
        raise RetriableServerError(f"{base_url}: malformed chat completion: {exc}", status=200) from None
    choices = sorted(data.choices, key=lambda c: c.index)[:n]
    if len(choices) < n:
        raise RetriableServerError(
            f"{base_url}: malformed chat completion: {len(data.choices)} choices, {n} asked for", status=200
        )
    if any(choice.finish_reason == "abort" for choice in choices):
        raise RetriableServerError(f"{base_url}: request aborted by the server", status=200)
    usage = data.usage or _UsageWire()
    details = usage.completion_tokens_details or {}
    prompt_details = usage.prompt_tokens_details or {}
    reasoning_total = usage.reasoning_tokens or int(details.get("reasoning_tokens") or 0)
    if n == 1:  # the counts as reported
        reasoning_share, completion_share = [reasoning_total], [usage.completion_tokens]
    else:
        thought = [len(c.message.reasoning_content or "") for c in choices]
        said = [
            len(c.message.content or "")
            + (len(msgspec.json.encode(c.message.tool_calls)) if c.message.tool_calls else 0)
            for c in choices
        ]
        reasoning_share = apportion(reasoning_total, thought)
        answer_share = apportion(usage.completion_tokens - reasoning_total, said)
        completion_share = [r + a for r, a in zip(reasoning_share, answer_share, strict=True)]
    return [
        ChatResult(
            content=choice.message.content or "",
            reasoning_content=choice.message.reasoning_content or None,
            tool_calls=choice.message.tool_calls or None,
            finish_reason=choice.finish_reason or "stop",
            usage=Usage(
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=completion,
                reasoning_tokens=reasoning,
                cached_tokens=int_or_none(prompt_details.get("cached_tokens")),
                shared_by=n,
            ),
            model=data.model or requested_model,
            latency_s=latency_s,
            logprobs=choice.logprobs,
        )
        for choice, reasoning, completion in zip(choices, reasoning_share, completion_share, strict=True)
    ]


def apportion(total: int, weights: list[int]) -> list[int]:
    """``total`` (>= 0; a negative total counts as 0) split into ``len(weights)`` non-negative
    integers in proportion to ``weights`` (all zero: equally), the remainders going to the largest
    fractions first, so the parts sum to ``total`` exactly."""
    total = max(0, total)
    if len(weights) == 1:
        return [total]
    if not any(weights):
        weights = [1] * len(weights)
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    parts = [int(x) for x in exact]
    by_fraction = sorted(range(len(weights)), key=lambda i: exact[i] - parts[i], reverse=True)
    for i in by_fraction[: total - sum(parts)]:
        parts[i] += 1
    return parts


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
    index: int = 0
    logprobs: dict[str, Any] | None = None
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
