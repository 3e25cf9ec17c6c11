"""What the consumer sends for a prompt: SGLang's request id and the chat-completion request body
(``POST /v1/chat/completions``), and what a completion record says about that request. Pure:
no I/O.

Request fields (``rid``, ``chat_template_kwargs``, ``separate_reasoning``) are SGLang's:
docs/sglang.md; other OpenAI-compatible servers ignore the ones they do not know.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import msgspec

from streams.config import GenerationSettings
from streams.records import OPTIONAL_SAMPLING, PromptRecord

__all__ = [
    "OUTPUT_CONSTRAINTS",
    "chat_request_body",
    "completion_digest",
    "last_user_text",
    "record_params",
    "request_digest",
    "request_id",
    "thinking_requested",
]

_NOT_PARAMS = ("messages", "tools", "rid", "request_id", "stream")
"""request fields a completion record does not repeat in ``params``."""

OUTPUT_CONSTRAINTS: Final = ("response_format", "regex", "ebnf")
"""the structured-output fields; SGLang takes one at a time (docs/structured-output.md)."""


def request_id(run_id: str, prompt_id: str, attempt: int, send: int) -> str:
    """SGLang's request id (``rid``) for the ``send``-th send (1-based) of attempt ``attempt`` of
    prompt ``prompt_id`` in run ``run_id`` (``send`` < 2**32): ``kg-<40 hex digits>-<send as 8 hex
    digits>``. Deterministic, and fixed length so that no rid is a prefix of another (SGLang aborts
    by rid prefix; docs/servers.md, "Request ids").
    """
    digest = hashlib.blake2b(msgspec.json.encode([run_id, prompt_id, attempt]), digest_size=20)
    return f"kg-{digest.hexdigest()}-{send:08x}"


def chat_request_body(
    prompt: PromptRecord, rid: str, generation: GenerationSettings, *, model: str | None = None
) -> dict[str, Any]:
    """The ``/v1/chat/completions`` body: the configured ``generation`` defaults, then the
    record's overrides (``prompt.params``; its ``chat_template_kwargs`` are merged into the
    defaults', not replacing them).

    ``model`` is the served model name discovery found (default: ``generation.model``); ``rid``
    is SGLang's request id (:func:`request_id`), which other servers ignore. ``max_tokens`` is in
    tokens.
    """
    g = generation
    body: dict[str, Any] = {
        "model": g.model if model is None else model,
        "messages": prompt.messages,
        "max_tokens": g.max_tokens,
        "temperature": g.temperature,
        "top_p": g.top_p,
        "chat_template_kwargs": dict(g.chat_template_kwargs),
        "separate_reasoning": g.separate_reasoning,
        "rid": rid,
        "stream": False,
    }
    for name in (*OUTPUT_CONSTRAINTS, *OPTIONAL_SAMPLING):  # set for every prompt
        if getattr(g, name) is not None:
            body[name] = getattr(g, name)
    if g.logprobs:
        body["logprobs"] = True
    if prompt.tools:
        body["tools"] = prompt.tools
    overrides = prompt.params.as_request_fields()
    if any(name in overrides for name in OUTPUT_CONSTRAINTS):  # the row's constraint wins
        for name in OUTPUT_CONSTRAINTS:
            body.pop(name, None)
    if "chat_template_kwargs" in overrides:
        body["chat_template_kwargs"].update(overrides.pop("chat_template_kwargs"))
    row_extra = overrides.pop("extra_body", None) or {}
    body.update(overrides)
    body.update(g.extra_body or {})  # verbatim, last: --extra-body, then the row's
    body.update(row_extra)
    return body


def record_params(body: dict[str, Any]) -> dict[str, Any]:
    """The generation parameters a completion record keeps (``params``): the request ``body``
    without its messages, tools, request id (``rid``, vLLM's ``request_id``) and ``stream``."""
    return {k: v for k, v in body.items() if k not in _NOT_PARAMS}


def request_digest(body: dict[str, Any]) -> bytes:
    """16 bytes that are equal for two request bodies asking the same (messages, tools, every
    sampling parameter, the model): the body without its request id and ``stream``."""
    payload = {k: v for k, v in body.items() if k not in ("rid", "request_id", "stream")}
    return hashlib.blake2b(msgspec.json.encode(payload, order="sorted"), digest_size=16).digest()


def completion_digest(prompt: PromptRecord, params: dict[str, Any]) -> bytes:
    """:func:`request_digest` of the request a completion record answered, from its ``prompt``
    and its ``params`` (:func:`record_params`: the body without messages, tools and ids)."""
    body = {**params, "messages": prompt.messages}
    if prompt.tools:
        body["tools"] = prompt.tools
    return request_digest(body)


def thinking_requested(body: dict[str, Any]) -> bool:
    """Whether the request ``body`` asked for thinking (``chat_template_kwargs.enable_thinking``)."""
    return bool((body.get("chat_template_kwargs") or {}).get("enable_thinking"))


def last_user_text(prompt: PromptRecord) -> str | None:
    """The text of the prompt's last user message (text parts joined by a space), or None."""
    for message in reversed(prompt.messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return None
    return None
