"""The Berkeley Function-Calling Leaderboard's function definitions as OpenAI tools.

A BFCL row's ``function`` list becomes OpenAI ``tools``: BFCL types mapped to JSON Schema in each
``parameters`` schema, function names made valid OpenAI names (``^[a-zA-Z0-9_-]{1,64}$``), the
renamed ones returned for ``metadata.extra["bfcl_function_names"]`` (the rules: ``docs/inputs.md``,
"BFCL"). Pure functions; a bad definition raises :class:`streams.inputs.fields.BadRow` naming its
JSON path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from streams.inputs.fields import fail, json_type, nonempty_text, shortened

__all__ = ["bfcl_tools"]

_OPENAI_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NOT_NAME_CHAR: Final = re.compile(r"[^a-zA-Z0-9_-]")

# BFCL parameter types → JSON Schema types; "any" → no type at all.
_BFCL_TYPES: Final[Mapping[str, str]] = {"dict": "object", "float": "number", "tuple": "array"}
_SCHEMA_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})


def _bfcl_type(value: object, path: str) -> str | list[str] | None:
    given: list[object] = value if isinstance(value, list) else [value]
    names = [n for n in given if isinstance(n, str)]
    if not names or len(names) != len(given):
        fail(f"{path}.type is {shortened(value)}: expected a type name or an array of them")
    if "any" in names:
        return None
    mapped = [_BFCL_TYPES.get(n, n) for n in names]
    for original, new in zip(names, mapped, strict=True):
        if new not in _SCHEMA_TYPES:
            fail(f"{path}.type {original!r} is not a JSON Schema or BFCL type")
    return mapped if isinstance(value, list) else mapped[0]


def _bfcl_schema(node: object, path: str) -> dict[str, Any]:
    """A copy of a BFCL parameter schema with BFCL types mapped to JSON Schema, recursively."""
    if not isinstance(node, dict):
        fail(f"{path} is {json_type(node)}, expected a JSON Schema object")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type":
            mapped = _bfcl_type(value, path)
            if mapped is not None:
                out["type"] = mapped
        elif key == "properties":
            if not isinstance(value, dict):
                fail(f"{path}.properties is {json_type(value)}, expected an object")
            out[key] = {n: _bfcl_schema(s, f"{path}.properties.{n}") for n, s in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _bfcl_schema(value, f"{path}.{key}")
        elif key in ("items", "prefixItems", "anyOf", "oneOf", "allOf") and isinstance(value, list):
            out[key] = [_bfcl_schema(s, f"{path}.{key}[{i}]") for i, s in enumerate(value)]
        else:
            out[key] = value
    return out


def bfcl_tools(value: object) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """OpenAI tools from a BFCL ``function`` list, and ``{openai name: original}`` of renamed ones.

    Raises:
        BadRow: not a non-empty array of definitions, a name that cannot be made an OpenAI name
            or that collides once made one, a mistyped description, a bad parameter schema.
    """
    if not isinstance(value, list) or not value:
        fail(f"function is {json_type(value)}, expected a non-empty array of function definitions")
    tools: list[dict[str, Any]] = []
    renamed: dict[str, str] = {}
    seen: set[str] = set()
    for i, fn in enumerate(value):
        path = f"function[{i}]"
        if not isinstance(fn, dict):
            fail(f"{path} is {json_type(fn)}, expected a function definition object")
        original = nonempty_text(fn.get("name"), f"{path}.name")
        name = _NOT_NAME_CHAR.sub("_", original)
        if not _OPENAI_NAME.fullmatch(name):
            fail(f"{path}.name {original!r} cannot be made a valid OpenAI function name (1-64 chars)")
        if name in seen:
            fail(f"{path}.name {original!r} becomes {name!r}, which another function already uses")
        seen.add(name)
        if name != original:
            renamed[name] = original
        description = fn.get("description", "")
        if not isinstance(description, str):
            fail(f"{path}.description is {json_type(description)}, expected a string")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        schema = _bfcl_schema(params, f"{path}.parameters")
        function = {"name": name, "description": description, "parameters": schema}
        tools.append({"type": "function", "function": function})
    return tools, renamed
