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

__all__ = ["FATAL_STATUSES", "ChatResult", "int_or_none", "parse_chat_answer"]

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
