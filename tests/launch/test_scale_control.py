"""``kafkagen scale`` on real Kafka: what it refuses (and then writes nothing), the fleet records it
writes, the partitions it adds; and a consumer joining a run by its id alone (a real process)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import RequestTimedOutError

from launch.scale.cli import main
from launch.scale.control import publish_fleet
from streams.config import Settings
from streams.control import ControlState, FleetRecord, read_control
from streams.environment import settings_to_env
from streams.kafka import topic_partitions
from streams.runs.record import publish_run_record
from streams.topics import ensure_topics, topic_specs
from tests.helpers import REPO_ROOT, unused_port

A, B = "http://127.0.0.1:30000", "http://127.0.0.1:30001"


@pytest.fixture
def env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The test's settings in this process's environment (``main`` reads them from there)."""
    for key, value in settings_to_env(settings).items():
        monkeypatch.setenv(key, value)
    return settings


def _state(settings: Settings) -> ControlState:
    return asyncio.run(read_control(settings))


def _started_run(settings: Settings) -> None:
    """A run as the main job leaves it: its topics, its run record, its fleet [A, B]."""

    async def start() -> None:
        specs = topic_specs(settings)
        await ensure_topics(settings, [specs[r] for r in ("prompts", "completions", "errors", "control")])
        await publish_run_record(settings, parent=None, servers=[A, B], by="kafkagen run@test")
        await publish_fleet(
            settings, FleetRecord(run_id=settings.run_id, servers=[A, B], version=0, at=1.0, by="t")
        )

    asyncio.run(start())


def test_a_run_that_does_not_exist_or_has_no_fleet_is_refused(
    env: Settings, kafka: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--remove-server", A]) == 2
    assert f"run {env.run_id!r} not found" in capsys.readouterr().err
    assert not asyncio.run(topic_partitions(env.kafka, env.topics.control)), "nothing was created"
    asyncio.run(ensure_topics(env, [topic_specs(env)["prompts"]]))
    assert main(["--remove-server", A]) == 2
    assert "has no fleet record" in capsys.readouterr().err
    assert _state(env).fleet is None


def test_remove_replace_and_the_last_server(
    env: Settings, kafka: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _started_run(env)
    assert main(["--remove-server", A]) == 0
    out = capsys.readouterr().out
    assert f"- {A}" in out and "fleet version 1, 1 servers" in out, out
    assert f"note: no main job of run {env.run_id} runs on this host" in out, out
    fleet = _state(env).fleet
    assert (
        fleet is not None
        and (fleet.version, fleet.servers) == (1, [B])
        and fleet.by.startswith("kafkagen scale@")
    )
    assert main(["--remove-server", B]) == 2
    assert "last server" in capsys.readouterr().err
    assert main(["--remove-server", A]) == 2
    assert "not in the run's fleet" in capsys.readouterr().err
    assert main(["--servers", f"{B}/"]) == 0
    assert "fleet unchanged" in capsys.readouterr().out
    silent = f"http://127.0.0.1:{unused_port()}"
    assert main(["--add-server", silent, "--server-timeout", "1"]) == 3
    assert silent in capsys.readouterr().err
    fleet = _state(env).fleet
    assert fleet is not None and (fleet.version, fleet.servers) == (1, [B]), "nothing written after a refusal"


def test_partitions_are_raised_never_lowered(
    env: Settings, kafka: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _started_run(env)
    before = len(asyncio.run(topic_partitions(env.kafka, env.topics.prompts)))
    assert main(["--partitions", str(before - 1)]) == 2
    assert "cannot lower" in capsys.readouterr().err
    assert main(["--partitions", str(before + 2)]) == 0
    assert f"{before} -> {before + 2} partitions" in capsys.readouterr().out
    assert len(asyncio.run(topic_partitions(env.kafka, env.topics.prompts))) == before + 2
    run = _state(env).run
    assert run is not None and run.partitions == before + 2
    assert main(["--partitions", str(before + 2)]) == 0
    assert "already" in capsys.readouterr().out


def test_partitions_whose_answer_was_lost_are_not_asked_for_twice(
    env: Settings, kafka: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """CreatePartitions is not idempotent: when its answer is lost after the broker carried it out
    (a timeout, retriable), the command asks again, finds the partitions there and says so, instead
    of sending it again (refused: already that many) or giving up with the run record unchanged."""
    _started_run(env)
    before = len(asyncio.run(topic_partitions(env.kafka, env.topics.prompts)))
    real = AIOKafkaAdminClient.create_partitions
    sent: list[int] = []

    async def answer_lost(self: AIOKafkaAdminClient, *args: Any, **kwargs: Any) -> Any:
        sent.append(1)
        await real(self, *args, **kwargs)
        raise RequestTimedOutError("the answer was lost")

    monkeypatch.setattr(AIOKafkaAdminClient, "create_partitions", answer_lost)
    assert main(["--partitions", str(before + 1)]) == 0, capsys.readouterr().err
    assert f"{before} -> {before + 1} partitions" in capsys.readouterr().out
    assert len(sent) == 1, "sent once"
    assert len(asyncio.run(topic_partitions(env.kafka, env.topics.prompts))) == before + 1
    run = _state(env).run
    assert run is not None and run.partitions == before + 1


def test_a_consumer_joins_a_run_by_its_id_alone(settings: Settings, kafka: str, tmp_path: Path) -> None:
    """``kafkagen generate --run-id R --server URL`` with no generation or gate settings of its
    own takes the run's (the main job's ``--max-tokens 321 --no-thinking --gate.no-enabled`` here:
    a consumer on its defaults would switch the run's gate back on); a flag of its own wins."""
    run = settings.model_copy(
        update={
            "generation": settings.generation.with_budget(321, thinking=False).model_copy(
                update={"top_p": 0.5}
            ),
            "gate": settings.gate.model_copy(update={"enabled": False, "warmup": 50}),
        }
    )
    _started_run(run)
    env = {
        k: v
        for k, v in {**os.environ, **settings_to_env(settings)}.items()
        if not k.upper().startswith(("KAFKAGEN_GENERATION", "KAFKAGEN_GATE"))
    }
    server = f"http://127.0.0.1:{unused_port()}"  # nothing answers: the consumer waits for it
    for extra, top_p, gate in (
        ((), 0.5, "quality gate off"),
        (("--generation.top-p", "0.25", "--gate.enabled"), 0.25, "quality gate on (warm-up 50, window 1000)"),
    ):
        log = tmp_path / "generate.log"
        args = [
            sys.executable,
            "-m",
            "consumers.generate",
            "--run-id",
            run.run_id,
            "--server",
            server,
            *extra,
        ]
        proc = subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while "joined run" not in log.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGTERM)
            # stopped while it still waits for its server: before its graceful-stop handler is
            # installed the SIGTERM ends it at once (CI: -15); the join is what this test checks
            assert proc.wait(30) in (0, -signal.SIGTERM), log.read_text()
        text = log.read_text()
        assert f"joined run {run.run_id} by its run record (written by kafkagen run@test)" in text, text
        assert f"max_tokens 321, thinking off, temperature 0.6, top_p {top_p:g}, {gate}" in text, text
