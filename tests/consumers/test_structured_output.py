"""Structured output end to end: a consumer against the simulator and real Kafka validates every
answer against the request's ``response_format``, flags the ones that break it, and with
``consumer.retry_invalid`` asks for them again with another seed (docs/structured-output.md)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import msgspec
import pytest
from jsonschema import validate

from simulator import SimulatedServer
from streams.config import Settings
from streams.records import GenerationParams
from tests.consumers.support import Fleet, completions, wait_all_done
from tests.helpers import make_prompt, publish

pytestmark = pytest.mark.kafka

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}, "why": {"type": "string"}},
    "required": ["answer", "why"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "sum", "schema": SCHEMA, "strict": True}}


async def test_answers_are_validated_and_broken_ones_asked_again_up_to_the_bound(
    cs: Settings, sim: SimulatedServer, tmp_path: Path
) -> None:
    settings = cs.model_copy(update={"consumer": cs.consumer.model_copy(update={"retry_invalid": 2})})
    fleet = Fleet(settings, tmp_path)
    thinking_off = {"enable_thinking": False}  # the whole budget for the answer
    params = GenerationParams(max_tokens=2000, response_format=FORMAT, chat_template_kwargs=thinking_off)
    good = [msgspec.structs.replace(make_prompt(i), params=params) for i in range(10)]
    broken = [msgspec.structs.replace(make_prompt(100 + i), params=params) for i in range(10)]
    try:
        await publish(settings, good)
        fleet.start("c0", sim.url)
        await wait_all_done(settings, {p.id for p in good}, timeout_s=60)
        async with httpx.AsyncClient() as client:
            answer = await client.post(f"{sim.url}/simulator/faults", json={"structured_violation_rate": 1.0})
            assert answer.status_code == 200
        await publish(settings, broken)
        await wait_all_done(settings, {p.id for p in broken}, timeout_s=60)
    finally:
        fleet.stop_all()

    by_id = {c.id: c for c in await completions(settings)}
    for prompt in good:
        record = by_id[prompt.id]
        assert record.params["response_format"] == FORMAT and record.invalid_retries == 0
        validate(json.loads(record.content), SCHEMA)
        assert not {"invalid_json", "schema_mismatch"} & set(record.quality), record.quality
    for prompt in broken:
        record = by_id[prompt.id]
        assert record.invalid_retries == 2, "asked twice more, then the last answer kept"
        assert {"invalid_json", "schema_mismatch"} & set(record.quality), (record.content, record.quality)
        assert record.params["seed"] is not None, "the retries asked with another seed"
    # each broken prompt was sent 3 times: the simulator saw 10 + 10 * 3 generation requests
    assert sim.stats().requests_finished >= len(good) + 3 * len(broken)
