"""``python -m launch.run``: argument checks that fail before anything is started, the rule for
which servers the main job starts itself, and the producer options it shares with ``produce``."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest

from launch.cli import main as cli_main
from launch.run.cli import run_main as main
from launch.run.job import LOCAL_MAX_TOKENS, RunOptions, plan_run, producer_argv
from launch.run.prompt_check import check_prompts
from launch.run.servers import embedded_llm, servers_set_by_user
from streams.cli import MAPPING_OPTIONS
from streams.config import Settings, load_settings
from streams.errors import ConfigError
from streams.inputs import FormatName, InputMapping, MappingOptions
from tests.helpers import unused_port


@pytest.fixture(autouse=True)
def _no_kafkagen_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in [k for k in os.environ if k.startswith("KAFKAGEN_")]:
        monkeypatch.delenv(key)


def test_a_server_that_is_not_an_http_url_stops_the_run_before_the_stack_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc = main(["--run-id", "bad-server", "--server", "http://127.0.0.1:30000", "--server", "notaurl"])
    out, err = capsys.readouterr()
    assert rc == 2, "a bad flag is a usage error (streams.cli.ExitCode.USAGE)"
    assert "error: --server 'notaurl' is not an http(s) URL, e.g. http://127.0.0.1:30000" in err
    assert "run bad-server" not in out, "nothing was started"


# -- which servers the main job starts itself (launch.run.servers) ---------------------------------------


def _loaded(monkeypatch: pytest.MonkeyPatch, env: str | None, flags: dict[str, object]) -> Settings:
    """Settings as ``kafkagen run`` loads them: the environment, then its settings flags."""
    if env is not None:
        monkeypatch.setenv("KAFKAGEN_SERVERS", env)
    return load_settings(Settings, overrides=flags)


@pytest.mark.parametrize(
    ("env", "flags", "servers", "local_llm", "embedded"),
    [
        (None, {}, (), False, True),  # the embedded default
        ('["http://127.0.0.1:30000", "http://127.0.0.1:30001"]', {}, (), False, False),  # env, even = default
        ('["http://10.0.0.7:30000"]', {}, (), False, False),
        (None, {"servers": ["http://127.0.0.1:30000"]}, (), False, False),  # --servers
        (None, {}, ("http://127.0.0.1:30000",), False, False),  # --server
        (None, {}, ("http://127.0.0.1:30000",), True, True),  # --local-llm
        ('["http://127.0.0.1:30200"]', {}, (), True, True),  # a second local copy: env + --local-llm
    ],
)
def test_llama_cpp_starts_only_for_the_embedded_default_or_when_asked(
    monkeypatch: pytest.MonkeyPatch,
    env: str | None,
    flags: dict[str, object],
    servers: tuple[str, ...],
    local_llm: bool,
    embedded: bool,
) -> None:
    settings = _loaded(monkeypatch, env, flags)
    assert servers_set_by_user(settings) is (env is not None or "servers" in flags)
    assert embedded_llm(settings, servers, local_llm=local_llm) is embedded
    plan = plan_run(settings, RunOptions(servers=servers, local_llm=local_llm))
    assert plan.embedded is embedded
    assert plan.settings.servers == list(servers or settings.servers)
    gen = plan.settings.generation
    if embedded:  # the local budget: Gemma-3-270M on 2 CPU cores
        assert (gen.max_tokens, gen.chat_template_kwargs["enable_thinking"]) == (LOCAL_MAX_TOKENS, False)
    else:  # the generation settings' production defaults
        assert (gen.max_tokens, gen.chat_template_kwargs["enable_thinking"]) == (4096, True)


def test_flags_beat_the_defaults_of_either_kind_of_server(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _loaded(monkeypatch, None, {})
    local = plan_run(settings, RunOptions(max_tokens=64, thinking=True)).settings.generation
    assert (local.max_tokens, local.chat_template_kwargs["enable_thinking"]) == (64, True)
    remote = plan_run(settings, RunOptions(servers=("http://gpu-0:30000",), thinking=False)).settings
    assert (remote.generation.max_tokens, remote.generation.chat_template_kwargs) == (
        4096,
        {"enable_thinking": False},
    )


def test_local_llm_needs_loopback_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _loaded(monkeypatch, None, {})
    with pytest.raises(ConfigError, match=r"http://gpu-0:30000 is not a loopback URL: drop --local-llm"):
        plan_run(settings, RunOptions(servers=("http://gpu-0:30000",), local_llm=True))


# -- the producer's mapping options ------------------------------------------------------------------


def _option_blocks(help_text: str) -> dict[str, str]:
    """``--flag`` -> its lines in click's help (the option line and its wrapped description)."""
    blocks: dict[str, str] = {}
    current = ""
    for line in help_text.split("Options:", 1)[1].splitlines():
        match = re.match(r"  (-[-\w]+)", line)
        if match:
            current = match.group(1)
            blocks[current] = ""
        if current:
            blocks[current] += line.strip() + " "
    return blocks


