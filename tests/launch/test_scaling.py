"""The fleet's pure parts (launch/scale/policy.py), the scale command's argument checks, and the
supervisord programs a fleet change adds and removes (a real supervisord, no Kafka)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest

from launch.scale.cli import check_scale_args, main
from launch.scale.policy import (
    consumer_program,
    consumer_programs,
    fleet_at_start,
    fleet_change,
    instance_id,
    program_name,
    scaled_servers,
)
from launch.scale.watch import FleetWatch
from launch.stack.process import wait_until
from launch.supervise import Program, Supervisor
from streams.config import Settings
from streams.control import FleetRecord, RunRecord
from streams.errors import ConfigError

A, B, C, D = (f"http://127.0.0.1:3000{i}" for i in range(4))


def _run(servers: list[str]) -> RunRecord:
    return RunRecord(
        run_id="r",
        created_at=1.0,
        updated_at=1.0,
        by="t",
        prompts_topic="r.prompts",
        partitions=7,
        servers=servers,
    )


def _fleet(servers: list[str], version: int) -> FleetRecord:
    return FleetRecord(run_id="r", servers=servers, version=version, at=2.0, by="kafkagen scale@h")


def test_fleet_change_compares_urls_without_trailing_slashes() -> None:
    change = fleet_change([A, B + "/"], [B, C, D])
    assert change.added == (C, D) and change.removed == (A,) and change.kept == (B,)
    assert fleet_change([A], [A + "/"]).empty


def test_scaled_servers_adds_removes_and_replaces() -> None:
    assert scaled_servers([A, B], add=[C, D]) == [A, B, C, D]
    assert scaled_servers([A, B, C, D], remove=[A, B + "/", D]) == [C]
    assert scaled_servers([A, B], add=[B, C]) == [A, B, C], "adding a server already there changes nothing"
    assert scaled_servers([A, B], servers=[D]) == [D]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"remove": [A, B]}, "last server"),
        ({"servers": [A], "add": [C]}, "--servers gives the whole fleet"),
        ({"remove": [C]}, "not in the run's fleet"),
        ({"add": ["127.0.0.1:30009"]}, "not an http(s) URL"),
        ({"add": [C + "/v1"]}, "without /v1"),
        ({"add": [C, C + "/"]}, "given twice"),
        ({"add": [C], "remove": [C]}, "both added and removed"),
    ],
)
def test_scaled_servers_refuses(kwargs: dict[str, list[str]], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        scaled_servers([A, B], **kwargs)


def test_names_are_per_server_url_not_per_position() -> None:
    # stable across versions: a restarted main job keeps its consumers' static memberships
    assert program_name(A) == "generate-127-0-0-1-30000-f093a827" == program_name(A + "/")
    url = "https://gpu-3.example:8443/v2"
    assert instance_id("run-1", url) == "run-1-generate-gpu-3-example-8443-v2-562890ad"
    program = consumer_program(Settings(run_id="run-1"), B, ["--metrics-port", "9102"])
    assert program.name == "generate-127-0-0-1-30001-79affead"
    assert program.argv[1:] == (
        "-m",
        "consumers.generate",
        "--server",
        B,
        "--instance-id",
        "run-1-generate-127-0-0-1-30001-79affead",
        "--metrics-port",
        "9102",
    )


@pytest.mark.parametrize(
    "urls",
    [
        ("http://gpu-0:30000", "http://gpu.0:30000"),
        ("http://gpu-0:30000", "https://gpu-0:30000"),
        ("http://h:1/v1/x", "http://h:1/v1-x"),
    ],
)
def test_two_server_urls_never_share_a_name(urls: tuple[str, str]) -> None:
    a, b = urls
    assert program_name(a) != program_name(b)
    assert instance_id("r", a) != instance_id("r", b)


def test_metrics_ports_follow_the_order_servers_got_a_consumer() -> None:
    make = consumer_programs(Settings(run_id="r"), 9100)
    assert [make(u).argv[-1] for u in (A, B, C, A + "/")] == ["9102", "9103", "9104", "9102"]
    assert "--metrics-port" not in consumer_programs(Settings(run_id="r"), None)(A).argv
    assert "--metrics-port" not in consumer_programs(Settings(run_id="r"), 65534)(A).argv


def test_a_new_run_writes_the_commands_fleet_as_version_0() -> None:
    start = fleet_at_start("r", [A, B], None, None, by="run@h", now=5.0)
    assert start.servers == [A, B] and start.note is None
    assert start.record == FleetRecord(run_id="r", servers=[A, B], version=0, at=5.0, by="run@h")


def test_the_same_command_again_starts_the_fleet_as_scaled() -> None:
    """The main job SIGKILLed after a scale and run again with its own command: the fleet's
    servers, not the original --server list, and nothing written."""
    start = fleet_at_start("r", [A, B], _run([A, B]), _fleet([B, C, D], 3), by="run@h", now=5.0)
    assert start.servers == [B, C, D] and start.record is None
    assert (
        start.note is not None
        and "+http://127.0.0.1:30002" in start.note
        and "-http://127.0.0.1:30000" in start.note
    )
    unchanged = fleet_at_start("r", [A, B], _run([A, B]), _fleet([B, A], 0), by="run@h", now=5.0)
    assert unchanged.servers == [B, A] and unchanged.record is None and unchanged.note is None


def test_another_server_list_replaces_the_fleet() -> None:
    start = fleet_at_start("r", [D], _run([A, B]), _fleet([A, B, C], 2), by="run@h", now=5.0)
    assert start.servers == [D]
    assert start.record == FleetRecord(run_id="r", servers=[D], version=3, at=5.0, by="run@h")
    assert start.note is not None and "version 2 -> 3" in start.note


def test_check_scale_args() -> None:
    check_scale_args((A,), (), None, None)
    check_scale_args((), (), [A, B], None)
    check_scale_args((), (), None, 12)
    for args, message in [
        (((), (), None, None), "nothing to change"),
        (((A,), (), [B], None), "--servers gives the whole fleet"),
        (((), (), [], None), "--servers is empty"),
    ]:
        with pytest.raises(click.UsageError, match=message):
            check_scale_args(*args)


def test_scale_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--run-id", "r"]) == 2
    assert "nothing to change" in capsys.readouterr().err
    assert main(["--run-id", "r", "--partitions", "0"]) == 2
    assert main(["--run-id", "r", "--servers", "[]"]) == 2
    assert "--servers is empty" in capsys.readouterr().err
    assert main(["--run-id", "r", "--servers", "127.0.0.1:1"]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err


def _wait(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    assert wait_until(check, timeout_s=timeout_s, interval_s=0.1), "timed out"


def test_the_watch_adds_and_removes_programs_under_a_running_supervisord(tmp_path: Path) -> None:
    """FleetWatch's reconciliation (no Kafka: the fleet is handed in): an added server gets a
    program at once; a removed one gets SIGTERM, and is taken out once it stopped; the sink is
    never touched; a server removed and added back while it stops is started again."""
    sleeper = (
        "import signal, sys, time; "
        "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1), sys.exit(0))); time.sleep(300)"
    )

    def make(url: str) -> Program:
        return Program(program_name(url), (sys.executable, "-c", sleeper, url), stop_wait_s=10)

    lines: list[str] = []
    supervisor = Supervisor(tmp_path / "sv")
    supervisor.start([make(A), make(B), Program("sink", (sys.executable, "-c", sleeper))], cwd=tmp_path)
    watch = FleetWatch(Settings(run_id="r"), supervisor, servers=[A, B], make_program=make, echo=lines.append)
    try:
        watch.take(_fleet([A, B, C, D], 1))
        watch.turn()
        assert [line.split(": ", 1)[1] for line in lines] == [
            f"+ {C}: consumer started (program {program_name(C)})",
            f"+ {D}: consumer started (program {program_name(D)})",
        ]
        _wait(lambda: all(supervisor.states().get(program_name(u)) == "RUNNING" for u in (A, B, C, D)))
        lines.clear()
        watch.take(_fleet([C], 2))
        watch.turn()
        assert len(lines) == 3 and all("stopping its consumer" in line for line in lines), lines
        watch.take(_fleet([B, C], 3))  # B back before it stopped

        def turned(check: Callable[[], bool]) -> Callable[[], bool]:
            def after_a_turn() -> bool:
                watch.turn()
                return check()

            return after_a_turn

        _wait(turned(lambda: supervisor.states().get(program_name(A)) is None))
        _wait(turned(lambda: program_name(D) not in supervisor.programs()))
        _wait(turned(lambda: supervisor.states().get(program_name(B)) == "RUNNING"))
        assert set(supervisor.programs()) == {program_name(B), program_name(C), "sink"}
        assert supervisor.states()["sink"] == "RUNNING"
        assert any(f"+ {B}: consumer started again" in line for line in lines), lines
        assert any(f"- {A}: consumer stopped and removed" in line for line in lines), lines
        assert program_name(A) not in supervisor.conf.read_text()
    finally:
        watch.stop()
        supervisor.shutdown()
