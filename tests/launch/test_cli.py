"""The ``kafkagen`` console script: every subcommand is reachable, and module entry points are
the same commands."""

from __future__ import annotations

import subprocess
import sys

import pytest

from launch.cli import main

COMMANDS = [
    "run",
    "produce",
    "generate",
    "sink",
    "export",
    "stack",
    "preflight",
    "status",
    "runs",
    "regenerate",
]
GROUPS = ["serve", "gate"]
"""Command groups: their settings and log level are on their subcommands."""


def test_the_group_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in COMMANDS + GROUPS:
        assert f"  {command} " in out, command


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_has_help_settings_and_log_level(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"Usage: kafkagen {command}" in out
    assert "--settings-help" in out
    if command != "stack":  # the stack's are on the group: kafkagen stack --log-level debug up
        assert "--log-level" in out


def test_replay_passes_the_main_jobs_options_through(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: kafkagen replay [OPTIONS] RUN" in out and "Every other option is `kafkagen run`'s" in out
    assert main(["--help"]) == 0 and "  replay " in capsys.readouterr().out
    assert main(["replay", "a", "--as", "a"]) == 2, "a run cannot replay itself"
    assert "replay_of 'a' is the run id itself" in capsys.readouterr().err


def test_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["regenerate-everything"]) == 2
    assert "No such command" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("module", "command"),
    [
        ("producers.prompts", "produce"),
        ("consumers.generate", "generate"),
        ("sinks.s3", "sink"),
        ("sinks.export", "export"),
        ("launch.run", "run"),
        ("launch.stack", "stack"),
    ],
)
def test_module_entry_points_are_the_same_commands(module: str, command: str) -> None:
    by_module = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    by_script = subprocess.run(
        [sys.executable, "-m", "launch.cli", command, "--help"], capture_output=True, text=True, timeout=60
    )
    assert by_script.returncode == 0, by_script.stderr
    assert by_module.splitlines()[1:] == by_script.stdout.splitlines()[1:], "same options and help"
