"""The shared command-line layer: settings flags, ``--settings-help``, one exit-code map."""

from __future__ import annotations

import re

import click
import pytest
from aiokafka.errors import KafkaConnectionError

from streams import errors
from streams.cli import command_settings, exit_code, flag_given, run_command, settings_options
from streams.config import COMMON_SETTINGS, Settings
from streams.errors import (
    ConfigError,
    ExitCode,
    ForeignRunError,
    InputError,
    LayoutError,
    PermanentStorageError,
    RecordDecodeError,
    ServiceNotReadyError,
    StackError,
    StorageError,
)

seen: list[Settings] = []


@click.command()
@click.argument("files", nargs=-1)
@click.option("--server", "servers", multiple=True)
@settings_options("run_id")
@click.pass_context
def probe(ctx: click.Context, files: tuple[str, ...], servers: tuple[str, ...]) -> int:
    settings = command_settings(ctx)
    seen.append(settings)
    print(f"files={list(files)} servers={list(servers)} run_id_flag={flag_given(ctx, 'run_id')}")
    if files == ("fail",):
        raise InputError("bad line", source="x.jsonl", line=3)
    return 0


def test_a_short_flag_sets_its_setting(capsys: pytest.CaptureFixture[str]) -> None:
    seen.clear()
    assert run_command(probe, ["--retry-invalid", "3"], prog="probe") == 0
    assert seen[-1].consumer.retry_invalid == 3
    assert run_command(probe, ["--consumer.retry-invalid", "2"], prog="probe") == 0
    assert seen[-1].consumer.retry_invalid == 2
    assert run_command(probe, ["--consumer.no-parallel-samples"], prog="probe") == 0
    assert seen[-1].consumer.parallel_samples is False
    argv = [
        "--top-k",
        "20",
        "--stop",
        "END",
        "--stop",
        "STOP",
        "--seed",
        "7",
        "--extra-body",
        '{"ignore_eos": true}',
    ]
    assert run_command(probe, [*argv, "--generation.logprobs"], prog="probe") == 0
    g = seen[-1].generation
    assert (g.top_k, g.stop, g.seed, g.extra_body, g.logprobs) == (
        20,
        ["END", "STOP"],
        7,
        {"ignore_eos": True},
        True,
    )
    assert run_command(probe, ["--extra-body", '{"top_kk": 1}'], prog="probe") == 2, (
        "a misspelt field is refused"
    )
    assert "did you mean top_k" in capsys.readouterr().err


def test_settings_flags_beat_the_environment_and_leave_positionals_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKAGEN_KAFKA__BOOTSTRAP_SERVERS", "env:1")
    monkeypatch.setenv("KAFKAGEN_GENERATION__MAX_TOKENS", "77")
    seen.clear()
    argv = [
        "--kafka.client-id", "flagged", "a.jsonl",
        "--generation.temperature", "0.5", "--generation.no-separate-reasoning",
        "--generation.chat-template-kwargs", '{"enable_thinking": false}',
        "--servers", "http://127.0.0.1:1", "--servers", '["http://127.0.0.1:2"]',
        "--servers", "http://127.0.0.1:3,http://127.0.0.1:4",
        "--server", "http://own:3", "b.jsonl",
    ]  # fmt: skip
    assert run_command(probe, argv, prog="probe") == 0
    (s,) = seen
    assert s.kafka.bootstrap_servers == "env:1" and s.kafka.client_id == "flagged"
    assert s.generation.max_tokens == 77 and s.generation.temperature == 0.5
    assert s.generation.separate_reasoning is False
    assert s.generation.chat_template_kwargs == {"enable_thinking": False}
    assert s.servers == [f"http://127.0.0.1:{n}" for n in (1, 2, 3, 4)]
    out = capsys.readouterr().out
    assert "files=['a.jsonl', 'b.jsonl'] servers=['http://own:3'] run_id_flag=False" in out


