"""Structured output checks: does an answer honour the request's ``response_format`` or ``regex``?

SGLang constrains decoding to the schema, yet an answer can still break it: cut off by
``max_tokens`` (``finish_reason`` ``length``), from a server without a grammar backend, or from a
server that ignores the field. Every answer is checked here (docs/structured-output.md); an
``ebnf`` grammar is not (no validator in Python), nor is a blank answer (``empty_content`` says it).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Final

from streams.quality import QualityFlag

__all__ = ["INVALID_JSON", "PATTERN_MISMATCH", "SCHEMA_MISMATCH", "structured_flags"]

INVALID_JSON: Final = QualityFlag.INVALID_JSON.value
"""JSON asked for (``json_object``, ``json_schema``); the answer is not JSON (or, for
``json_object``, not a JSON object)."""
SCHEMA_MISMATCH: Final = QualityFlag.SCHEMA_MISMATCH.value
"""The answer is JSON that the ``json_schema`` refuses."""
PATTERN_MISMATCH: Final = QualityFlag.PATTERN_MISMATCH.value
"""The answer does not match the request's ``regex`` (whole answer)."""


def _not_json(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity``: Python's json module reads them, JSON has none."""
    raise ValueError(f"{name} is not JSON")


@functools.lru_cache(maxsize=64)
def _validator(schema_text: str) -> Any:
    from jsonschema import validators  # here: the commands that never validate do not load it

    schema = json.loads(schema_text)
    return validators.validator_for(schema)(schema)


@functools.lru_cache(maxsize=64)
def _pattern(regex: str) -> re.Pattern[str] | None:
    try:
        return re.compile(regex)
    except re.error:  # refused before it was sent (streams.records.output_constraint_problem)
        return None


def structured_flags(body: dict[str, Any], content: str) -> list[str]:
    """The structured-output flags of answer ``content`` to the request ``body``: at most one of
    :data:`INVALID_JSON`, :data:`SCHEMA_MISMATCH`, :data:`PATTERN_MISMATCH`; empty when the body
    asked for none, or the answer is blank. Validators are compiled once per schema."""
    if not content.strip():
        return []
    response_format = body.get("response_format")
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind in ("json_object", "json_schema"):
        try:
            value = json.loads(content, parse_constant=_not_json)
        except ValueError:
            return [INVALID_JSON]
        if kind == "json_object":
            return [] if isinstance(value, dict) else [INVALID_JSON]
        assert isinstance(response_format, dict)
        schema = (response_format.get("json_schema") or {}).get("schema")
        if schema is None:
            return []
        try:
            valid = _validator(json.dumps(schema, sort_keys=True)).is_valid(value)
        except Exception:  # a schema the pre-send check let through but cannot evaluate: not judged
            return []
        return [] if valid else [SCHEMA_MISMATCH]
    regex = body.get("regex")
    if isinstance(regex, str):
        pattern = _pattern(regex)
        if pattern is not None and pattern.fullmatch(content) is None:
            return [PATTERN_MISMATCH]
    return []
