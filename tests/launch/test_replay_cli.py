"""``kafkagen replay``'s arguments for the main job: the parent's generation settings as the
replay's defaults, the overrides and the options passed through beating them (pure)."""

from __future__ import annotations

import time

from launch.regenerate.replay_cli import inherited_flags, replay_argv
from streams.control import RunRecord


def _parent(**generation: object) -> RunRecord:
    base: dict[str, object] = {
        "model": "default",
        "max_tokens": 512,
        "temperature": 0.6,
        "top_p": 0.95,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    return RunRecord(
        run_id="a",
        created_at=time.time(),
        updated_at=time.time(),
        by="t",
        prompts_topic="a.prompts",
        partitions=7,
        generation={**base, **generation},
    )


def test_the_parents_settings_are_the_defaults_of_the_replay() -> None:
    flags = inherited_flags(_parent(), [], {})
    assert flags == [
        "--max-tokens", "512", "--no-thinking",
        "--generation.temperature", "0.6", "--generation.top-p", "0.95",
    ]  # fmt: skip
    argv = replay_argv("a", "b", rest=["--server", "http://s:1"], inherited=flags)
    assert argv[:4] == ["--run-id", "b", "--replay-of", "a"] and argv[-2:] == ["--server", "http://s:1"]
    assert inherited_flags(None, [], {}) == [], "a run of hand-started pieces has no record"


def test_what_the_user_gives_beats_the_parent() -> None:
    rest = ["--max-tokens=4096", "--thinking", "--to", "/d"]
    flags = inherited_flags(_parent(), ["--temperature", *rest], {"KAFKAGEN_GENERATION__TOP_P": "0.5"})
    assert flags == [], "max_tokens, thinking and temperature were given, top_p is in the environment"
    assert inherited_flags(_parent(), ["--generation.max_tokens", "9"], {})[:1] == ["--no-thinking"]
    argv = replay_argv("a", "b", temperature=0.7, top_p=0.5, rest=rest, inherited=flags)
    assert argv == [
        "--run-id", "b", "--replay-of", "a",
        "--generation.temperature", "0.7", "--generation.top-p", "0.5", *rest,
    ]  # fmt: skip
    assert replay_argv("a", "b", reuse_identical=True)[-2:] == ["--consumer.reuse-from", "a"]
    no_thinking_known = _parent(chat_template_kwargs={})
    assert inherited_flags(no_thinking_known, [], {"KAFKAGEN_GENERATION__MAX_TOKENS": "8"}) == [
        "--generation.temperature", "0.6", "--generation.top-p", "0.95",
    ]  # fmt: skip
