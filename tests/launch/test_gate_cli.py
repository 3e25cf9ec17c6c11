"""``kafkagen gate status|halt|resume`` (launch/gate/cli.py) on the real broker: a halt by hand,
what status shows, a resume's new epoch, and the exit statuses (streams/cli.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from launch.cli import main
from launch.gate.cli import describe_state
from streams.config import Settings
from streams.control import ClassCounts, ControlLog, MemberReport, read_control
from streams.environment import settings_to_env
from streams.kafka import topic_partitions
from streams.topics import ensure_topics, topic_specs
from tests.helpers import unused_port


def run(settings: Settings, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    for name, value in settings_to_env(settings).items():
        monkeypatch.setenv(name, value)
    return main(["gate", *args, "--run-id", settings.run_id])


def test_gate_is_a_kafkagen_command_with_settings_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "  gate " in capsys.readouterr().out
    for sub in ("status", "halt", "resume"):
        assert main(["gate", sub, "--help"]) == 0
        out = capsys.readouterr().out
        assert f"Usage: kafkagen gate {sub}" in out and "--settings-help" in out and "--run-id" in out


def test_halt_status_resume_by_hand(
    kafka: str, settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def report() -> None:
        await ensure_topics(settings, [topic_specs(settings)["control"]])
        control = ControlLog(settings)
        await control.start()
        try:
            gate = ClassCounts(results=40, classes={"empty_content": 30, "degenerate": 30})
            await control.publish(
                MemberReport(
                    run_id=settings.run_id,
                    instance="gpu-0",
                    incarnation="x",
                    host="h",
                    pid=7,
                    server="http://127.0.0.1:30000",
                    at=time.time(),
                    gate=gate,
                    totals=gate,
                    completions=40,
                    max_tokens=512,
                    thinking=True,
                )
            )
        finally:
            await control.stop()

    assert run(settings, monkeypatch, "status") == 0
    assert "nothing on" in capsys.readouterr().out
    asyncio.run(report())
    assert run(settings, monkeypatch, "status") == 0
    out = capsys.readouterr().out
    assert "running, gate epoch 0" in out and "gpu-0" in out
    assert "empty_content" in out and "75.0%" in out and "OVER" in out  # 30 of 40 > 25%
    later = describe_state(settings, asyncio.run(read_control(settings)), now=time.time() + 60)
    assert any(line.split()[:2] == ["gpu-0", "silent"] for line in later)  # no report for 60 s

    assert run(settings, monkeypatch, "halt", "--reason", "wrong model on gpu-3") == 0
    assert "halted (epoch 0)" in capsys.readouterr().out
    assert run(settings, monkeypatch, "status") == 1  # halted
    out = capsys.readouterr().out
    assert "HALTED" in out and "wrong model on gpu-3" in out and "kafkagen gate resume" in out
    assert run(settings, monkeypatch, "halt", "--reason", "again") == 0
    assert "halted already" in capsys.readouterr().out
    state = asyncio.run(read_control(settings))
    assert state.halted and state.gate is not None and state.gate.counts.results == 40

    assert run(settings, monkeypatch, "resume", "--reason", "fixed") == 0
    assert "epoch 1" in capsys.readouterr().out
    state = asyncio.run(read_control(settings))
    assert not state.halted and state.epoch == 1 and state.gate is not None and state.gate.state == "resumed"
    assert state.fleet_gate_counts() == ClassCounts()  # gpu-0's report is of epoch 0
    assert run(settings, monkeypatch, "resume") == 0
    assert "not halted" in capsys.readouterr().out
    assert asyncio.run(read_control(settings)).epoch == 1  # nothing written


def test_usage_and_unreachable_kafka_exit_statuses(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(settings, monkeypatch, "halt") == 2  # --reason is required
    kafka = settings.kafka.model_copy(update={"bootstrap_servers": f"127.0.0.1:{unused_port()}"})
    nowhere = settings.model_copy(update={"kafka": kafka})
    capsys.readouterr()
    assert run(nowhere, monkeypatch, "status") == 3
    err = capsys.readouterr().err
    assert err.startswith("error: Kafka at 127.0.0.1:") and len(err.strip().splitlines()) == 1


def test_halt_and_resume_of_a_run_that_does_not_exist_write_nothing(
    kafka: str, settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped --run-id must not report "halted" (exit 0) while the real run goes on, nor leave
    a control topic behind for a run that never existed."""
    typo = settings.model_copy(update={"run_id": f"{settings.run_id}-typo"})
    typo = Settings.model_validate(typo.model_dump(exclude={"topics"}))
    capsys.readouterr()
    for action in (["halt", "--reason", "stop it"], ["resume"]):
        assert run(typo, monkeypatch, *action) == 2, action
        err = capsys.readouterr().err
        assert "not found" in err and typo.topics.control in err and "nothing was written" in err
    assert not asyncio.run(topic_partitions(typo.kafka, typo.topics.control))


def test_a_halted_run_is_a_breach_even_when_every_prompt_got_done(
    kafka: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main job's last check (launch.run.job): a run halted with all its prompts in flight ends
    "done" in the status (done comes first), and must not exit 0 for it."""
    from launch.gate.control import unjudged_breach

    asyncio.run(ensure_topics(settings, [topic_specs(settings)["control"]]))
    assert asyncio.run(unjudged_breach(settings)) is None  # no result: nothing to judge
    assert run(settings, monkeypatch, "halt", "--reason", "wrong model") == 0
    verdict = asyncio.run(unjudged_breach(settings))
    assert verdict is not None and "wrong model" in verdict[0] and verdict[1] == "fix what the reason says"
