"""``kafkagen status`` and :func:`launch.status.collect.collect` on the real local Kafka, with a real
SGLang-API simulator as a member's server: exit statuses (run not found, Kafka unreachable), the
control topic's member reports, gate and export in the document, and the main job's wait that
stops on a halted gate. The whole pipeline: ``tests/e2e/test_status_e2e.py``."""

from __future__ import annotations

import asyncio
import io
import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launch.cli import main as cli_main
from launch.run.progress import wait_until_done
from launch.status.collect import collect
from streams.config import Settings
from streams.control import ClassCounts, ControlLog, ExportReport, GateRecord, MemberReport, RunRecord
from streams.runs import naming
from streams.topics import ensure_topics, topic_specs
from tests.helpers import make_prompt, publish, start_simulator, unused_port

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def run_settings(base_settings: Settings, kafka: str, unique: str) -> Settings:
    """Settings of a run of this test's own: every name derived from its run id."""
    return naming.for_run(base_settings, f"st-{unique}")


@pytest.fixture
def simulator(tmp_path: Path) -> Iterator[str]:
    """One SGLang-API simulator (8 slots) on a free port; its URL."""
    args = ("--max-running-requests", "8", "--served-model-name", "sim-qwen3")
    proc, url = start_simulator(tmp_path / "sim.log", *args, port=unused_port())
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(20)


