"""Synthetic model output: what a simulated request will say, decided before it runs.

The text is **synthetic**: words drawn from a fixed vocabulary, one word per token, with
no meaning. Only its shape is realistic: a reasoning part and an answer part, lengths
from a lognormal distribution, tool calls with JSON arguments that follow the offered
schema, and the failure shapes of :class:`~simulator.profile.FaultConfig`.

Output is deterministic per request: the same seed (from the ``rid``, or from the
messages when there is no ``rid``) always gives the same plan.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from simulator.profile import FaultConfig, SimulatorProfile
from simulator.structured import answer_words

__all__ = ["OutputPlan", "ToolCallPlan", "estimate_prompt_tokens", "plan_output", "request_seed"]

_VOCABULARY_TEXT = (
    "the of and to in is that it for as with was on be by this are from or an at which "
    "not have we can one all their has more time when there been so if about other into "
    "some than then these two may first would only its new also any over such use value "
    "model data point number case result answer step check count list order set sum term "
    "because therefore however since given assume consider note thus hence wait first "
    "second next last each every both either whether while where again still already "
    "small large equal greater less total part whole factor line angle side length area "
    "rate speed cost price year day hour word letter table row column graph node edge "
    "left right up down start end begin finish true false correct wrong simple careful"
)
_VOCABULARY = tuple(_VOCABULARY_TEXT.split())

_PROMPT_TOKENS_PER_MESSAGE = 4
"""Chat-template tokens around each message (role markers), an estimate."""


def estimate_prompt_tokens(messages: Sequence[Any], tools: Sequence[Any] = ()) -> int:
    """Prompt length in tokens, estimated as ~4 characters per token.

    Counts the text of every message (string content or the ``text`` of content parts),
    :data:`_PROMPT_TOKENS_PER_MESSAGE` template tokens per message, the tools' JSON and
    2 tokens of generation prompt.
    """
    total = 2
    for message in messages:
        chars = 0
        if isinstance(message, Mapping):
            content = message.get("content")
            if isinstance(content, str):
                chars = len(content)
            elif isinstance(content, list):
                chars = sum(
                    len(part["text"])
                    for part in content
                    if isinstance(part, Mapping) and isinstance(part.get("text"), str)
                )
            if message.get("tool_calls"):
                chars += len(json.dumps(message["tool_calls"], default=str))
        total += math.ceil(chars / 4) + _PROMPT_TOKENS_PER_MESSAGE
    if tools:
        total += math.ceil(len(json.dumps(list(tools), default=str)) / 4)
    return total


def request_seed(rid: str | None, messages: Sequence[Any], profile_seed: int = 0) -> int:
    """64-bit seed of a request: from its ``rid`` if it has one, else from its messages."""
    if rid is not None:
        key = "rid:" + rid
    else:
        key = "messages:" + json.dumps(list(messages), sort_keys=True, ensure_ascii=False, default=str)
    digest = hashlib.sha256(f"{profile_seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True, slots=True)
class ToolCallPlan:
    """One parsed tool call: ``arguments`` is a JSON string, as in the OpenAI API."""

    call_id: str
    name: str
    arguments: str

    def to_openai(self, index: int) -> dict[str, Any]:
        """The ``message.tool_calls[i]`` object."""
        return {
            "id": self.call_id,
            "index": index,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """What a request outputs, one word per token.

    Attributes:
        reasoning: reasoning words (tokens), empty with thinking off.
        answer: answer words (tokens); for a tool call, the raw call text the
            tool-call parser turned into ``tool_calls``.
        tool_calls: parsed tool calls (empty unless the answer is a complete tool call).
        finish_reason: "stop", "length", "tool_calls" or "abort".
        base_rate: this request's decode rate at batch size 1, tokens/s.
        thinking: whether the request ran with thinking on.
    """

    reasoning: tuple[str, ...]
    answer: tuple[str, ...]
    tool_calls: tuple[ToolCallPlan, ...]
    finish_reason: str
    base_rate: float
    thinking: bool

    @property
    def completion_tokens(self) -> int:
        """Output tokens: reasoning plus answer."""
        return len(self.reasoning) + len(self.answer)

    def truncated(self, tokens: int, finish_reason: str) -> OutputPlan:
        """The first ``tokens`` output tokens, ending with ``finish_reason``.

        Reasoning comes first: a cut inside it leaves no answer (Qwen3's parser then puts
        everything in ``reasoning_content``); a cut inside a tool call leaves its raw text.
        """
        tokens = max(0, tokens)
        reasoning = self.reasoning[:tokens]
        answer = self.answer[: tokens - len(reasoning)]
        complete = len(reasoning) == len(self.reasoning) and len(answer) == len(self.answer)
        return replace(
            self,
            reasoning=reasoning,
            answer=answer,
            tool_calls=self.tool_calls if complete else (),
            finish_reason=finish_reason,
        )


def _words(rng: random.Random, count: int) -> list[str]:
    """``count`` synthetic words in sentences (capitalised, full stops, paragraph breaks)."""
    words: list[str] = []
    while len(words) < count:
        sentence = rng.choices(_VOCABULARY, k=rng.randint(6, 18))
        sentence[0] = sentence[0].capitalize()
        sentence[-1] += "."
        if rng.random() < 0.15:
            sentence[-1] += "\n\n"
        words.extend(sentence)
    return words[:count]


def _tool_arguments(rng: random.Random, parameters: object) -> dict[str, Any]:
    """Synthetic arguments that follow a JSON-schema ``parameters`` object (top level only)."""
    if not isinstance(parameters, Mapping):
        return {}
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    required = parameters.get("required")
    required_names = set(required) if isinstance(required, list) else set()
    arguments: dict[str, Any] = {}
    for name, schema in properties.items():
        if name not in required_names and rng.random() < 0.5:
            continue
        kind = schema.get("type") if isinstance(schema, Mapping) else None
        enum = schema.get("enum") if isinstance(schema, Mapping) else None
        if isinstance(enum, list) and enum:
            arguments[name] = rng.choice(enum)
        elif kind == "integer":
            arguments[name] = rng.randint(0, 100)
        elif kind == "number":
            arguments[name] = round(rng.uniform(0, 100), 2)
        elif kind == "boolean":
            arguments[name] = rng.random() < 0.5
        elif kind == "array":
            arguments[name] = rng.choices(_VOCABULARY, k=rng.randint(1, 3))
        elif kind == "object":
            arguments[name] = {}
        else:
            arguments[name] = " ".join(rng.choices(_VOCABULARY, k=rng.randint(1, 4)))
    return arguments


def _function_of(tool: object) -> Mapping[str, Any] | None:
    if isinstance(tool, Mapping):
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return function
    return None


def _pick_tool(rng: random.Random, tools: Sequence[Any], tool_choice: object, fraction: float) -> Any:
    """The tool a request calls, or ``None`` for a text answer. Always draws once from ``rng``."""
    draw = rng.random()
    functions = [f for f in (_function_of(t) for t in tools) if f is not None]
    if not functions or tool_choice == "none":
        return None
    if isinstance(tool_choice, Mapping):
        wanted = _function_of(tool_choice)
        named = [f for f in functions if wanted is not None and f["name"] == wanted["name"]]
        return named[0] if named else None
    if tool_choice == "required" or draw < fraction:
        return functions[int(draw * 1_000_003) % len(functions)]
    return None


def plan_output(
    profile: SimulatorProfile,
    *,
    seed: int,
    enable_thinking: bool,
    budget: int,
    min_tokens: int = 0,
    tools: Sequence[Any] = (),
    tool_choice: object = "auto",
    faults: FaultConfig | None = None,
    abort_fraction: float | None = None,
    json_schema: dict[str, Any] | None = None,
    violate: bool = False,
) -> OutputPlan:
    """Plan one request's output.

    Args:
        profile: output-length distribution, tool-call fraction, decode-rate range.
        seed: per-request seed (:func:`request_seed`); same seed, same plan.
        enable_thinking: resolved ``chat_template_kwargs.enable_thinking``.
        budget: ``max_tokens`` (reasoning and answer together), tokens.
        min_tokens: SGLang ``min_tokens``: the output is at least this long (still capped by
            ``budget``), tokens.
        tools: the request's ``tools``.
        tool_choice: the request's ``tool_choice`` ("auto", "none", "required" or a named function).
        faults: output-shaping faults (degenerate, reasoning eats budget, repetition);
            default none.
        abort_fraction: if set, the request ends with "abort" after this fraction (0–1)
            of its tokens.
        json_schema: the answer is JSON this schema accepts (grammar-constrained decoding), or
            with ``violate`` one it refuses (:func:`simulator.structured.answer_words`).
    """
    faults = faults if faults is not None else FaultConfig()
    rng = random.Random(seed)
    base_rate = rng.uniform(profile.decode_tok_s_min, profile.decode_tok_s_max)
    median = profile.thinking_median_tokens if enable_thinking else profile.no_thinking_median_tokens
    length = max(1, min_tokens, round(rng.lognormvariate(math.log(median), profile.length_sigma)))
    share = rng.uniform(profile.reasoning_share_min, profile.reasoning_share_max)
    tool = _pick_tool(rng, tools, tool_choice, profile.tool_call_fraction)
    # Separate streams: a shorter budget gives an exact prefix of the longer output.
    reasoning_rng, answer_rng, extra_rng = (random.Random(rng.getrandbits(64)) for _ in range(3))
    n_reasoning = min(length - 1, max(1, round(length * share))) if enable_thinking else 0
    n_answer = length - n_reasoning
    fixed_answer: list[str] | None = None  # answer words known in full (short ones only)
    tool_calls: tuple[ToolCallPlan, ...] = ()
    finish_reason = "stop"

    if faults.degenerate_thinking_off:
        enable_thinking, n_reasoning, fixed_answer = False, 0, ["OK."]
    elif faults.reasoning_eats_budget:
        enable_thinking, n_reasoning, n_answer, finish_reason = True, budget, 0, "length"
    elif faults.repetition:
        n_reasoning = min(n_reasoning, budget // 2)
        gram = extra_rng.choices(_VOCABULARY, k=extra_rng.randint(3, 6))
        loop_length = max(0, budget - n_reasoning)
        fixed_answer = (gram * (loop_length // len(gram) + 1))[:loop_length]
        finish_reason = "length"
    elif tool is not None:
        call = ToolCallPlan(
            call_id="call_" + extra_rng.randbytes(12).hex(),
            name=str(tool["name"]),
            arguments=json.dumps(_tool_arguments(extra_rng, tool.get("parameters")), ensure_ascii=False),
        )
        raw = f'<tool_call>\n{{"name": {json.dumps(call.name)}, "arguments": {call.arguments}}}\n</tool_call>'
        fixed_answer, tool_calls, finish_reason = raw.split(), (call,), "tool_calls"
    elif json_schema is not None:
        fixed_answer = answer_words(json_schema, extra_rng, violate=violate)
    if fixed_answer is not None:
        n_answer = len(fixed_answer)

    natural = n_reasoning + n_answer
    emitted = min(natural, budget)
    if abort_fraction is not None:
        emitted = math.floor(abort_fraction * emitted)
        finish_reason, tool_calls = "abort", ()
    elif emitted < natural:
        finish_reason, tool_calls = "length", ()
    n_reasoning = min(n_reasoning, emitted)
    answer = fixed_answer if fixed_answer is not None else _words(answer_rng, emitted - n_reasoning)
    return OutputPlan(
        reasoning=tuple(_words(reasoning_rng, n_reasoning)),
        answer=tuple(answer[: emitted - n_reasoning]),
        tool_calls=tool_calls,
        finish_reason=finish_reason,
        base_rate=base_rate,
        thinking=enable_thinking,
    )
