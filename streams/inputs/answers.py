"""The last assistant turn of a conversation as a reference answer, not part of the prompt.

With the rule ``reference`` the prompt is every message before a final assistant answer, which
goes to ``metadata.extra`` (``reference``, and ``reference_tool_calls`` when it called tools);
``keep`` leaves the conversation as it is; ``auto`` (the default of ``--last-turn``) is
``reference`` for ``sharegpt`` rows only (``docs/inputs.md``, "The last assistant turn"). Pure
functions; a conversation with nothing left to prompt with raises
:class:`streams.inputs.fields.BadRow`.
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

from streams.inputs.fields import fail

__all__ = ["LAST_TURN_RULES", "LastTurn", "split_answer"]

LastTurn = Literal["auto", "reference", "keep"]
"""What becomes of a conversation's last assistant turn (``--last-turn``, ``docs/inputs.md``)."""
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
