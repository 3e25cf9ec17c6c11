"""Quality flags: cheap, pure checks of one completion, recorded in ``CompletionRecord.quality``.

A server can answer 200 with useless output (a reasoning trace cut off by the token budget and no
answer, a loop, a broken tool call). The flags make such completions visible and countable per
server. Their names (:class:`streams.quality.QualityFlag`) and which of them make a completion
unusable (:func:`streams.quality.degenerate`) are the core's: :mod:`streams.quality`.

Design: docs/gate.md, "Quality flags" (what raises each flag, the repetition thresholds).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from consumers.quality.structured import structured_flags
from consumers.servers.requests import last_user_text, thinking_requested
from streams.quality import QualityFlag

if TYPE_CHECKING:
    from consumers.servers.answers import ChatResult
    from streams.records import PromptRecord

__all__ = [
    "TEMPLATE_TOKENS",
    "QualityConfig",
    "answer_flags",
    "echoes",
    "quality_flags",
    "repeated_ngram_ratio",
    "tokenize",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class QualityConfig:
    """Thresholds of the repetition check. Lengths count :func:`tokenize` tokens; why these
    defaults (measured on 4,178 human-written documents): docs/gate.md, "Repetition".

    Raises:
        ValueError: from the constructor when a value is out of range.
    """

    ngram: int = 8
    threshold: float = 0.5
    tail_tokens: int = 512
    min_tokens: int = 64

    def __post_init__(self) -> None:
        if self.ngram < 1 or not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"need ngram >= 1 and 0 < threshold <= 1, got {self.ngram}, {self.threshold}")
        if self.min_tokens < self.ngram or self.tail_tokens < self.min_tokens:
            raise ValueError("need ngram <= min_tokens <= tail_tokens")


# One token per CJK ideograph or kana (those scripts do not separate words by spaces), and
# one per run of other non-space characters.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")
_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
_TOOL_CALL_TAG = "<tool_call>"


def tokenize(text: str) -> list[str]:
    """Split ``text`` into case-folded tokens: whitespace-separated words, and single CJK characters."""
    return _TOKEN.findall(text.casefold())


def repeated_ngram_ratio(text: str, n: int = 8) -> float:
    """The share of the ``n``-grams of ``text`` (over :func:`tokenize` tokens) that repeat an
    earlier one: ``1 - distinct / total``, in ``[0, 1)``; ``0.0`` when there are fewer than ``n``
    tokens. "the the the ..." scores close to 1, ordinary prose close to 0.

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return _ratio(tokenize(text), n)


def _ratio(tokens: list[str], n: int) -> float:
    total = len(tokens) - n + 1
    if total <= 0:
        return 0.0
    distinct = len({tuple(tokens[i : i + n]) for i in range(total)})
    return 1.0 - distinct / total


def _loops(text: str, config: QualityConfig) -> bool:
    tokens = tokenize(text)
    if len(tokens) < config.min_tokens:
        return False
    if _ratio(tokens, config.ngram) >= config.threshold:
        return True
    return len(tokens) > config.tail_tokens and (
        _ratio(tokens[-config.tail_tokens :], config.ngram) >= config.threshold
    )


def _tool_call_ok(call: Any) -> bool:
    if not isinstance(call, dict):
        return False
    function = call.get("function")
    if not isinstance(function, dict):
        return False
    name = function.get("name")
    arguments = function.get("arguments")
    if not isinstance(name, str) or not name.strip() or not isinstance(arguments, str):
        return False
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return False
    return isinstance(parsed, dict)


TEMPLATE_TOKENS: Final = (
    "<|im_start|>",
    "<|im_end|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<|start_header_id|>",
    "<|eot_id|>",
    "<|endoftext|>",
)
"""Chat-template control tokens (ChatML/Qwen, Gemma, Llama 3) that never belong in an answer: seen in
content, they mean the server applied the wrong chat template or the model ran past its turn."""

_ECHO_MIN_CHARS: Final = 24


