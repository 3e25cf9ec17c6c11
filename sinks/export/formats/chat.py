"""``--output-format chat``: training-ready conversations, ``chat-NNNNN.jsonl.zst`` (zstd JSON Lines).

One row per completion (dead letters have none): ``{"id", "messages": [<the prompt's messages>...,
{"role": "assistant", "content": str, "reasoning_content"?: str, "tool_calls"?: [...]}],
"tools"?: [...]}`` (OpenAI chat format). ``--reasoning`` is ``field`` (default:
``reasoning_content``), ``inline`` (``"<think>\\n" + reasoning + "\\n</think>\\n\\n" + answer``, as
Qwen3's chat template renders an assistant turn) or ``drop``. The rules: docs/export.md, "chat".
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

from sinks.export.formats.base import LineOutput, ReasoningMode
from streams.records import CompletionRecord, ErrorRecord

__all__ = ["SHARD_NAME", "THINK_CLOSE", "THINK_OPEN", "ChatOutput", "chat_row"]

SHARD_NAME: Final = re.compile(r"^chat-\d{5}\.jsonl\.zst$")
THINK_OPEN: Final = "<think>"
THINK_CLOSE: Final = "</think>"

_encoder: Final = msgspec.json.Encoder()


def chat_row(record: CompletionRecord, reasoning: ReasoningMode = "field") -> dict[str, Any]:
    """The conversation of a completion: its prompt's messages, then the answer (docs/export.md, "chat")."""
    answer: dict[str, Any] = {"role": "assistant", "content": record.content}
    thought = record.reasoning_content
    if thought is not None and reasoning == "field":
        answer["reasoning_content"] = thought
    elif thought is not None and reasoning == "inline":
        answer["content"] = (
            f"{THINK_OPEN}\n{thought.strip(chr(10))}\n{THINK_CLOSE}\n\n" + record.content.lstrip("\n")
        )
    if record.tool_calls:
        answer["tool_calls"] = record.tool_calls
    row: dict[str, Any] = {"id": record.id, "messages": [*record.prompt.messages, answer]}
    if record.prompt.tools:
        row["tools"] = record.prompt.tools
    return row


class ChatOutput(LineOutput):
    """``chat-NNNNN.jsonl.zst`` (docs/export.md, "chat")."""

    name = "chat"
    stems = ("chat", "chat-errors")  # no error has a row: the second never gets a line

    def completion_line(self, raw: bytes, record: CompletionRecord) -> bytes:
        return _encoder.encode(chat_row(record, self.options.reasoning))

    def error_line(self, raw: bytes, record: ErrorRecord) -> None:
        return None
