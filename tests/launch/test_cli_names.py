"""One command line (issue 30 item 11): an option's name means one thing on every command, --help
cites no source file, group summaries are whole, and ``kafkagen replay --help`` lists the
``kafkagen run`` options it passes through."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest

from launch.cli import kafkagen, main
from streams.cli import HELP_OPTIONS

READERS = ("run", "produce", "preflight")
"""The commands that read prompt inputs with the producer's mapping options."""

SOURCE_PATH = re.compile(r"\b(streams|consumers|producers|sinks|launch|simulator|bench|tests|scripts)[/.]\w")
"""A source file or module of the repository (``streams/inputs/answers.py``, ``consumers.reuse``)."""


def _helps(
    command: click.Command, path: list[str], parent: click.Context | None = None
) -> Iterator[tuple[str, str]]:
    # the CLI's help names, as streams.cli.run_command gives them: click caches a command's help
    # option with the names of the first context that asks (click 8.3 Command.get_help_option)
    ctx = click.Context(
        command, info_name=" ".join(path), parent=parent, terminal_width=100, help_option_names=HELP_OPTIONS
    )
    yield " ".join(path), command.get_help(ctx)
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            yield from _helps(sub, [*path, name], ctx)


def _flags(text: str) -> set[str]:
    return set(re.findall(r"^\s+(--[\w.-]+)", text, flags=re.MULTILINE))


@pytest.mark.parametrize("command", READERS)
def test_the_input_format_is_input_format_and_format_is_not_shown(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == 0
    flags = _flags(capsys.readouterr().out)
    assert "--input-format" in flags and "--format" not in flags


def test_export_names_its_output_format_and_its_input_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--help"]) == 0
    flags = _flags(capsys.readouterr().out)
    assert {"--output-format", "--input-format"} <= flags and "--format" not in flags


def test_export_refuses_format_and_names_output_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--run-id", "names", "--format", "parquet"]) == 2
    err = capsys.readouterr().err
    assert "--output-format parquet" in err and "--input-format" in err


def test_format_stays_the_old_name_of_input_format(capsys: pytest.CaptureFixture[str]) -> None:
    """Old scripts: ``--format dataset`` is ``--input-format dataset`` (refused the same way here,
    before anything is read); the two with different values are a usage error."""
    assert main(["produce", "--run-id", "names", "--format", "dataset", "x.jsonl"]) == 2
    assert "--input-format dataset needs --prompt-field" in capsys.readouterr().err
    argv = ["produce", "--run-id", "names", "--format", "chat", "--input-format", "dataset", "x.jsonl"]
    assert main(argv) == 2
    assert "--format is the old name of --input-format; give one" in capsys.readouterr().err


def test_no_help_cites_a_source_file() -> None:
    cited = [
        f"kafkagen {name[len('kafkagen ') :]}: {line.strip()}"
        for name, text in _helps(kafkagen, ["kafkagen"])
        for line in text.splitlines()
        if SOURCE_PATH.search(line)
    ]
    assert not cited, "\n".join(cited)


def test_the_source_path_check_can_fail() -> None:
    assert SOURCE_PATH.search("keep for the others (streams/inputs/answers.py)")
    assert not SOURCE_PATH.search("the run's dataset (docs/export.md); generation.model")


@pytest.mark.parametrize("group", ["serve", "gate", "stack"])
def test_a_group_lists_each_summary_whole(group: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([group, "--help"]) == 0
    listing = capsys.readouterr().out.split("Commands:", 1)[1]
    assert "..." not in listing.replace("--port+1, ...", "")
    if group == "serve":
        assert "waits until the ports are free." in " ".join(listing.split())


def test_replay_help_lists_the_run_options_it_passes_through(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--help"]) == 0
    own, passed = capsys.readouterr().out.split("Options of kafkagen run (passed through to it):", 1)
    assert {"--as", "--temperature", "--top-p", "--model"} <= _flags(own)
    run_flags = _flags(passed)
    assert {"--prompts", "--server", "--max-tokens", "--thinking", "--to", "--export-format"} <= run_flags
    assert {"--input-format", "--settings-help"} <= run_flags
    assert not {"--run-id", "--replay-of", "--temperature", "--top-p"} & run_flags, "replay sets these itself"


@pytest.mark.parametrize("command", ["status", "run"])
def test_lag_and_remaining_are_told_apart_where_they_are_printed(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "'remaining'" in text and "lag" in text and "offsets" in text, text
    if command == "status":
        assert "'remaining' is prompts: published minus result records written" in text
        assert "'lag' is Kafka offsets: the prompts topic's end offsets minus the generation group's" in text
