"""The checks of a row's fields shared by every input format: chat messages, OpenAI tools and
generation parameters, each returned checked (or converted) or refused with :class:`BadRow`.

Pure functions. A check names the offending field by its JSON path (``messages[2].role``,
``body.temperature``); :func:`streams.inputs.formats.normalise` adds the input's source and line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NoReturn

import msgspec

from streams.records import GenerationParams, extra_body_problem, output_constraint_problem

__all__ = [
    "BadRow",
    "checked_message",
    "checked_messages",
    "checked_tools",
    "fail",
    "generation_params",
    "json_type",
    "nonempty_text",
    "shortened",
]


class BadRow(Exception):
    """A row is wrong (the reason, without source or line): :func:`streams.inputs.formats.normalise`
    adds them to make an :class:`streams.errors.InputError`."""


def fail(reason: str) -> NoReturn:
    """Refuse the row for ``reason``.

    Raises:
        BadRow: always.
    """
    raise BadRow(reason)


_ROLES: Final = ("system", "user", "assistant", "tool")
_PARAM_FIELDS: Final = frozenset(GenerationParams.__struct_fields__)

# OpenAI request parameters GenerationParams cannot carry: accepted only at their OpenAI default
# value (None: any non-null value is rejected), so that no row silently loses a setting.
_UNSUPPORTED_PARAMS: Final[Mapping[str, object]] = {
    "n": 1,
    "stream": False,
    "logit_bias": None,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "reasoning_effort": None,
    "ignore_eos": False,
    "functions": None,
    "function_call": None,
}
# Batch body fields dropped on purpose: they name or bill the model, they do not shape its output.
_IGNORED_BODY_FIELDS: Final = frozenset({"model", "user", "store", "metadata", "service_tier"})


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def shortened(value: object, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters with ``...`` (for error messages)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def nonempty_text(value: object, path: str) -> str:
    """``value`` when it is a string with some non-space text.

    Raises:
        BadRow: not a string, or blank; the reason names ``path``.
    """
    if not isinstance(value, str):
        fail(f"{path} is {json_type(value)}, expected a string")
    if not value.strip():
        fail(f"{path} is an empty string")
    return value


def checked_message(value: object, path: str) -> dict[str, Any]:
    """Check one OpenAI chat message; returned unchanged (extra keys such as ``name`` kept).

    Raises:
        BadRow: no valid role, no or empty content, misplaced or malformed ``tool_calls``, a
            tool message without ``tool_call_id``.
    """
    if not isinstance(value, dict):
        fail(f"{path} is {json_type(value)}, expected a message object with role and content")
    role = value.get("role")
    if role not in _ROLES:
        what = "missing" if role is None else f"{shortened(role)}"
        fail(f"{path}.role is {what}: expected one of {', '.join(_ROLES)}")
    content = value.get("content")
    tool_calls = value.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant":
            fail(f"{path} has tool_calls but role {role!r}: only assistant messages carry tool calls")
        if not isinstance(tool_calls, list) or not all(isinstance(c, dict) for c in tool_calls):
            fail(f"{path}.tool_calls must be an array of tool call objects")
    if content is None:
        if not (role == "assistant" and tool_calls):
            fail(f"{path} ({role}) has no content")
    elif isinstance(content, str):
        if role in ("system", "user") and not content.strip():
            fail(f"{path}.content is an empty string")
    elif isinstance(content, list):
        if not content:
            fail(f"{path}.content is an empty array")
        for i, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                fail(f"{path}.content[{i}] must be a content part object with a string type")
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                fail(f"{path}.content[{i}] is a text part without a string text")
    else:
        fail(f"{path}.content is {json_type(content)}, expected a string or an array of parts")
    if role == "tool" and not isinstance(value.get("tool_call_id"), str):
        fail(f"{path} is a tool message without a string tool_call_id")
    return value


def checked_messages(value: object, path: str) -> list[dict[str, Any]]:
    """Check an OpenAI message list (:func:`checked_message` each); returned unchanged.

    Raises:
        BadRow: missing, not an array, empty, a bad message, or only system messages.
    """
    if value is None:
        fail(f"{path} is missing")
    if not isinstance(value, list):
        fail(f"{path} is {json_type(value)}, expected an array of messages")
    if not value:
        fail(f"{path} is empty: at least one message is needed")
    messages = [checked_message(m, f"{path}[{i}]") for i, m in enumerate(value)]
    if all(m["role"] == "system" for m in messages):
        fail(f"{path} holds only system messages: there is nothing to answer")
    return messages


def checked_tools(value: object, path: str) -> list[dict[str, Any]] | None:
    """Check an OpenAI ``tools`` list; ``null`` and ``[]`` mean no tools (``None``).

    Raises:
        BadRow: not an array, a tool that is not a ``function`` tool with a unique name, a
            mistyped description or parameters.
    """
    if value is None:
        return None
    if not isinstance(value, list):
        fail(f"{path} is {json_type(value)}, expected an array of tools")
    names: set[str] = set()
    for i, tool in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(tool, dict):
            fail(f"{where} is {json_type(tool)}, expected a tool object")
        if tool.get("type") != "function":
            fail(f"{where}.type is {shortened(tool.get('type'))}: only 'function' tools are supported")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            fail(f"{where}.function is {json_type(fn)}, expected an object with name and parameters")
        name = nonempty_text(fn.get("name"), f"{where}.function.name")
        if name in names:
            fail(f"{where}.function.name {name!r} is given twice")
        names.add(name)
        if "description" in fn and not isinstance(fn["description"], str):
            fail(f"{where}.function.description is {json_type(fn['description'])}, expected a string")
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            fail(f"{where}.function.parameters is {json_type(fn['parameters'])}, expected a JSON Schema")
    return value or None


def generation_params(src: Mapping[str, Any], prefix: str, *, strict: bool) -> GenerationParams:
    """Generation overrides from a chat row (``prefix=""``) or a batch body (``prefix="body."``).

    ``strict``: reject fields that are neither a message, tools nor a parameter (batch bodies).

    Raises:
        BadRow: an OpenAI parameter kafkagen cannot honour (at a non-default value), an unknown
            field when ``strict``, a mistyped or out-of-range value.
    """
    for key, default in _UNSUPPORTED_PARAMS.items():
        if src.get(key) is not None and src[key] != default:
            fail(f"{prefix}{key} = {shortened(src[key])} is not supported by kafkagen; remove it")
    if strict:
        known = _PARAM_FIELDS | _IGNORED_BODY_FIELDS | _UNSUPPORTED_PARAMS.keys()
        unknown = sorted(set(src) - known - {"messages", "tools", "max_completion_tokens"})
        if unknown:
            fail(f"unsupported request field(s) {', '.join(prefix + k for k in unknown)}; remove them")
    values = {k: src[k] for k in _PARAM_FIELDS if src.get(k) is not None}
    alias = src.get("max_completion_tokens")
    if alias is not None:
        if not isinstance(alias, int) or isinstance(alias, bool):
            fail(f"{prefix}max_completion_tokens is {shortened(alias)}, expected an integer")
        if "max_tokens" in values and values["max_tokens"] != alias:
            fail(f"{prefix}max_tokens and {prefix}max_completion_tokens disagree: give one of them")
        values["max_tokens"] = alias
    if isinstance(values.get("stop"), str):
        values["stop"] = [values["stop"]]
    try:
        params = msgspec.convert(values, GenerationParams)
    except msgspec.ValidationError as exc:
        fail(f"invalid generation parameter: {str(exc).replace('`$.', f'`{prefix}')}")
    _check_ranges(params, prefix)
    return params


def _check_ranges(p: GenerationParams, prefix: str) -> None:
    checks: list[tuple[str, object, bool, str]] = [
        ("max_tokens", p.max_tokens, p.max_tokens is not None and p.max_tokens < 1, "at least 1"),
        ("min_tokens", p.min_tokens, p.min_tokens is not None and p.min_tokens < 0, "at least 0"),
        ("temperature", p.temperature, p.temperature is not None and p.temperature < 0, "at least 0"),
        ("top_p", p.top_p, p.top_p is not None and not 0 < p.top_p <= 1, "in (0, 1]"),
        ("min_p", p.min_p, p.min_p is not None and not 0 <= p.min_p <= 1, "in [0, 1]"),
        (
            "frequency_penalty",
            p.frequency_penalty,
            p.frequency_penalty is not None and not -2 <= p.frequency_penalty <= 2,
            "in [-2, 2]",
        ),
        (
            "presence_penalty",
            p.presence_penalty,
            p.presence_penalty is not None and not -2 <= p.presence_penalty <= 2,
            "in [-2, 2]",
        ),
        (
            "top_logprobs",
            p.top_logprobs,
            p.top_logprobs is not None and not 0 <= p.top_logprobs <= 20,
            "in [0, 20]",
        ),
        (
            "repetition_penalty",
            p.repetition_penalty,
            p.repetition_penalty is not None and p.repetition_penalty <= 0,
            "above 0",
        ),
    ]
    for name, value, bad, expected in checks:
        if bad:
            fail(f"{prefix}{name} = {value!r} is out of range: must be {expected}")
    problem = output_constraint_problem(p.response_format, p.regex, p.ebnf)
    if problem is None and p.extra_body is not None:
        problem = extra_body_problem(p.extra_body)
    if problem is not None:
        fail(f"{problem} (in {prefix.rstrip('.')})" if prefix else problem)
