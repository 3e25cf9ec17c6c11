"""Records for the export format tests: completions with reasoning, with tool calls and with
quality flags, a regenerated attempt, and dead letters (with and without their prompt)."""

from __future__ import annotations

from typing import Any

import msgspec

from streams.records import (
    CompletionRecord,
    ErrorRecord,
    GenerationParams,
    PromptMetadata,
    PromptRecord,
    SourceOffset,
    Timings,
    Usage,
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
TOOL_CALLS: list[dict[str, Any]] = [
    {
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
]


def prompt(i: int, run_id: str, *, tools: bool = False, attempt: int = 0) -> PromptRecord:
    return PromptRecord(
        id=f"id-{i:06d}",
        messages=[
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": f"What is {i} + {i}?"}] if tools else f"{i}+{i}?",
            },
        ],
        tools=TOOLS if tools else None,
        params=GenerationParams(max_tokens=256),
        metadata=PromptMetadata(source="in.jsonl", line=i + 1, tags=["t"], extra={"answer": 2 * i}),
        run_id=run_id,
        attempt=attempt,
    )


def completion(
    i: int,
    run_id: str,
    *,
    reasoning: str | None = "Add them.\n",
    tools: bool = False,
    quality: list[str] | None = None,
    attempt: int = 0,
    finish_reason: str = "stop",
    cached_tokens: int | None = None,
) -> CompletionRecord:
    return CompletionRecord(
        id=f"id-{i:06d}",
        run_id=run_id,
        attempt=attempt,
        prompt=prompt(i, run_id, tools=tools, attempt=attempt),
        content="" if tools else f"\n{2 * i}",
        reasoning_content=reasoning,
        tool_calls=TOOL_CALLS if tools else None,
        finish_reason="tool_calls" if tools else finish_reason,
        usage=Usage(
            prompt_tokens=30, completion_tokens=12 + i, reasoning_tokens=5, cached_tokens=cached_tokens
        ),
        timings=Timings(queued_s=0.25, latency_s=1.5, started_at=1.7e9 + i, finished_at=1.7e9 + i + 1.5),
        server="http://127.0.0.1:30000",
        model="test-model",
        params={"max_tokens": 256, "temperature": 0.6},
        quality=quality or [],
        source=SourceOffset(topic="r.prompts", partition=0, offset=i),
        consumer="consumer-0",
    )


def dead_letter(i: int, run_id: str, *, with_prompt: bool = True, attempt: int = 0) -> ErrorRecord:
    return ErrorRecord(
        id=f"id-{i:06d}",
        run_id=run_id,
        attempt=attempt,
        prompt=prompt(i, run_id, attempt=attempt) if with_prompt else None,
        stage="generate",
        error_type="FatalRequestError",
        message="400 Bad Request: the prompt is too long",
        status=400,
        attempts=1,
        server="http://127.0.0.1:30000",
        source=SourceOffset(topic="r.prompts", partition=1, offset=i),
        at=1.7e9 + 9,
    )


def regenerated(record: CompletionRecord) -> CompletionRecord:
    """``record`` generated again as attempt + 1 (``kafkagen regenerate``): a longer answer, no flags."""
    attempt = record.attempt + 1
    return msgspec.structs.replace(
        record,
        attempt=attempt,
        prompt=msgspec.structs.replace(record.prompt, attempt=attempt),
        content=record.content + " (regenerated)",
        quality=[],
        finish_reason="stop",
    )