def test_run_and_produce_list_the_same_mapping_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["run", "--help"]) == 0
    run_help = _option_blocks(capsys.readouterr().out)
    assert cli_main(["produce", "--help"]) == 0
    produce_help = _option_blocks(capsys.readouterr().out)
    for flag in MAPPING_OPTIONS:
        assert flag in produce_help, flag
        assert run_help.get(flag) == produce_help[flag], flag
    # Every other produce option is one the main job sets itself: a new mapping option added to
    # produce alone fails here.
    producer_only = {"--from-scratch", "--allow-bad", "--bad-lines", "--no-progress"}
    assert set(produce_help) - set(run_help) <= producer_only


def test_the_producer_gets_the_mapping_options_and_the_demo_fields_only_by_default(tmp_path: Path) -> None:
    report = tmp_path / "bad.jsonl"
    default = producer_argv(RunOptions(), report)
    assert default[0].endswith("data/prompts/demo.jsonl")
    assert default[1:] == ["--keep-field", "source", "--keep-field", "reference", "--bad-lines", str(report)]
    rows = MappingOptions(
        format=FormatName.DATASET,
        prompt_field="question",
        id_field="qid",
        system="Be brief.",
        keep_fields=("answer",),
        tags=("gsm8k", "test"),
        limit=40,
    )
    mapping = InputMapping(rows, key_by="id")
    argv = producer_argv(
        RunOptions(prompts=("a.jsonl", "s3://b/k.jsonl"), mapping=mapping, progress=False), report
    )
    assert argv == [
        "a.jsonl",
        "s3://b/k.jsonl",
        "--input-format",
        "dataset",
        "--limit",
        "40",
        "--prompt-field",
        "question",
        "--id-field",
        "qid",
        "--system",
        "Be brief.",
        "--key-by",
        "id",
        "--keep-field",
        "answer",
        "--tag",
        "gsm8k",
        "--tag",
        "test",
        "--bad-lines",
        str(report),
        "--no-progress",
    ]


# -- cheap checks before anything starts -------------------------------------------------------------