def test_a_bad_setting_is_a_usage_error_naming_flag_and_variable(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(probe, ["--generation.max-tokens", "many"], prog="probe") == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "generation.max_tokens" in err and "KAFKAGEN_GENERATION__MAX_TOKENS" in err
    assert "--generation.max-tokens" in err
    assert run_command(probe, ["--no-such-flag"], prog="probe") == ExitCode.USAGE
    assert "No such option: --no-such-flag" in capsys.readouterr().err
    assert run_command(probe, ["--generation.chat-template-kwargs", "{x"], prog="probe") == ExitCode.USAGE


def test_settings_help_lists_every_setting_and_help_only_the_shown_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_command(probe, ["--settings-help"], prog="probe") == 0
    listed = capsys.readouterr().out
    for flag, env in [
        ("--kafka.bootstrap-servers", "KAFKAGEN_KAFKA__BOOTSTRAP_SERVERS"),
        ("--sink.retry-max-s", "KAFKAGEN_SINK__RETRY_MAX_S"),
        ("--consumer.retry-initial-s", "KAFKAGEN_CONSUMER__RETRY_INITIAL_S"),
        ("--consumer.session-timeout-ms", "KAFKAGEN_CONSUMER__SESSION_TIMEOUT_MS"),
    ]:
        assert listed.count(f"{flag}  {env}") == 1, flag
    # the settings most runs set come first, then one section per group, each setting once
    common, _, groups = listed.partition("\n\nrun: ")
    first = [line.split()[0].split("/")[0] for line in common.splitlines() if line.startswith("  --")]
    assert first == ["--" + path.replace("_", "-") for path in COMMON_SETTINGS]
    assert 8 <= len(first) <= 12 and "--run-id" not in groups
    sections = re.findall(r"^(\w+): ", "run: " + groups, re.M)
    groups_in_order = [
        "run",
        "kafka",
        "topics",
        "s3",
        "generation",
        "producer",
        "consumer",
        "sink",
        "gate",
    ]
    assert sections == groups_in_order
    assert "KAFKAGEN_STACK__" not in listed and "--home  KAFKAGEN_HOME" in listed
    assert run_command(probe, ["--help"], prog="probe") == 0
    shown = capsys.readouterr().out
    assert "--run-id" in shown and "--kafka.bootstrap-servers" not in shown and "--log-level" in shown


def test_an_error_raised_by_a_command_is_one_line_and_its_exit_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_command(probe, ["fail"], prog="probe") == ExitCode.USAGE
    assert "error: x.jsonl:3: bad line" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ConfigError("x"), ExitCode.USAGE),
        (ForeignRunError("x"), ExitCode.USAGE),
        (InputError("x"), ExitCode.USAGE),
        (RecordDecodeError("x"), ExitCode.USAGE),
        (LayoutError("x"), ExitCode.USAGE),
        (FileNotFoundError("x"), ExitCode.USAGE),
        (StackError("x"), ExitCode.UNAVAILABLE),
        (ServiceNotReadyError("x"), ExitCode.UNAVAILABLE),
        (StorageError("x"), ExitCode.UNAVAILABLE),
        (KafkaConnectionError(), ExitCode.UNAVAILABLE),
        (TimeoutError(), ExitCode.UNAVAILABLE),
        (PermanentStorageError("x"), ExitCode.FAILED),
        (KeyboardInterrupt(), ExitCode.INTERRUPTED),
    ],
)
def test_one_exit_code_map(error: BaseException, status: ExitCode) -> None:
    assert exit_code(error) == status


def test_null_unsets_a_setting_that_may_be_unset_and_old_spellings_still_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen.clear()
    argv = [
        "--run-id", "b", "--replay-of", "a", "--replay-of", "null",
        "--sink.instance-id", "null", "--no-generation.separate-reasoning", "--loglevel", "WARNING",
    ]  # fmt: skip
    assert run_command(probe, argv, prog="probe") == 0
    (s,) = seen
    assert s.replay_of is None and s.sink.instance_id is None
    assert s.generation.separate_reasoning is False
    assert run_command(probe, ["--run-id", "null"], prog="probe") == 0  # not nullable: a run named null
    assert seen[-1].run_id == "null"


def test_a_setting_of_an_old_name_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 0.1.0 names (``consumer.backoff_*``) are gone: a value under one is an error, not ignored."""
    monkeypatch.setenv("KAFKAGEN_CONSUMER__BACKOFF_INITIAL_S", "0.25")
    seen.clear()
    assert run_command(probe, [], prog="probe") == 2
    assert not seen
    assert "consumer.backoff_initial_s: no such setting (unset KAFKAGEN_CONSUMER__BACKOFF_INITIAL_S" in (
        capsys.readouterr().err
    )


def test_short_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(probe, ["-h"], prog="probe") == 0
    assert "Usage: probe" in capsys.readouterr().out


def test_the_error_table_is_each_classes_own_retriable_and_exit_status() -> None:
    """The tree in :mod:`streams.errors`' docstring says, per class, what the class itself says."""
    rows = re.findall(
        r"^\s*[│├└─ ]*(\w+Error|\w+Fenced)\s+(yes|no)\s+(?:(\d)\s)?", errors.__doc__ or "", re.M
    )
    assert len(rows) >= 15, rows
    for name, retriable, status in rows:
        cls = getattr(errors, name)
        assert cls.retriable == (retriable == "yes"), name
        if status:
            assert cls.exit_status == int(status), name
    documented = {name for name, _, _ in rows}
    classes = {
        n
        for n in errors.__all__
        if isinstance(getattr(errors, n), type) and n not in ("ExitCode", "KafkagenError")
    }
    assert documented == classes, "every error class is in the table, and only they"
