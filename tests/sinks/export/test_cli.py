"""``kafkagen export``'s names, without Kafka or S3: the run is ``--run-id`` (``--run``, its old
spelling, hidden and never beside a different ``--run-id``), ``--to`` defaults to the run's dataset
folder, and the formats are printed as the input side spells them."""

from __future__ import annotations

import pytest

from sinks.export.cli import main


def test_the_help_names_one_run_flag_the_default_folder_and_the_formats_one_way(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # click wraps the help
    assert "--run-id VALUE" in text and "--run TEXT" not in text
    assert (
        "(default: the run's dataset folder <home>/datasets/<run id>, where kafkagen run exports it;" in text
    )
    assert "[required]" not in text
    assert "dataset format: jsonl, parquet, openai_batch, chat" in text and "openai-batch" not in text


def test_the_old_run_flag_beside_another_run_id_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--run", "a", "--run-id", "b", "--to", "unused"]) == 2
    assert "--run a is the old spelling of --run-id b: give one" in capsys.readouterr().err