def _normalised(text: str) -> str:
    return " ".join(text.split()).lower()


def echoes(content: str, prompt_text: str) -> bool:
    """True when ``content`` starts by repeating ``prompt_text`` (the last user message), whitespace
    and case aside. Prompts shorter than 24 characters are never judged (a short answer may
    legitimately repeat a short question)."""
    prompt = _normalised(prompt_text)
    if len(prompt) < _ECHO_MIN_CHARS:
        return False
    head = _normalised(content)[: len(prompt) + 16]
    return prompt[: max(_ECHO_MIN_CHARS, len(prompt) * 3 // 4)] in head


def quality_flags(
    *,
    content: str,
    reasoning_content: str | None,
    finish_reason: str,
    tool_calls: list[dict[str, Any]] | None,
    tools_offered: bool,
    thinking_requested: bool,
    prompt_text: str | None = None,
    config: QualityConfig = QualityConfig(),
) -> list[str]:
    """The quality flags of one completion, as the server returned it, in :class:`QualityFlag` order.

    Args:
        content: ``message.content`` (``""`` when empty, as SGLang returns it).
        reasoning_content: ``message.reasoning_content``; ``None`` when the server sent none.
        finish_reason: ``stop``, ``length``, ``tool_calls``, ...
        tool_calls: ``message.tool_calls`` as parsed by the server, or ``None``.
        tools_offered: whether the request carried a non-empty ``tools`` list.
        thinking_requested: whether the request asked for thinking (``enable_thinking``).
        prompt_text: the last user message's text, to detect an answer that echoes it.
        config: repetition thresholds.

    Returns:
        Flag names (plain ``str`` values of :class:`QualityFlag`), empty for a clean completion.
        Runs in time linear in the text length (about 10 ms per 30,000 tokens).
    """
    flags: list[QualityFlag] = []
    blank = not content.strip()
    length = finish_reason == "length"
    unclosed_think = _THINK_OPEN in content and _THINK_CLOSE not in content
    if blank and not tool_calls:
        flags.append(QualityFlag.EMPTY_CONTENT)
    if length and (blank or unclosed_think) and not tool_calls:
        flags.append(QualityFlag.REASONING_ATE_BUDGET)
    if thinking_requested and not (reasoning_content and reasoning_content.strip()):
        flags.append(QualityFlag.THINKING_MISSING)
    if length:
        flags.append(QualityFlag.TRUNCATED)
    if _loops(content, config) or (reasoning_content is not None and _loops(reasoning_content, config)):
        flags.append(QualityFlag.REPETITION_LOOP)
    if tools_offered and (
        any(not _tool_call_ok(call) for call in tool_calls or ()) or _TOOL_CALL_TAG in content
    ):
        flags.append(QualityFlag.MALFORMED_TOOL_CALL)
    if any(token in content or token in (reasoning_content or "") for token in TEMPLATE_TOKENS):
        flags.append(QualityFlag.TEMPLATE_LEAK)
    if prompt_text and echoes(content, prompt_text):
        flags.append(QualityFlag.ECHOED_PROMPT)
    return [flag.value for flag in flags]


def answer_flags(prompt: PromptRecord, body: dict[str, Any], answer: ChatResult) -> list[str]:
    """The quality flags (:func:`quality_flags`) of the server's ``answer`` to the request ``body``
    sent for ``prompt``: tools offered by the prompt, thinking as the body asked for it, the last
    user message as the text an answer must not echo; then the structured-output check of the
    body's ``response_format`` or ``regex`` (:func:`consumers.quality.structured.structured_flags`)."""
    return [
        *quality_flags(
            content=answer.content,
            reasoning_content=answer.reasoning_content,
            finish_reason=answer.finish_reason,
            tool_calls=answer.tool_calls,
            tools_offered=bool(prompt.tools),
            thinking_requested=thinking_requested(body),
            prompt_text=last_user_text(prompt),
        ),
        *structured_flags(body, answer.content),
    ]
