"""What the simulator answers: SGLang's error body, and a finished request's chat response built
from its :class:`~simulator.output.OutputPlan` (where the reasoning goes, which tokens count).

The JSON shapes themselves (per SGLang version) are :mod:`simulator.shapes`'; this module
decides what goes into them.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from simulator import shapes
from simulator.chat_request import ChatRequest
from simulator.output import OutputPlan
from simulator.profile import SimulatorProfile

__all__ = ["chat_body", "error_response", "join_words", "token_logprobs"]


def join_words(words: tuple[str, ...]) -> str:
    """Synthetic words as text (paragraph breaks kept, one token per whitespace-separated word)."""
    return " ".join(words).replace("\n\n ", "\n\n").rstrip()


def error_response(status: int, message: str, kind: str | None = None) -> web.Response:
    """SGLang's error body (``entrypoints/openai/serving_base.py`` ``create_error_response``).

    ``kind`` is its ``type``; by default 400s carry "BadRequestError", a 503 raised as an
    ``HTTPException`` (queue full) carries "503" (``handle_request``:
    ``err_type=str(e.status_code)``), anything else "InternalServerError".
    """
    if kind is None:
        kind = {400: "BadRequestError", 503: "503"}.get(status, "InternalServerError")
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


def chat_body(
    profile: SimulatorProfile,
    rid: str,
    chat: ChatRequest,
    plan: OutputPlan,
    prompt_tokens: int,
    cached_tokens: int = 0,
) -> dict[str, Any]:
    """The chat response for ``plan`` (see :func:`shapes.chat_response` for the shape).

    Args:
        profile: the simulated server (its reasoning parser decides where reasoning goes).
        rid: the request id the response carries.
        chat: the request as parsed.
        plan: the request's output, as finished (possibly truncated by an abort).
        prompt_tokens / cached_tokens: the usage's prompt and cached counts, tokens.
    """
    parser = profile.reasoning_parser
    reasoning = join_words(plan.reasoning)
    answer = "" if plan.tool_calls else join_words(plan.answer)
    reasoning_content: str | None = None
    if plan.thinking and parser is not None and chat.separate_reasoning:
        content, reasoning_content = answer, reasoning or None
    elif plan.thinking:  # unparsed: the think block stays in the content
        closed = bool(plan.answer) or plan.finish_reason in ("stop", "tool_calls")
        content = "<think>\n" + reasoning + ("\n</think>\n\n" + answer if closed else "")
    else:
        content = answer
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "reasoning_content": reasoning_content,
    }
    if plan.tool_calls:
        message["tool_calls"] = [call.to_openai(i) for i, call in enumerate(plan.tool_calls)]
    # The scheduler counts reasoning tokens only for a request in thinking mode, which needs
    # a reasoning parser (SGLang 0.5.20 serving_chat.py _get_reasoning_from_request returns
    # False without one; scheduler_components/batch_result_processor.py
    # _maybe_update_reasoning_tokens skips requests without require_reasoning).
    reasoning_tokens = len(plan.reasoning) if parser is not None and chat.enable_thinking else 0
    completion_tokens = plan.completion_tokens if prompt_tokens or plan.completion_tokens else 0
    body = shapes.chat_response(
        profile,
        rid=rid,
        created=int(time.time()),
        model=chat.model,
        message=message,
        finish_reason=plan.finish_reason,
        matched_stop=shapes.EOS_TOKEN_ID if plan.finish_reason == "stop" else None,
        usage_body=shapes.usage(
            profile,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            reasoning_tokens=min(reasoning_tokens, completion_tokens),
            cached_tokens=cached_tokens,
        ),
    )
    if chat.logprobs:
        body["choices"][0]["logprobs"] = token_logprobs((*plan.reasoning, *plan.answer), chat.top_logprobs)
    return body


def token_logprobs(words: tuple[str, ...], top: int) -> dict[str, Any]:
    """``choices[i].logprobs`` for these output tokens (one per word), as SGLang builds it
    (0.5.23 ``entrypoints/openai/serving_chat.py`` ``_process_response_logprobs``: every output
    token, reasoning included, each with ``top`` alternatives). The values are synthetic."""
    content = []
    for i, word in enumerate(words):
        token = word if i == 0 else " " + word
        logprob = -0.05 - 0.01 * (len(word) % 7)
        names = [token, *(f" alt{k}" for k in range(1, top))][:top]
        alternatives = [
            {"token": name, "bytes": list(name.encode()), "logprob": logprob - 1.5 * k}
            for k, name in enumerate(names)
        ]
        content.append(
            {"token": token, "bytes": list(token.encode()), "logprob": logprob, "top_logprobs": alternatives}
        )
    return {"content": content}
