"""The structured-output check of one answer (consumers/quality/structured.py)."""

from __future__ import annotations

import json
import random

import pytest
from jsonschema import validate

from consumers.quality.structured import structured_flags
from simulator.structured import answer_words, json_constraint

pytestmark = pytest.mark.pure

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name"],
}
SCHEMA_BODY = {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}}
OBJECT_BODY = {"response_format": {"type": "json_object"}}


@pytest.mark.parametrize(
    ("body", "content", "flags"),
    [
        (SCHEMA_BODY, '{"name": "a", "tags": ["x"]}', []),
        (SCHEMA_BODY, '{"name": "a", "tags": [', ["invalid_json"]),
        (SCHEMA_BODY, '{"tags": ["x"]}', ["schema_mismatch"]),
        (SCHEMA_BODY, '{"name": 5}', ["schema_mismatch"]),
        (SCHEMA_BODY, "", []),  # blank: empty_content says it
        (OBJECT_BODY, '{"a": 1}', []),
        (OBJECT_BODY, "[1, 2]", ["invalid_json"]),
        (OBJECT_BODY, "Sure! Here it is: {}", ["invalid_json"]),
        ({"regex": r"(yes|no)"}, "yes", []),
        ({"regex": r"(yes|no)"}, "yes, surely", ["pattern_mismatch"]),
        ({"ebnf": 'root ::= "a"'}, "anything", []),  # no EBNF validator: not judged
        ({"response_format": {"type": "text"}}, "free text", []),
        ({}, "{not json", []),
    ],
)
def test_an_answer_is_judged_against_what_its_request_asked(
    body: dict[str, object], content: str, flags: list[str]
) -> None:
    assert structured_flags(body, content) == flags


def test_the_simulator_honours_a_schema_and_breaks_it_when_told() -> None:
    schema, constrained = json_constraint(SCHEMA_BODY)
    assert constrained and schema == SCHEMA
    rng = random.Random(7)
    broken = 0
    for _ in range(50):
        text = " ".join(answer_words(SCHEMA, rng, violate=False))
        validate(json.loads(text), SCHEMA)
        assert structured_flags(SCHEMA_BODY, text) == []
        broken += bool(structured_flags(SCHEMA_BODY, " ".join(answer_words(SCHEMA, rng, violate=True))))
    assert broken == 50, "every violation is one the client's check catches"
    assert json_constraint(OBJECT_BODY) == ({"type": "object"}, True)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {**OBJECT_BODY, "regex": "a"},
            "Only one of json_schema, regex, ebnf, or structural_tag can be set.",
        ),
        ({"response_format": {"type": "yaml"}}, "Input should be 'text', 'json_object' or 'json_schema'"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, "name: Field required"),
    ],
)
def test_the_simulator_refuses_what_sglang_refuses(body: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        json_constraint(body)
