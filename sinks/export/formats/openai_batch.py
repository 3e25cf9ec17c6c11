"""``--output-format openai_batch``: the output and error files of OpenAI's Batch API, so a reader of
Batch API results reads a kafkagen run unchanged.

``batch-output-NNNNN.jsonl`` holds one request output object per completion (its ``body`` a chat
completion object), ``batch-errors-NNNNN.jsonl`` one per dead letter; plain JSON Lines. The line
format, its upstream sources (OpenAI API reference: Batch, "The request output object"; Chat, "The
chat completion object") and the field rules: docs/export.md, "openai_batch".
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

import msgspec

from sinks.export.formats.base import LineOutput
from streams.records import CompletionRecord, ErrorRecord

__all__ = ["SHARD_NAME", "OpenAIBatchOutput", "batch_error_line", "batch_output_line", "chat_completion"]

SHARD_NAME: Final = re.compile(r"^batch-(output|errors)-\d{5}\.jsonl$")

_encoder: Final = msgspec.json.Encoder()


def _digest(run_id: str | None, record_id: str, attempt: int) -> str:
    data = f"{run_id or ''}\0{record_id}\0{attempt}".encode()
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def chat_completion(record: CompletionRecord) -> dict[str, Any]:
    """The chat completion object (``object: "chat.completion"``) of a completion (docs/export.md)."""
    h = _digest(record.run_id, record.id, record.attempt)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if record.tool_calls and not record.content else record.content,
    }
    if record.reasoning_content is not None:
        message["reasoning_content"] = record.reasoning_content
    if record.tool_calls:
        message["tool_calls"] = record.tool_calls
    u = record.usage
    usage: dict[str, Any] = {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
    }
    if u.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": u.cached_tokens}
    return {
        "id": f"chatcmpl-{h}",
        "object": "chat.completion",
        "created": int(record.timings.finished_at),
        "model": record.model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": record.finish_reason, "logprobs": None}
        ],
        "usage": usage,
    }


def batch_output_line(record: CompletionRecord) -> dict[str, Any]:
    """A completion's line of the output file (docs/export.md, "openai_batch")."""
    h = _digest(record.run_id, record.id, record.attempt)
    return {
        "id": f"batch_req_{h}",
        "custom_id": record.id,
        "response": {"status_code": 200, "request_id": f"req_{h}", "body": chat_completion(record)},
        "error": None,
    }


def batch_error_line(record: ErrorRecord) -> dict[str, Any]:
    """A dead letter's line of the error file: ``error.code`` is its ``error_type`` (e.g.
    ``FatalRequestError``), ``error.message`` its ``message``."""
    return {
        "id": f"batch_req_{_digest(record.run_id, record.id, record.attempt)}",
        "custom_id": record.id,
        "response": None,
        "error": {"code": record.error_type, "message": record.message},
    }


class OpenAIBatchOutput(LineOutput):
    """``batch-output-NNNNN.jsonl`` and ``batch-errors-NNNNN.jsonl`` (docs/export.md, "openai_batch")."""

    name = "openai_batch"
    stems = ("batch-output", "batch-errors")
    suffix = ".jsonl"
    compress = False

    def completion_line(self, raw: bytes, record: CompletionRecord) -> bytes:
        return _encoder.encode(batch_output_line(record))

    def error_line(self, raw: bytes, record: ErrorRecord) -> bytes:
        return _encoder.encode(batch_error_line(record))