@pytest.fixture
def idle_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A stack home of its own (empty) and addresses where nothing runs: whatever the main job
    starts shows up under the returned home."""
    home = tmp_path / "stack"
    monkeypatch.setenv("KAFKAGEN_HOME", str(home))
    monkeypatch.setenv("KAFKAGEN_KAFKA__BOOTSTRAP_SERVERS", f"127.0.0.1:{unused_port()}")
    monkeypatch.setenv("KAFKAGEN_S3__ENDPOINT_URL", f"http://127.0.0.1:{unused_port()}")
    return home


def _started_nothing(home: Path) -> bool:
    return not any(home.rglob("*.pid")) and not (home / "runs").exists()


def test_missing_prompts_stop_the_run_before_anything_starts(
    idle_stack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["--run-id", "no-file", "--prompts", "missing.jsonl"])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert "missing.jsonl: no such file" in err
    assert "run no-file" not in out
    assert _started_nothing(idle_stack)


def test_a_folder_holding_other_files_stops_the_run_before_anything_starts(
    idle_stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"prompt": "Hi"}\n')
    (folder / "notes.txt").write_text("a note\n")
    rc = main(["--run-id", "mixed-folder", "--prompts", str(folder)])
    _, err = capsys.readouterr()
    assert rc == 2, err
    assert f"{folder}: is a folder holding 1 file(s) that are not prompt files (notes.txt)" in err
    assert _started_nothing(idle_stack)
    assert producer_argv(
        RunOptions(prompts=(str(folder),), mapping=InputMapping(skip_unreadable=True)), tmp_path / "bad"
    )[:2] == [str(folder), "--skip-unreadable"], "the producer leaves out what the run was told to"


@pytest.mark.parametrize("content", [b"", b"\n  \n\n", b"[]"], ids=["empty", "blank-lines", "empty-array"])
def test_a_prompts_file_without_a_prompt_stops_the_run_before_anything_starts(
    content: bytes, idle_stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(content)
    rc = main(["--run-id", "no-prompt", "--prompts", str(empty)])
    _, err = capsys.readouterr()
    assert rc == 2, err
    assert f"{empty}: holds no prompt (empty, or blank lines only): there is nothing to generate" in err
    assert _started_nothing(idle_stack)
    # one empty file beside one with a prompt is a run of that prompt: not refused here
    full = tmp_path / "one.jsonl"
    full.write_text('{"prompt": "Hi"}\n')
    check_prompts([str(empty), str(full)])


def test_mapping_options_that_do_not_fit_stop_the_run_before_anything_starts(
    idle_stack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["--run-id", "bad-map", "--format", "dataset"])  # the old name of --input-format
    _, err = capsys.readouterr()
    assert rc == 2
    assert "--input-format dataset needs --prompt-field" in err
    assert _started_nothing(idle_stack)


def test_a_server_that_does_not_answer_exits_3_naming_it(
    idle_stack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{unused_port()}"
    started = time.monotonic()
    rc = main(["--run-id", "no-server", "--server", url, "--server-timeout", "3"])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert rc == 3, (out, err)
    assert f"error: inference server {url} did not answer within 3 s" in err
    assert "--local-llm" in err, "the message says what to do"
    assert elapsed < 30, f"took {elapsed:.0f} s for a 3 s timeout"
    assert _started_nothing(idle_stack), "no stack, no llama.cpp for a server given by the user"


def test_llama_cpp_on_a_port_where_a_server_already_listens_says_how_to_use_it(
    idle_stack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--local-llm (and the embedded default alike) on a port another process holds: no llama.cpp
    start that would fail on the port, but the hint to use that server with --server."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        rc = main(["--run-id", "taken", "--server", url, "--local-llm"])
    out, err = capsys.readouterr()
    assert rc == 3, (out, err)
    assert f"127.0.0.1:{port} (the embedded default), but the port is taken by" in err
    assert f"use it as it is: --server {url}" in err
    assert _started_nothing(idle_stack)


def test_serve_excludes_server_and_gpus_needs_serve(
    idle_stack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["--run-id", "both", "--serve", "/models/x", "--gpus", "2", "--server", "http://127.0.0.1:1"])
    assert rc == 2
    assert "--serve launches the servers the run uses" in capsys.readouterr().err
    assert main(["--run-id", "gpus", "--gpus", "2"]) == 2
    assert "--gpus goes with --serve MODEL_PATH" in capsys.readouterr().err
    assert main(["--run-id", "no-gpus", "--serve", "/models/x"]) == 2
    assert "--gpus is required" in capsys.readouterr().err
    assert _started_nothing(idle_stack)


def test_the_summary_gives_a_rate_only_for_a_run_made_in_one_invocation() -> None:
    from launch.run.summary import summary

    manifest = {
        "run_id": "r",
        "records": {"completions": 9, "errors": 1},
        "tokens": {"prompt": 100, "completion": 1000, "reasoning": 400},
        "expected": {"ids": 10},
        "missing": {"count": 0},
        "duplicates": {"records_dropped": 2},
        "by_finish_reason": {"stop": 9},
        "quality": {"results": 10, "classes": {"error": 1, "truncated": 1}},
    }
    fresh = summary(manifest, 10.0, 0.5, "/d")
    assert "tokens/s     100.0 (completion tokens / wall time)" in fresh
    assert "slots busy   50%" in fresh and "dataset      /d" in fresh
    # resumed: this invocation's wall time does not hold the tokens of the earlier ones
    resumed = summary(manifest, 10.0, None, "/d", resumed=True)
    assert "tokens/s     - (a resumed run" in resumed and "100.0" not in resumed
    assert "already complete" in summary(manifest, 4.0, None, "/d", already_done=True, resumed=True)
    assert "warning" not in resumed and "superseded" not in resumed


def test_the_summary_calls_attempts_a_regeneration_replaced_superseded_not_duplicates() -> None:
    """Issue 30 item 3: after regenerating 32 prompts the summary said "duplicates 32 records
    dropped"; those 32 are the older attempts the regeneration superseded."""
    from launch.run.summary import summary

    manifest = {
        "run_id": "r",
        "records": {"completions": 100, "errors": 0},
        "tokens": {"prompt": 100, "completion": 1000, "reasoning": 0},
        "expected": {"ids": 100},
        "missing": {"count": 0},
        "duplicates": {"records_dropped": 33, "older_attempts_dropped": 32, "superseded_records": 32},
        "by_finish_reason": {"stop": 100},
        "quality": {"results": 100, "classes": {}},
    }
    text = summary(manifest, 10.0, None, "/d", resumed=True)
    assert "  duplicates   1 records dropped by the export\n" in text
    assert "  superseded   32 records of 32 ids superseded by a regeneration (the dataset keeps" in text


