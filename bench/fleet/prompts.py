"""The fleet benchmark's prompts: the bundled GSM8K test questions, cycled, with the default
generation parameters (thinking on, ``max_tokens`` 4096)."""

from __future__ import annotations

import json

from bench.children import REPO_ROOT
from streams.records import GenerationParams, PromptMetadata, PromptRecord

__all__ = ["GSM8K", "make_prompts"]

GSM8K = REPO_ROOT / "data" / "gsm8k" / "test.jsonl"
"""The bundled GSM8K test set, one JSON object with a ``question`` a line."""


def make_prompts(n: int) -> list[PromptRecord]:
    """``n`` chat prompts: the GSM8K test questions, cycled, ids ``bench-00000``…"""
    questions = [json.loads(line)["question"] for line in GSM8K.read_text().splitlines() if line.strip()]
    return [
        PromptRecord(
            id=f"bench-{i:05d}",
            messages=[{"role": "user", "content": questions[i % len(questions)]}],
            params=GenerationParams(),
            metadata=PromptMetadata(source="gsm8k/test.jsonl", line=i % len(questions) + 1),
        )
        for i in range(n)
    ]
