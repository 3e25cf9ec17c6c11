"""``python -m producers.sample``: draw the bundled demo prompt file from the public prompt sets.

Writes chat-format JSON Lines (``{"id", "messages", "tools"?, "source", "reference"?}``) drawn
deterministically (evenly spaced rows) from ``data/gsm8k/test.jsonl``, ``data/mt_bench/question.jsonl``
and the two BFCL files, converted with :mod:`streams.inputs.formats` (so BFCL tools are already JSON
Schema). ``source`` names the upstream file and line; ``reference`` is GSM8K's answer or MT-Bench's
reference when there is one. The licenses and attribution are in ``data/README.md``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

from streams.inputs import FormatName, MappingOptions, normalise

__all__ = ["DATA", "DEMO_FILE", "draw"]

DATA: Path = Path(__file__).resolve().parents[1] / "data"
DEMO_FILE: Path = DATA / "prompts" / "demo.jsonl"
"""The prompt file the main job publishes by default."""


def _rows(path: Path) -> list[tuple[int, dict[str, object]]]:
    with path.open("rb") as f:
        return [(n, json.loads(line)) for n, line in enumerate(f, start=1) if line.strip()]


def _spaced(rows: list[tuple[int, dict[str, object]]], count: int) -> list[tuple[int, dict[str, object]]]:
    if count <= 0:
        return []
    step = max(1, len(rows) // count)
    return rows[::step][:count]


def draw(gsm8k: int, mt_bench: int, bfcl: int) -> Iterator[dict[str, object]]:
    """Yield demo rows: ``gsm8k`` GSM8K questions, ``mt_bench`` MT-Bench first turns and ``bfcl``
    tool-calling prompts (half from simple_python, half from multiple)."""
    sets: list[tuple[str, MappingOptions, int, str]] = [
        (
            "gsm8k/test.jsonl",
            MappingOptions(prompt_field="question", keep_fields=("answer",)),
            gsm8k,
            "gsm8k",
        ),
        ("mt_bench/question.jsonl", MappingOptions(format=FormatName.MT_BENCH), mt_bench, "mt_bench"),
        ("bfcl/BFCL_v4_simple_python.json", MappingOptions(format=FormatName.BFCL), bfcl - bfcl // 2, "bfcl"),
        ("bfcl/BFCL_v4_multiple.json", MappingOptions(format=FormatName.BFCL), bfcl // 2, "bfcl"),
    ]
    for rel, options, count, prefix in sets:
        path = DATA / rel
        for line, row in _spaced(_rows(path), count):
            record = normalise(row, source=rel, line=line, options=options)
            # Rows without an id of their own (GSM8K) are named by their upstream line number.
            rid = f"{prefix}-{line}" if ":" in record.id else f"{prefix}-{record.id}"
            out: dict[str, object] = {"id": rid, "messages": record.messages}
            if record.tools:
                out["tools"] = record.tools
            out["source"] = f"data/{rel}:{line}"
            extra = record.metadata.extra
            reference = extra.get("answer") or extra.get("reference")
            if reference:
                out["reference"] = reference
            yield out


if __name__ == "__main__":  # ``python -m producers.sample``: the command line, :mod:`producers.sample_cli`
    from producers.sample_cli import main

    sys.exit(main())