def test_the_summary_of_a_resumed_halted_run_names_the_unusable_results_it_kept() -> None:
    """A small run halted by its gate had every prompt finished (in flight) at the bad settings:
    the re-run with the fix generates nothing and must not end as a plain "done"."""
    from launch.run.summary import summary

    manifest = {
        "run_id": "r",
        "records": {"completions": 60, "errors": 0},
        "tokens": {"prompt": 100, "completion": 1000, "reasoning": 400},
        "expected": {"ids": 60},
        "missing": {"count": 0},
        "duplicates": {"records_dropped": 0},
        "by_finish_reason": {"length": 59, "stop": 1},
        "quality": {
            "results": 60,
            "classes": {"degenerate": 58, "empty_content": 58, "reasoning_ate_budget": 58, "truncated": 59},
        },
    }
    text = summary(manifest, 10.0, None, "/d", resumed=True, after_halt=True)
    assert (
        "warning: 58 of 60 completions are unusable (degenerate: empty_content 58, reasoning_ate_budget 58)"
        in text
    )
    assert "truncated" not in text.split("warning")[1]
    assert (
        f"kafkagen regenerate {manifest['run_id']} --where quality=empty_content,reasoning_ate_budget" in text
    )
    assert "warning" not in summary(manifest, 10.0, None, "/d", resumed=True)


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ("[]", [], "no inference server"),
        (None, ["--server", "http://127.0.0.1:42090", "--server", "http://127.0.0.1:42090/"], "given twice"),
        (None, ["--server", "http://127.0.0.1:42090/v1"], "without /v1 (http://127.0.0.1:42090)"),
        ('["http://127.0.0.1:42090/v1/"]', [], "without /v1"),
    ],
)
def test_no_server_a_server_twice_or_an_openai_base_url_stop_the_run_before_anything_starts(
    idle_stack: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: str | None,
    args: list[str],
    message: str,
) -> None:
    if env is not None:
        monkeypatch.setenv("KAFKAGEN_SERVERS", env)
    rc = main(["--run-id", "bad-servers", *args])
    out, err = capsys.readouterr()
    assert rc == 2, err
    assert message in err
    assert "run bad-servers" not in out, "nothing was started"
    assert _started_nothing(idle_stack)


def test_the_jobs_children_run_from_the_repository_root() -> None:
    """The producer, consumers, sink and export run with the repository as their working directory,
    so their ``python -m`` imports this checkout's code, not that of another checkout sharing the
    virtual environment (a git worktree)."""
    from launch.run.job import REPO_ROOT

    assert (REPO_ROOT / "pyproject.toml").is_file()
    modules = ("producers/prompts.py", "consumers/generate.py", "sinks/s3.py", "sinks/export/__main__.py")
    assert all((REPO_ROOT / m).is_file() for m in modules)
