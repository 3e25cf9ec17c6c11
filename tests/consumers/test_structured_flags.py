"""The structured-output check of one answer (consumers/quality/structured.py), and the bounded
re-asks of a broken one (consumers/process.py, fake server)."""

from __future__ import annotations

import asyncio
import json
import random
import types

import pytest
from jsonschema import validate

from consumers.positions.jobs import Job
from consumers.process import PromptRunner
from consumers.quality.structured import structured_flags
from consumers.servers.answers import ChatResult
from consumers.servers.requests import chat_request_body
from simulator.structured import answer_words, json_constraint
from streams.config import Settings
from streams.errors import RetriableServerError
from streams.records import GenerationParams, PromptMetadata, PromptRecord, Usage, encode

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


class _Runner:
    """A PromptRunner against a fake server: ``answers`` are returned, then every send is a 503."""

    def __init__(self, answers: int, retry_invalid: int, max_attempts: int = 3) -> None:
        self.settings = Settings(
            run_id="r", consumer={"retry_invalid": retry_invalid, "max_attempts": max_attempts}
        )
        self.answers, self.sends = answers, 0
        self.out: list[tuple[str, object]] = []

    async def run(self) -> list[tuple[str, object]]:
        runner = self

        class Client:
            def request_body(self, prompt: PromptRecord, rid: str) -> dict[str, object]:
                return chat_request_body(prompt, rid, runner.settings.generation, model="m")

            async def chat_choices(self, body: dict[str, object]) -> list[ChatResult]:
                runner.sends += 1
                if runner.sends > runner.answers:
                    raise RetriableServerError("overloaded", status=503)
                usage = Usage(prompt_tokens=1, completion_tokens=1)
                return [ChatResult("not json", None, None, "stop", usage, "m", 0.01)]

        class Emitter:
            async def completion(
                self,
                job: Job,
                p: PromptRecord,
                *a: object,
                invalid_retries: int = 0,
                server: str | None = None,
            ) -> None:
                runner.out.append(("completion", invalid_retries))

            async def failure(self, job: Job, p: PromptRecord, exc: Exception, sends: int) -> None:
                runner.out.append(("dead letter", sends))

        noop = types.SimpleNamespace
        server = noop(ok=asyncio.Event(), abandon=asyncio.Event(), server_url="s")
        server.record_success = server.record_failure = server.observe_output = lambda *a, **k: None
        server.ok.set()
        window = noop(observe_completion=lambda *a: None, observe_overload=lambda *a: None)
        prompt = PromptRecord(
            id="p",
            run_id="r",
            messages=[{"role": "user", "content": "json"}],
            params=GenerationParams(response_format={"type": "json_object"}),
            metadata=PromptMetadata(source="f", line=1),
        )
        record = noop(value=encode(prompt), partition=0, offset=0, key=b"p", topic="r.prompts")
        await PromptRunner(
            self.settings,
            prompts_topic="r.prompts",
            client=Client(),  # type: ignore[arg-type]
            server=server,  # type: ignore[arg-type]
            window=lambda: window,  # type: ignore[arg-type,return-value]
            emitter=Emitter(),  # type: ignore[arg-type]
            dead_letters=None,  # type: ignore[arg-type]
            backoff=noop(delay=lambda *a: 0),  # type: ignore[arg-type]
            rng=random.Random(0),
            metrics=noop(retries=noop(inc=lambda: None)),  # type: ignore[arg-type]
            stats=noop(invalid_retries=0, retries=0),  # type: ignore[arg-type]
            answered=lambda job: None,
        ).run(Job(record=record, fetched_at=0))
        return self.out


async def test_re_asks_never_use_up_the_sends_that_failures_are_allowed() -> None:
    # 4 invalid answers, then every re-ask fails: the last answer in hand is kept, not a dead letter
    runner = _Runner(answers=4, retry_invalid=4, max_attempts=3)
    assert await runner.run() == [("completion", 3)] and runner.sends == 4 + 3
    # no answer ever: a dead letter after max_attempts sends, as without re-asks
    runner = _Runner(answers=0, retry_invalid=4, max_attempts=3)
    assert await runner.run() == [("dead letter", 3)]
    # re-asks exhausted: the last (still invalid) answer, flagged, with the re-asks counted
    runner = _Runner(answers=10, retry_invalid=2)
    assert await runner.run() == [("completion", 2)] and runner.sends == 3
