"""The names a run derives from its run id (``streams.runs.naming``, docs/runs.md): pure, no services."""

from __future__ import annotations

import os

import pytest

from consumers.generate import group_id as generate_group_id
from sinks.layout import run_prefix
from sinks.s3 import group_id as sink_group_id
from streams.config import Settings, TopicSettings, load_settings
from streams.environment import settings_to_env
from streams.errors import ConfigError
from streams.runs import naming


@pytest.fixture(autouse=True)
def _no_kafkagen_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("KAFKAGEN_")]:
        monkeypatch.delenv(key)


def test_every_name_derives_from_the_run_id() -> None:
    s = load_settings(Settings, ["--run-id", "qwen3-run-1"], prog="t")
    assert (s.topics.prompts, s.topics.completions, s.topics.errors) == (
        "qwen3-run-1.prompts",
        "qwen3-run-1.completions",
        "qwen3-run-1.errors",
    )
    assert naming.generate_group(s) == "kafkagen-generate.qwen3-run-1"
    assert naming.sink_group(s) == "kafkagen-sink.qwen3-run-1"
    assert naming.run_folder(s.s3.prefix, s.run_id) == "runs/qwen3-run-1/"
    assert Settings().topics.prompts == "default.prompts"  # the default run id's own topic


def test_the_group_and_folder_functions_callers_import_are_naming_s() -> None:
    assert generate_group_id is naming.generate_group and sink_group_id is naming.sink_group
    assert run_prefix("/runs/", "r") == naming.run_folder("runs", "r") == "runs/r/"
    assert naming.run_folder("", "r") == "r/"


def test_a_replay_reads_the_replayed_run_s_prompts_and_writes_its_own_results() -> None:
    s = load_settings(Settings, ["--run-id", "B", "--replay-of", "A"], prog="t")
    assert s.replay_of == "A"
    assert (s.topics.prompts, s.topics.completions, s.topics.errors) == (
        "A.prompts",
        "B.completions",
        "B.errors",
    )
    assert naming.generate_group(s) == "kafkagen-generate.B"
    assert naming.sink_group(s) == "kafkagen-sink.B"


def test_the_environment_declares_a_replay_and_an_empty_value_declares_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFKAGEN_RUN_ID", "B")
    monkeypatch.setenv("KAFKAGEN_REPLAY_OF", "A")
    assert Settings().topics.prompts == "A.prompts"
    monkeypatch.setenv("KAFKAGEN_REPLAY_OF", "")  # docker compose's ${REPLAY_OF:-}
    s = Settings()
    assert s.replay_of is None and s.topics.prompts == "B.prompts"


def test_an_explicit_topic_name_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_settings(Settings, ["--run-id", "A", "--topics.prompts", "prompts"], prog="t")
    assert (s.topics.prompts, s.topics.completions) == ("prompts", "A.completions")
    assert Settings(run_id="A", topics=TopicSettings(completions="c")).topics == TopicSettings(
        prompts="A.prompts", completions="c", errors="A.errors", control="A.control"
    )
    monkeypatch.setenv("KAFKAGEN_TOPICS__ERRORS", "dlq")
    assert Settings(run_id="A").topics.errors == "dlq"


def test_an_empty_topic_name_in_the_environment_means_derived(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKAGEN_RUN_ID", "A")
    monkeypatch.setenv("KAFKAGEN_TOPICS__PROMPTS", "")
    assert Settings().topics.prompts == "A.prompts"


def test_for_run_re_derives_the_names_a_model_copy_would_keep() -> None:
    a = Settings(run_id="A")
    copied = a.model_copy(update={"run_id": "B"})
    assert copied.topics.prompts == "A.prompts", "model_copy runs no validator: the trap for_run avoids"
    b = naming.for_run(a, "B")
    assert (b.run_id, b.replay_of) == ("B", None)
    assert (b.topics.prompts, b.topics.completions, b.topics.errors) == (
        "B.prompts",
        "B.completions",
        "B.errors",
    )
    replay = naming.for_run(a, "C", replay_of="A")
    assert (replay.topics.prompts, replay.topics.completions) == ("A.prompts", "C.completions")
    back = naming.for_run(replay, "D", replay_of=None)
    assert (back.replay_of, back.topics.prompts) == (None, "D.prompts")
    kept = naming.for_run(replay, "E")  # replay_of is kept unless given
    assert (kept.replay_of, kept.topics.prompts) == ("A", "A.prompts")


def test_for_run_keeps_explicit_names() -> None:
    s = Settings(run_id="A", topics=TopicSettings(prompts="shared-prompts"))
    b = naming.for_run(s, "B")
    assert (b.topics.prompts, b.topics.completions) == ("shared-prompts", "B.completions")


def test_a_child_process_sees_the_same_names() -> None:
    s = naming.for_run(Settings(), "B", replay_of="A")
    env = settings_to_env(s)
    assert env["KAFKAGEN_REPLAY_OF"] == "A" and env["KAFKAGEN_TOPICS__PROMPTS"] == "A.prompts"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--run-id", "A", "--replay-of", "A"], "replay_of 'A' is the run id itself"),
        (["--replay-of", "a/b"], "replay_of 'a/b' must be non-empty"),
        (["--run-id", ".hidden"], "run_id '.hidden' must be non-empty"),
    ],
)
def test_bad_run_ids_name_the_setting(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load_settings(Settings, argv, prog="t")
    assert "KAFKAGEN_" in str(info.value)


def test_for_run_checks_the_run_ids() -> None:
    with pytest.raises(ValueError, match="run_id 'a b'"):
        naming.for_run(Settings(), "a b")
    with pytest.raises(ValueError, match="is the run id itself"):
        naming.for_run(Settings(), "A", replay_of="A")
