"""A run's record: joining a run by its id (pure), and writing/reading it on real Kafka."""

from __future__ import annotations

import asyncio
import os

import msgspec
import pytest

from streams.config import GateSettings, GenerationSettings, Settings, load_settings
from streams.control import RunRecord
from streams.errors import ConfigError
from streams.runs import naming
from streams.runs.record import (
    gate_in_environment,
    generation_in_environment,
    join_settings,
    publish_run_record,
    read_run_record,
    run_gate,
    run_generation,
)

RUN_GENERATION = {
    "model": "qwen3-8b",
    "max_tokens": 2048,
    "temperature": 0.3,
    "top_p": 0.8,
    "chat_template_kwargs": {"enable_thinking": False},
    "separate_reasoning": True,
    "response_format": None,
    "regex": None,
    "ebnf": None,
}

RUN_GATE = GateSettings(enabled=False, warmup=50, max_truncated=0.9).model_dump(mode="json")


def _record(parent: str | None = None, run_id: str = "r") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        parent=parent,
        created_at=1.0,
        updated_at=1.0,
        by="kafkagen run@h",
        prompts_topic=naming.prompts_topic(run_id, parent),
        partitions=7,
        generation=RUN_GENERATION,
        gate=RUN_GATE,
        servers=["http://127.0.0.1:30000"],
    )


@pytest.fixture(autouse=True)
def _no_generation_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith(
            ("KAFKAGEN_GENERATION", "KAFKAGEN_GATE", "KAFKAGEN_REPLAY_OF", "KAFKAGEN_RUN_ID")
        ):
            monkeypatch.delenv(name)


def test_a_consumer_given_only_the_run_id_takes_the_runs_generation_settings() -> None:
    joined = join_settings(load_settings(Settings, overrides={"run_id": "r"}), _record())
    # a record written before a setting existed joins with that setting's default
    assert joined.generation.model_dump(mode="json") == GenerationSettings(**RUN_GENERATION).model_dump(
        mode="json"
    )
    assert set(GenerationSettings.model_fields) > set(RUN_GENERATION)
    assert joined.replay_of is None and joined.topics.prompts == "r.prompts"


def test_flags_and_environment_win_over_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = load_settings(Settings, overrides={"run_id": "r", "generation": {"temperature": 0.0}})
    joined = join_settings(flags, _record(), given=["temperature"])
    assert joined.generation.temperature == 0.0
    assert joined.generation.max_tokens == 2048 and joined.generation.model == "qwen3-8b"
    monkeypatch.setenv("KAFKAGEN_GENERATION__MAX_TOKENS", "777")
    joined = join_settings(load_settings(Settings, overrides={"run_id": "r"}), _record())
    assert joined.generation.max_tokens == 777 and joined.generation.top_p == 0.8
    assert generation_in_environment({"kafkagen_generation__top_p": "1"}) == {"top_p"}
    assert generation_in_environment({"KAFKAGEN_GENERATION": "{}"}) == set(GenerationSettings.model_fields)


def test_a_consumer_given_only_the_run_id_judges_with_the_runs_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25 item 6: the gate's settings are the run's. On its own defaults a joining consumer
    would switch the run's disabled gate back on, or halt the fleet on thresholds the run never set."""
    joined = join_settings(load_settings(Settings, overrides={"run_id": "r"}), _record())
    assert joined.gate.model_dump(mode="json") == RUN_GATE and not joined.gate.enabled
    flags = load_settings(Settings, overrides={"run_id": "r", "gate": {"enabled": True}})
    joined = join_settings(flags, _record(), given_gate=["enabled"])
    assert joined.gate.enabled and joined.gate.warmup == 50 and joined.gate.max_truncated == 0.9, (
        "the flag wins"
    )
    monkeypatch.setenv("KAFKAGEN_GATE__WARMUP", "7")
    joined = join_settings(load_settings(Settings, overrides={"run_id": "r"}), _record())
    assert joined.gate.warmup == 7 and not joined.gate.enabled, "the environment wins"
    assert gate_in_environment({"kafkagen_gate__window": "9"}) == {"window"}
    assert gate_in_environment({"KAFKAGEN_GATE": "{}"}) == set(RUN_GATE)


def test_a_record_without_gate_settings_leaves_the_consumers() -> None:
    """A record written before records held gate settings: the consumer keeps its own."""
    own = load_settings(Settings, overrides={"run_id": "r", "gate": {"warmup": 33}})
    joined = join_settings(own, msgspec.structs.replace(_record(), gate={}))
    assert joined.gate == own.gate
    with pytest.raises(ConfigError, match="gate settings that do not fit"):
        join_settings(own, msgspec.structs.replace(_record(), gate={**RUN_GATE, "warmup": 0}))


def test_a_replays_consumer_reads_the_parents_prompts() -> None:
    joined = join_settings(
        load_settings(Settings, overrides={"run_id": "b"}), _record(parent="a", run_id="b")
    )
    assert joined.replay_of == "a"
    assert joined.topics.prompts == "a.prompts" and joined.topics.completions == "b.completions"
    given = load_settings(Settings, overrides={"run_id": "b", "replay_of": "c"})
    assert join_settings(given, _record(parent="a", run_id="b")).topics.prompts == "c.prompts", (
        "the flag wins"
    )


def test_a_record_of_another_run_or_with_bad_settings_is_refused() -> None:
    settings = load_settings(Settings, overrides={"run_id": "r"})
    with pytest.raises(ConfigError, match="of run 'x'"):
        join_settings(settings, _record(run_id="x"))
    bad = msgspec.structs.replace(_record(), generation={**RUN_GENERATION, "max_tokens": 0})
    with pytest.raises(ConfigError, match="do not fit"):
        join_settings(settings, bad)


def test_publish_keeps_created_at_and_read_returns_the_latest(settings: Settings, kafka: str) -> None:
    async def scenario() -> tuple[RunRecord | None, RunRecord, RunRecord, RunRecord | None]:
        none = await read_run_record(settings)
        first = await publish_run_record(settings, parent=None, servers=["http://h:1"], by="kafkagen run@a")
        await asyncio.sleep(0.01)
        second = await publish_run_record(settings, parent=None, servers=["http://h:2"], by="kafkagen run@b")
        return none, first, second, await read_run_record(settings)

    none, first, second, read = asyncio.run(scenario())
    assert none is None
    assert read == second and second.created_at == first.created_at and second.updated_at > first.updated_at
    assert second.servers == ["http://h:2"] and second.by == "kafkagen run@b"
    assert second.generation == run_generation(settings) and second.partitions == settings.topics.partitions
    assert second.gate == run_gate(settings) and second.gate["enabled"] == settings.gate.enabled