def test_a_run_that_does_not_exist_exits_1_and_kafka_unreachable_exits_3(
    run_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka = ["--kafka.bootstrap-servers", run_settings.kafka.bootstrap_servers]
    assert cli_main(["status", "--run-id", run_settings.run_id, *kafka]) == 1
    err = capsys.readouterr().err
    assert f"run {run_settings.run_id!r} not found" in err
    assert f"{run_settings.run_id}.prompts" in err and "--run-id" in err
    # asking created nothing (no auto-created topic on a cluster that allows it)
    assert collect_state(run_settings) == "not_found"

    nobody = ["--kafka.bootstrap-servers", f"127.0.0.1:{unused_port()}"]
    started = time.monotonic()
    assert cli_main(["status", "--run-id", run_settings.run_id, "--json", *nobody]) == 3
    err = capsys.readouterr().err
    assert "error: Kafka at 127.0.0.1:" in err
    assert "aiokafka" not in err, "aiokafka's own log lines stay out"
    assert time.monotonic() - started < 60


def collect_state(settings: Settings) -> str:
    return asyncio.run(collect(settings)).state


def _report(settings: Settings, server: str, **kw: object) -> MemberReport:
    base: dict[str, object] = {
        "run_id": settings.run_id,
        "instance": "gen-0",
        "incarnation": "i1",
        "host": socket.gethostname(),
        "pid": 1,
        "server": server,
        "model": "reported-model",
        "at": time.time(),
        "completions_per_s": 2.0,
        "tokens_per_s": 300.0,
        "completions": 4,
        "errors": 1,
        "in_flight": 3,
        "window": 10,
        "running": 99,
        "queued": 99,
        "totals": ClassCounts(results=5, classes={"truncated": 2, "error": 1}),
    }
    return MemberReport(**{**base, **kw})  # type: ignore[arg-type]


async def test_the_control_topic_feeds_servers_rates_gate_and_export(
    run_settings: Settings, simulator: str
) -> None:
    settings = run_settings
    await publish(settings, [make_prompt(i) for i in range(10)])
    await ensure_topics(settings, [topic_specs(settings)["control"]])
    control = ControlLog(settings)
    await control.start()
    try:
        dead = f"http://127.0.0.1:{unused_port()}"
        await control.publish(_report(settings, simulator))
        await control.publish(
            _report(settings, dead, instance="gen-1", completions_per_s=0.5, tokens_per_s=0.0)
        )
        await control.publish(
            _report(settings, "http://127.0.0.1:1", instance="gen-far", host="another-host", server_up=False)
        )
        status = await collect(settings)
        assert status.state == "running", "live reports, though no member is in the group"
        p = status.prompts
        assert (p.published, p.published_exact, p.results, p.remaining) == (10, False, 0, 10)
        assert [x.lag for x in status.lag.partitions if x.end_offset] and status.lag.total == 10
        by = {s.instance: s for s in status.servers}
        # asked from here: the simulator's own load and limit win over the report's
        sim = by["gen-0"]
        assert (sim.server_up, sim.model, sim.slots, sim.running, sim.queued) == (True, "sim-qwen3", 8, 0, 0)
        assert sim.occupancy == 0.0
        assert (sim.completions, sim.errors, sim.in_flight, sim.window) == (4, 1, 3, 10)
        assert by["gen-1"].server_up is False, "nothing listens there"
        # a loopback URL of another host is not asked from here: its report says
        assert (by["gen-far"].server_up, by["gen-far"].running) == (False, 99)
        assert (status.rates.completions_per_s, status.rates.tokens_per_s) == (4.5, 600.0)
        assert status.eta_s == round(10 / 4.5, 1)
        assert (status.quality.results, status.quality.classes) == (15, {"error": 3, "truncated": 6})

        await control.publish(
            ExportReport(
                run_id=settings.run_id, at=time.time(), ids=9, completions=8, errors=1, missing=1,
                duplicates_dropped=0, destination="/tmp/x", host="h",
            )
        )  # fmt: skip
        await control.publish(
            GateRecord(
                run_id=settings.run_id,
                state="halted",
                epoch=0,
                at=time.time(),
                by="gen-0",
                reason="all 4096 tokens went to reasoning",
                fix="raise --max-tokens",
            )
        )
        status = await collect(settings)
        assert status.state == "halted"
        assert (status.gate.reason, status.gate.fix) == (
            "all 4096 tokens went to reasoning",
            "raise --max-tokens",
        )
        assert status.prompts.exported == 9 and status.export is not None
        assert status.export["destination"] == "/tmp/x"

        # the main job's wait stops on the halt and says why, in prompts
        out = io.StringIO()
        started = time.monotonic()
        progress = await wait_until_done(settings, 60, show=True, out=out)
        assert time.monotonic() - started < 30
        assert progress.halted is not None and progress.halted.fix == "raise --max-tokens"
        assert not progress.done
        lines = out.getvalue().splitlines()
        assert len(lines) == 1 and re.match(
            r"\d\d:\d\d:\d\d progress: generated 0/10, waiting for the first results; ", lines[0]
        ), lines
    finally:
        await control.stop()


async def test_closing_ignores_a_clients_own_cancelled_task_but_not_our_cancellation() -> None:
    """With the broker gone, aiokafka's ``AIOKafkaConsumer.stop`` raises the CancelledError of its
    own fetch task; the main job's progress must not end there (it ended as "interrupted")."""
    from launch.status.collect import _closing

    async def stop_like_aiokafka() -> None:
        raise asyncio.CancelledError

    await _closing(stop_like_aiokafka())  # not raised

    async def closing_forever() -> None:
        await _closing(asyncio.sleep(3600))

    task = asyncio.create_task(closing_forever())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_replay_is_shown_with_its_parents_prompts_without_replay_of(
    run_settings: Settings, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run record names the parent: ``status --run-id B`` of a replay counts the parent's
    prompts topic, as ``status --run-id B --replay-of A`` does."""
    asyncio.run(publish(run_settings, [make_prompt(i) for i in range(3)]))
    replay = naming.for_run(run_settings, f"rp-{unique}", replay_of=run_settings.run_id)
    record = RunRecord(
        run_id=replay.run_id,
        parent=run_settings.run_id,
        created_at=time.time(),
        updated_at=time.time(),
        by="t",
        prompts_topic=run_settings.topics.prompts,
        partitions=7,
    )

    async def write() -> None:
        await ensure_topics(replay, [topic_specs(replay)["control"]])
        control = ControlLog(replay)
        await control.start()
        try:
            await control.publish(record)
        finally:
            await control.stop()

    asyncio.run(write())
    kafka = ["--kafka.bootstrap-servers", run_settings.kafka.bootstrap_servers]
    assert cli_main(["status", "--run-id", replay.run_id, "--json", *kafka]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["state"] == "idle" and sum(p["end_offset"] for p in doc["lag"]["partitions"]) >= 3, doc
