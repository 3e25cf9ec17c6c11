"""The chaos audit's input file: seeded chat prompts with poison lines among them.

:func:`write_inputs` writes ``prompts`` valid ``{"id", "messages"}`` rows (ids ``c-00000`` ...) in
a random order of a ``random.Random(seed)`` and inserts, at random places:

* ``invalid_json``: a truncated JSON object;
* ``not_utf8``: a row whose bytes are not UTF-8;
* ``too_large``: a valid row whose record is over ``max_message_bytes`` (the producer rejects it);
* ``duplicate_id``: a valid row reusing an id of an earlier row (the producer rejects the later one);
* ``over_context``: a valid row whose prompt is longer than the simulator's context length: it
  is published, and its consumer dead-letters it (HTTP 400).

The :class:`InputPlan` says what each line is, so the audit can check the outcome of every line.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

BadKind = Literal["invalid_json", "not_utf8", "too_large", "duplicate_id"]
"""Lines the producer must report bad (file and line) and never publish."""

_WORDS: Final = (
    *("alpha", "beta", "gamma", "delta", "kafka", "offset", "partition", "broker", "replica", "leader"),
    *("commit", "batch", "token", "prompt", "answer", "reason", "model", "server", "queue", "window"),
)
POISON_EACH: Final = 2
"""Lines of each poison kind (bad kinds and ``over_context``)."""


@dataclass
class InputPlan:
    """What the input file holds.

    Attributes:
        path: the file.
        valid: ids of the rows that must end in the dataset (completion or error), over-context
            ids included.
        over_context: ids whose prompt is longer than the context length: must end as errors.
        bad: 1-based line number -> what is wrong with it (:data:`BadKind`).
        lines: lines in the file.
    """

    path: Path
    valid: set[str] = field(default_factory=set)
    over_context: set[str] = field(default_factory=set)
    bad: dict[int, BadKind] = field(default_factory=dict)
    lines: int = 0


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _row(record_id: str, content: str) -> bytes:
    return json.dumps({"id": record_id, "messages": [{"role": "user", "content": content}]}).encode()


def write_inputs(
    path: Path, prompts: int, seed: int, *, max_message_bytes: int, context_tokens: int
) -> InputPlan:
    """Write the input file at ``path`` and describe it.

    Args:
        prompts: valid, ordinary rows (the poison rows come on top).
        seed: seeds the rows, the poison and their places.
        max_message_bytes: the Kafka record limit: a ``too_large`` row is 16 KiB over it.
        context_tokens: the simulator's context length: an ``over_context`` prompt has about
            ``4 * context_tokens + 4096`` characters (the simulator counts 4 characters a token);
            it must stay under ``max_message_bytes``.

    Raises:
        ValueError: an over-context prompt would not fit in a Kafka record, or ``prompts`` < 1.
    """
    if prompts < 1:
        raise ValueError(f"need at least 1 prompt, not {prompts}")
    over_chars = 4 * context_tokens + 4096
    if over_chars + 1024 > max_message_bytes:
        raise ValueError(
            f"an over-context prompt ({over_chars} characters) does not fit in a {max_message_bytes}-byte "
            "record: lower the simulator's context length or raise max_message_bytes"
        )
    rng = random.Random(seed)
    plan = InputPlan(path)
    rows: list[tuple[bytes, str | None, BadKind | None]] = []  # (line, valid id, bad kind)
    for i in range(prompts):
        record_id = f"c-{i:05d}"
        content = f"Question {i}: {_text(rng, rng.randint(5, 60))}?"
        rows.append((_row(record_id, content), record_id, None))
    for j in range(POISON_EACH):
        record_id = f"c-over-{j}"
        rows.append((_row(record_id, "x" * over_chars), record_id, None))
        plan.over_context.add(record_id)
    rng.shuffle(rows)
    poison: list[tuple[bytes, BadKind]] = []
    for j in range(POISON_EACH):
        poison.append(
            (b'{"id": "bad-json-%d", "messages": [{"role": "user", "content": "cut' % j, "invalid_json")
        )
        poison.append(
            (b'{"id": "bad-utf8-%d", "messages": [{"role": "user", "content": "\xff\xfe"}]}' % j, "not_utf8")
        )
        poison.append((_row(f"c-large-{j}", "y" * (max_message_bytes + 16384)), "too_large"))
    # Poison goes into the second half of the file, so it is published while faults run, and
    # a duplicate id always follows its first occurrence.
    for line, kind in poison:
        rows.insert(rng.randint(len(rows) // 2, len(rows)), (line, None, kind))
    for _ in range(POISON_EACH):
        at = rng.randint(len(rows) // 2, len(rows))
        earlier = [r[1] for r in rows[:at] if r[1] is not None and r[1] not in plan.over_context]
        rows.insert(
            at, (_row(rng.choice(earlier), "a different prompt with a reused id"), None, "duplicate_id")
        )
    with path.open("wb") as f:
        for number, (line, valid_id, bad_kind) in enumerate(rows, start=1):
            f.write(line + b"\n")
            if valid_id is not None:
                plan.valid.add(valid_id)
            if bad_kind is not None:
                plan.bad[number] = bad_kind
    plan.lines = len(rows)
    return plan
