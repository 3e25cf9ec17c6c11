"""``--format openai-batch``: the output and error files of OpenAI's Batch API, so a reader of
Batch API results reads a kafkagen run unchanged.

The line format is OpenAI's *request output object* (API reference, Batch, "The request output
object", https://platform.openai.com/docs/api-reference/batch/request-output; OpenAPI schema
``BatchRequestOutput``, "the per-line object of the batch output and error files"): ``id``,
``custom_id``, ``response`` (``status_code``, ``request_id``, ``body``; ``null`` for a failure)
and ``error`` (``code``, ``message``; ``null`` for a success). The ``body`` of a success is a
chat completion object (API reference, Chat, "The chat completion object",
https://platform.openai.com/docs/api-reference/chat/object).

Files (plain JSON Lines, uncompressed, as OpenAI serves them):

* ``batch-output-NNNNN.jsonl``: one line per completion, ``{"id": "batch_req_<h>", "custom_id":
  <record id>, "response": {"status_code": 200, "request_id": "req_<h>", "body": {"id":
  "chatcmpl-<h>", "object": "chat.completion", "created": <finished_at, epoch seconds, int>,
  "model", "choices": [{"index": 0, "message": {"role": "assistant", "content",
  "reasoning_content"?, "tool_calls"?}, "finish_reason", "logprobs": null}], "usage":
  {"prompt_tokens", "completion_tokens", "total_tokens", "completion_tokens_details":
  {"reasoning_tokens"}, "prompt_tokens_details"?: {"cached_tokens"}}}}, "error": null}``;
* ``batch-errors-NNNNN.jsonl``: one line per dead letter, ``{"id", "custom_id", "response": null,
  "error": {"code": <error_type>, "message": <message>}}``.

``custom_id`` is the record id: the producer's ``openai_batch`` input format takes a request's
``custom_id`` as the id (:mod:`streams.inputs.formats`), so a Batch API input file run through
kafkagen comes back with its own ``custom_id`` values. ``<h>`` is a BLAKE2b-96 hex digest of
(run id, record id, attempt): the same export gives the same ids. ``content`` is ``null`` when the
answer is empty and the model called tools, as OpenAI returns it (kafkagen stores ``""``);
``reasoning_content`` (SGLang's and DeepSeek's field; OpenAI has none) is there only when the
server returned reasoning, and ``tool_calls`` only when the model called tools. Token counts are
the served model's tokens; ``completion_tokens`` includes ``reasoning_tokens``. ``finish_reason``
is the server's, one of OpenAI's values (SGLang's ``abort`` is retried, then dead-lettered: never a
completion, :mod:`consumers.servers.answers`).
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
    """The chat completion object (``object: "chat.completion"``) of a completion (module docstring)."""
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
    """A completion's line of the output file (module docstring)."""
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
    """``batch-output-NNNNN.jsonl`` and ``batch-errors-NNNNN.jsonl`` (module docstring)."""

    name = "openai-batch"
    stems = ("batch-output", "batch-errors")
    suffix = ".jsonl"
    compress = False

    def completion_line(self, raw: bytes, record: CompletionRecord) -> bytes:
        return _encoder.encode(batch_output_line(record))

    def error_line(self, raw: bytes, record: ErrorRecord) -> bytes:
        return _encoder.encode(batch_error_line(record))
