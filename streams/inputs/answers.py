"""The last assistant turn of a conversation as a reference answer, not part of the prompt.

A conversation that ends with the assistant's answer (ShareGPT rows always do; chat rows of a
dataset often do) is a prompt plus an old answer. With the rule ``reference`` the prompt is every
message before that answer, and the answer goes to ``metadata.extra``: ``reference`` (its text
content, ``None`` when it only called tools) and, when it called tools, ``reference_tool_calls``
(its OpenAI ``tool_calls``). With ``keep`` the conversation is the prompt as it is. ``auto`` (the
default of ``--last-turn``) is ``reference`` for ``sharegpt`` rows and ``keep`` for every other
format, so chat rows stay as they were unless ``--last-turn reference`` is given.

Pure functions; a conversation with nothing left to prompt with raises
:class:`streams.inputs.fields.BadRow`.
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

from streams.inputs.fields import fail

__all__ = ["LAST_TURN_RULES", "LastTurn", "split_answer"]

LastTurn = Literal["auto", "reference", "keep"]
"""What becomes of a conversation's last assistant turn (``--last-turn``, the module docstring)."""
LAST_TURN_RULES: Final[tuple[str, ...]] = get_args(LastTurn)


def split_answer(messages: list[dict[str, Any]], path: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(prompt, extra)``: when ``messages`` (checked OpenAI messages) end with an assistant
    message, the messages before it and ``{"reference": content, "reference_tool_calls"?: [...]}``;
    otherwise ``messages`` unchanged and ``{}``.

    Raises:
        BadRow: nothing but system messages precede the answer (e.g. a conversation that is only
            an assistant turn); the reason names ``path``.
    """
    if not messages or messages[-1]["role"] != "assistant":
        return messages, {}
    *prompt, answer = messages
    if all(m["role"] == "system" for m in prompt):
        fail(
            f"{path} is only an assistant turn (after any system prompt): without it as the reference "
            "answer there is no prompt left"
        )
    extra: dict[str, Any] = {"reference": answer.get("content")}
    if answer.get("tool_calls"):
        extra["reference_tool_calls"] = answer["tool_calls"]
    return prompt, extra
