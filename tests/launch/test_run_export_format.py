"""``kafkagen run --export-format``: checked before anything starts, and handed to the job's export."""

from __future__ import annotations

from typing import Any

import pytest

import launch.run.job
from launch.run.cli import run_main as main
from launch.run.job import RunOptions, export_argv
from sinks.export.cli import export_command


def test_an_unknown_export_format_stops_the_run_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def started(*args: Any) -> Any:
        raise AssertionError("the run started")

    monkeypatch.setattr(launch.run.job, "plan_run", started)
    assert main(["--run-id", "formats", "--export-format", "parquet,csv"]) == 2
    assert "unknown format 'csv'" in capsys.readouterr().err


def test_the_export_formats_reach_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[RunOptions] = []

    def run(plan: Any, options: RunOptions) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(launch.run.job, "plan_run", lambda settings, options: settings)
    monkeypatch.setattr(launch.run.job, "run", run)
    assert main(["--run-id", "formats", "--export-format", "parquet,chat", "--export-format", "parquet"]) == 0
    assert seen[0].export_formats == ("parquet", "chat")
    assert main(["--run-id", "formats"]) == 0
    assert seen[1].export_formats == ()


def test_the_job_hands_them_to_export_as_its_output_format() -> None:
    """The export's dataset format is --output-format (its --format is refused): the argv the job
    runs ``python -m sinks.export`` with parses, and gives the formats to the export."""
    argv = export_argv(RunOptions(export_formats=("parquet", "chat")), "formats", "/tmp/formats-dataset")
    assert argv == ["--run-id", "formats", "--to", "/tmp/formats-dataset", *_pairs("parquet", "chat")]
    ctx = export_command.make_context("export", list(argv))
    assert ctx.params["formats"] == ("parquet", "chat") and ctx.params["old_format"] == ()


def _pairs(*formats: str) -> list[str]:
    return [arg for fmt in formats for arg in ("--output-format", fmt)]
