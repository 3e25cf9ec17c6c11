"""Structured output in the simulator: the answer to a request with ``response_format``
``json_object`` / ``json_schema``, as SGLang's grammar-constrained decoding would give it, or
(the ``structured_violation_rate`` fault) one that breaks it, so the client's validation runs.

SGLang 0.5.23 (paths under ``python/sglang/srt/``): ``entrypoints/openai/protocol.py``
``ResponseFormat`` (type ``text``, ``json_object``, ``json_schema``; ``json_schema.name`` is
required) and ``to_sampling_params`` (``json_object`` is the schema ``{"type": "object"}``);
``sampling/sampling_params.py`` ``verify`` refuses more than one of json_schema, regex, ebnf.
A ``regex`` or ``ebnf`` request is accepted and answered with plain words: the simulator does
not generate from grammars, so such answers break them (never kinder than a real server).
"""

from __future__ import annotations

import json
import random
from typing import Any

__all__ = ["ONE_CONSTRAINT", "answer_words", "json_constraint"]

ONE_CONSTRAINT = "Only one of json_schema, regex, ebnf, or structural_tag can be set."
"""SGLang's message (``sampling_params.py``) for a request with several output constraints."""


def json_constraint(body: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """``(schema, constrained)`` of a request body: the JSON Schema its answer must follow
    (``{"type": "object"}`` for ``json_object``) and whether any output constraint was asked for.

    Raises:
        ValueError: SGLang's 400 message for a malformed ``response_format`` or several constraints.
    """
    response_format = body.get("response_format")
    schema: dict[str, Any] | None = None
    if response_format is not None:
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind not in ("text", "json_object", "json_schema"):
            raise ValueError("response_format.type: Input should be 'text', 'json_object' or 'json_schema'")
        if kind == "json_object":
            schema = {"type": "object"}
        elif kind == "json_schema":
            spec = response_format.get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                raise ValueError("response_format.json_schema.name: Field required")
            found = spec.get("schema")
            schema = found if isinstance(found, dict) else {}
    others = [k for k in ("regex", "ebnf") if body.get(k)]
    if len(others) + (schema is not None) > 1:
        raise ValueError(ONE_CONSTRAINT)
    return schema, schema is not None or bool(others)


def _instance(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value that ``schema`` accepts (the common keywords: type, properties, required, items,
    enum, const, anyOf/oneOf, minItems, minimum/maximum)."""
    if not isinstance(schema, dict):
        return {}
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _instance(schema[key][0], rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        found = schema.get("properties")
        properties: dict[str, Any] = found if isinstance(found, dict) else {}
        required = set(schema.get("required") or ())
        return {
            name: _instance(sub, rng, depth + 1)
            for name, sub in properties.items()
            if name in required or (depth < 3 and rng.random() < 0.5)
        }
    if kind == "array":
        count = max(int(schema.get("minItems", 0)), rng.randint(1, 3) if depth < 3 else 0)
        return [_instance(schema.get("items", {}), rng, depth + 1) for _ in range(count)]
    if kind == "string":
        return rng.choice(["alpha", "beta", "gamma", "delta"])
    if kind == "integer":
        lowest = int(schema.get("minimum", 0))
        return rng.randint(lowest, max(lowest, int(schema.get("maximum", lowest + 100))))
    if kind == "number":
        least = float(schema.get("minimum", 0.0))
        return round(rng.uniform(least, float(schema.get("maximum", least + 100.0))), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return {}


def _broken(schema: dict[str, Any], value: Any, text: str, rng: random.Random) -> str:
    """``text`` made wrong: cut short (not JSON), or, for an object schema with properties, a
    value the schema refuses (a required property left out, or a property of the wrong type)."""
    properties = schema.get("properties")
    if isinstance(value, dict) and isinstance(properties, dict) and properties and rng.random() < 0.5:
        required = [n for n in schema.get("required") or () if n in value]
        wrong = dict(value)
        if required:
            del wrong[rng.choice(required)]
        else:
            name = next(iter(properties))
            wrong[name] = 12345 if (properties[name] or {}).get("type") == "string" else "not-this-type"
        return json.dumps(wrong)
    if schema.get("type") == "object" and not properties and rng.random() < 0.5:
        return json.dumps([value])  # JSON, but not the object json_object asks for
    return text[: max(1, len(text) - 2)]


def answer_words(schema: dict[str, Any], rng: random.Random, *, violate: bool) -> list[str]:
    """The answer to a JSON-constrained request as tokens (whitespace-separated words: joined by
    one space they give the JSON text back): an instance of ``schema``, broken when ``violate``."""
    value = _instance(schema, rng)
    text = json.dumps(value)
    if violate:
        text = _broken(schema, value, text, rng)
    return text.replace("\n", " ").split(" ") if text else ["{}"]
