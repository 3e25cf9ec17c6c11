"""Reading a chat-completions request: the body's validation (SGLang's 400 messages) and the
context-length check, as pure functions of the body and the profile.

Mirrors SGLang 0.5.20 / 0.5.23 (paths under ``python/sglang/srt/``):
``entrypoints/openai/protocol.py`` ``ChatCompletionRequest`` for the fields and
``managers/tokenizer_manager.py`` ``_validate_one_request`` for the context-length limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.profile import SimulatorProfile
from simulator.structured import json_constraint

__all__ = ["BadRequest", "ChatRequest", "context_error", "parse_chat"]


class BadRequest(Exception):
    """A request SGLang answers with 400; ``str(exc)`` is SGLang's message."""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """The parts of a chat-completions request the simulator uses.

    Attributes:
        rid: the client's request id (SGLang's ``rid``), None when not sent.
        model: the ``model`` field when it is a string.
        messages: the chat messages, each an object with a string ``role``.
        max_tokens: ``max_completion_tokens`` or else ``max_tokens`` (tokens), None when unset.
        min_tokens: tokens the answer must at least have.
        enable_thinking: whether the model thinks first (request, then profile default).
        separate_reasoning: whether reasoning goes to ``reasoning_content``.
        tools: the OpenAI tool definitions (empty when none).
        tool_choice: the OpenAI ``tool_choice`` ("auto" when not sent).
        priority: SGLang's request ``priority``, None when not sent.
        json_schema: the JSON Schema the answer must follow (``response_format`` ``json_object``
            or ``json_schema``; :func:`simulator.structured.json_constraint`), None without.
        n: choices asked for (SGLang's parallel sampling: the prompt is prefilled once).
        logprobs: whether each output token's log probability is returned.
        top_logprobs: the most likely tokens returned per position with ``logprobs``.
        seed: the request's ``seed``, None when not sent.
    """

    rid: str | None
    model: str | None
    messages: list[Any]
    max_tokens: int | None
    min_tokens: int
    enable_thinking: bool
    separate_reasoning: bool
    tools: list[Any]
    tool_choice: object
    priority: int | None = None
    json_schema: dict[str, Any] | None = None
    n: int = 1
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0


def parse_chat(body: object, profile: SimulatorProfile, *, id_field: str = "rid") -> ChatRequest:
    """Validate a decoded chat-completions body.

    ``id_field`` names the field of the client's request id (SGLang's ``rid``, vLLM's
    ``request_id``; "" for a server that takes none). Only SGLang reads ``separate_reasoning``:
    another server ignores the field and always splits the reasoning when it has a parser.

    Raises:
        BadRequest: the body is not one the simulator serves (SGLang's or the simulator's message).
    """
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list.")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"messages[{index}] must be an object with a string 'role'.")
    if body.get("stream") is True:
        raise BadRequest("The simulator does not support stream=true; send stream=false.")
    n = body.get("n", 1)
    if n is None:
        n = 1
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BadRequest("'n' must be a positive integer.")
    logprobs = body.get("logprobs") or False
    top_logprobs = body.get("top_logprobs") or 0
    if not isinstance(logprobs, bool):
        raise BadRequest("'logprobs' must be a boolean.")
    if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or not 0 <= top_logprobs <= 20:
        raise BadRequest("'top_logprobs' must be an integer from 0 to 20.")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest("'seed' must be an integer.")
    max_tokens = body.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
        raise BadRequest("'max_tokens' / 'max_completion_tokens' must be an integer.")
    if max_tokens is not None and max_tokens < 0:
        raise BadRequest("max_new_tokens must be at least 0.")
    min_tokens = body.get("min_tokens", 0)
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0:
        raise BadRequest("'min_tokens' must be a non-negative integer.")
    template_kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(template_kwargs, dict):
        raise BadRequest("'chat_template_kwargs' must be an object.")
    # SGLang 0.5.20/0.5.23 entrypoints/openai/protocol.py ChatCompletionRequest
    # normalize_reasoning_inputs: reasoning_effort only *defaults* enable_thinking
    # (ctk.setdefault("enable_thinking", effort != "none")); an explicit value wins.
    thinking = template_kwargs.get("enable_thinking")
    effort = body.get("reasoning_effort")
    if isinstance(thinking, bool):
        enable_thinking = thinking
    elif effort is not None:
        enable_thinking = effort != "none"
    else:
        enable_thinking = profile.default_enable_thinking
    priority = body.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise BadRequest("'priority' must be an integer.")
    separate_reasoning = body.get("separate_reasoning", True) if id_field == "rid" else True
    if not isinstance(separate_reasoning, bool):
        raise BadRequest("'separate_reasoning' must be a boolean.")
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be a list.")
    rid = body.get(id_field) if id_field else None
    if rid is not None and (not isinstance(rid, str) or not rid):
        raise BadRequest(f"'{id_field}' must be a non-empty string.")
    model = body.get("model")
    tool_choice = body.get("tool_choice")
    try:
        json_schema, _ = json_constraint(body)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return ChatRequest(
        rid=rid,
        model=model if isinstance(model, str) else None,
        messages=messages,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        enable_thinking=enable_thinking,
        separate_reasoning=separate_reasoning,
        tools=tools,
        tool_choice="auto" if tool_choice is None else tool_choice,
        priority=priority,
        json_schema=json_schema,
        n=n,
        seed=seed,
        logprobs=logprobs,
        top_logprobs=top_logprobs,
    )


def context_error(prompt_tokens: int, max_tokens: int | None, context: int) -> str | None:
    """SGLang's 400 message when a request does not fit the context, else None.

    Args:
        prompt_tokens: the prompt's length, tokens.
        max_tokens: the completion budget asked for, tokens (None: not asked).
        context: the model's context length, tokens.

    A prompt of ``context`` tokens or more is refused, and so is one whose ``max_tokens`` would
    take it past ``context`` (``_validate_one_request``).
    """
    if prompt_tokens >= context:
        return (
            f"The input ({prompt_tokens} tokens) is longer than the model's context length "
            f"({context} tokens)."
        )
    if max_tokens is not None and max_tokens + prompt_tokens > context:
        total = max_tokens + prompt_tokens
        return (
            f"Requested token count exceeds the model's maximum context length of {context} tokens. "
            f"You requested a total of {total} tokens: {prompt_tokens} tokens from the input messages "
            f"and {max_tokens} tokens for the completion. Please reduce the number of tokens in "
            "the input messages or the completion to fit within the limit."
        )
    return None
