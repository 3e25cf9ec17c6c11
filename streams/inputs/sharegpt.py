"""ShareGPT conversations as OpenAI chat messages and tools.

The format is the one hiyouga/LLaMA-Factory describes in its ``data/README.md``: a row
``{"conversations": [{"from", "value"}, ...], "system"?: str, "tools"?: str | list, "id"?: ...}``;
each turn becomes one OpenAI message, ``function_call`` and ``observation`` turns OpenAI
``tool_calls`` and ``tool`` messages (the mapping and the tool-call ids: ``docs/inputs.md``,
"ShareGPT"). Pure functions; a bad row raises :class:`streams.inputs.fields.BadRow` naming the
JSON path (``conversations[2].from``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from streams.inputs.fields import checked_message, checked_tools, fail, json_type, nonempty_text, shortened

__all__ = ["SHAREGPT_ROLES", "sharegpt_messages", "sharegpt_tools"]

SHAREGPT_ROLES: Final[Mapping[str, str]] = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "function_call": "assistant",
    "observation": "tool",
    "tool": "tool",
}
"""Every accepted ``from`` value → the OpenAI role its message gets."""


def _tool_calls(value: str, turn: int, path: str) -> list[dict[str, Any]]:
    """The OpenAI ``tool_calls`` of a ``function_call`` turn's value (JSON text)."""
    try:
        decoded = msgspec.json.decode(value)
    except msgspec.DecodeError as exc:
        fail(f"{path} is not JSON ({exc}): a function_call value is JSON {{name, arguments}}")
    calls: list[object] = decoded if isinstance(decoded, list) else [decoded]
    if not calls:
        fail(f"{path} is an empty array: a function_call needs at least one call")
    out: list[dict[str, Any]] = []
    for k, call in enumerate(calls):
        where = f"{path}[{k}]" if isinstance(decoded, list) else path
        if not isinstance(call, dict):
            fail(f"{where} is {json_type(call)}, expected a JSON object {{name, arguments}}")
        name = nonempty_text(call.get("name"), f"{where}.name")
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            text = arguments
        elif isinstance(arguments, dict):
            text = msgspec.json.encode(arguments).decode()
        else:
            fail(f"{where}.arguments is {json_type(arguments)}, expected an object or a string of JSON")
        out.append(
            {"id": f"call_{turn}_{k}", "type": "function", "function": {"name": name, "arguments": text}}
        )
    return out


def sharegpt_messages(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The OpenAI messages of a ShareGPT row (the mapping: ``docs/inputs.md``, "ShareGPT"), each checked
    as any chat message (:func:`streams.inputs.fields.checked_message`, with the turn's path).

    Raises:
        BadRow: ``conversations`` missing, not an array or empty; a turn that is not an object; an
            unknown ``from`` (the reason names it and the accepted ones); a ``value`` that is not a
            string; a ``function_call`` value that is not JSON ``{name, arguments}``; an
            ``observation`` with no call to answer; a ``system`` field that is not a string; an
            empty human or system ``value``; no human turn at all (e.g. only a gpt turn).
    """
    turns = row.get("conversations")
    if turns is None:
        fail("conversations is missing")
    if not isinstance(turns, list):
        fail(f"conversations is {json_type(turns)}, expected an array of turns")
    if not turns:
        fail("conversations is empty: at least one turn is needed")
    messages: list[dict[str, Any]] = []
    system = row.get("system")
    if system is not None and not isinstance(system, str):
        fail(f"system is {json_type(system)}, expected a string")
    if system and system.strip():
        messages.append({"role": "system", "content": system})
    pending: deque[str] = deque()  # ids of tool calls not answered yet, oldest first
    for i, turn in enumerate(turns):
        path = f"conversations[{i}]"
        if not isinstance(turn, dict):
            fail(f"{path} is {json_type(turn)}, expected a turn object with from and value")
        speaker = turn.get("from")
        role = SHAREGPT_ROLES.get(speaker) if isinstance(speaker, str) else None
        if role is None:
            what = "missing" if speaker is None else shortened(speaker)
            fail(f"{path}.from is {what}: unknown role; expected one of {', '.join(SHAREGPT_ROLES)}")
        value = turn.get("value")
        if not isinstance(value, str):
            fail(f"{path}.value is {json_type(value)}, expected a string")
        if speaker == "function_call":
            calls = _tool_calls(value, i, f"{path}.value")
            pending.extend(c["id"] for c in calls)
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
        elif role == "tool":
            if not pending:
                fail(
                    f"{path} ({speaker}) answers no function_call: no tool call before it is left unanswered"
                )
            message = {"role": "tool", "tool_call_id": pending.popleft(), "content": value}
        else:
            message = {"role": role, "content": value}
        messages.append(checked_message(message, path))
    if not any(m["role"] == "user" for m in messages):
        fail("conversations has no human turn: there is no prompt to answer")
    return messages


def sharegpt_tools(value: object) -> list[dict[str, Any]] | None:
    """OpenAI ``tools`` from a ShareGPT row's ``tools`` field (a JSON string or an array of
    function definitions or OpenAI tools); ``None`` when there are none.

    Raises:
        BadRow: a string that is not JSON, not an array, a definition that is not an object, and
            whatever :func:`streams.inputs.fields.checked_tools` refuses (a missing name, a name
            given twice, parameters that are not an object).
    """
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError as exc:
            fail(f"tools is a string but not JSON ({exc}): expected a JSON array of function definitions")
    if value is None:
        return None
    if not isinstance(value, list):
        fail(f"tools is {json_type(value)}, expected an array of function definitions")
    tools: list[dict[str, Any]] = []
    for i, fn in enumerate(value):
        if not isinstance(fn, dict):
            fail(f"tools[{i}] is {json_type(fn)}, expected a function definition object")
        tools.append(fn if fn.get("type") == "function" else {"type": "function", "function": fn})
    return checked_tools(tools, "tools")
