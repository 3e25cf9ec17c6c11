"""The fleet spec, the SGLang command line checked against SGLang's own server arguments, the
command template, and supervisord's ``environment=`` quoting (pure: no processes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from supervisor.datatypes import dict_of_key_value_pairs

from launch.serve.sglang_args import server_argv, sglang_args
from launch.serve.spec import FleetSpec, Speculative, parse_gpus
from launch.supervise import environment_line
from streams.config import check_server_url
from streams.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
VERSIONS = ("0.5.20", "0.5.23")

EVERYTHING = FleetSpec(
    model_path="/dev/shm/models/Qwen3-8B",
    gpus=(0, 2, 5),
    port=31000,
    host="0.0.0.0",
    served_model_name="Qwen/Qwen3-8B",
    reasoning_parser="qwen3",
    tool_call_parser="qwen25",
    metrics=True,
    cache_report=True,
    context_length=32768,
    mem_fraction_static=0.85,
    speculative=Speculative(
        algorithm="EAGLE3",
        draft_model_path="/dev/shm/models/Qwen3-8B-eagle3",
        num_steps=3,
        eagle_topk=1,
        num_draft_tokens=4,
    ),
    server_args=("--tp-size", "1", "--enable-priority-scheduling"),
)


def _flags(version: str) -> dict[str, dict[str, Any]]:
    data = json.loads((FIXTURES / version / "server_args.json").read_text())
    assert data["sglang_version"] == version
    flags = data["flags"]
    assert isinstance(flags, dict)
    return flags


def _split(argv: list[str]) -> list[tuple[str, list[str]]]:
    """(flag, the words after it up to the next flag) for each flag of ``argv``."""
    out: list[tuple[str, list[str]]] = []
    for word in argv:
        if word.startswith("--"):
            out.append((word, []))
        else:
            assert out, f"a value before any flag: {word!r}"
            out[-1][1].append(word)
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_every_emitted_flag_exists_in_sglang_and_takes_a_value_exactly_when_it_should(version: str) -> None:
    flags = _flags(version)
    argv = sglang_args(EVERYTHING, 5, 31002)
    pairs = _split(argv)
    emitted = [flag for flag, _ in pairs]
    # the spec sets every option: each one shows up
    for flag in ("--model-path", "--served-model-name", "--host", "--port", "--reasoning-parser",
                 "--tool-call-parser", "--enable-metrics", "--enable-cache-report", "--context-length",
                 "--mem-fraction-static", "--speculative-algorithm", "--speculative-draft-model-path",
                 "--speculative-num-steps", "--speculative-eagle-topk",
                 "--speculative-num-draft-tokens", "--tp-size", "--enable-priority-scheduling"):  # fmt: skip
        assert flag in emitted, flag
    for flag, values in pairs:
        assert flag in flags, f"sglang {version} has no {flag}"
        takes_value = flags[flag]["takes_value"]
        assert len(values) == (1 if takes_value else 0), (flag, values, flags[flag])
        choices = flags[flag]["choices"]
        if choices is not None and values:
            assert values[0] in [str(c) for c in choices], (flag, values, choices)


def test_the_command_line_carries_the_spec() -> None:
    argv = sglang_args(EVERYTHING, 2, 31001)
    pairs = dict(_split(argv))
    assert pairs["--port"] == ["31001"] and pairs["--host"] == ["0.0.0.0"]
    assert pairs["--mem-fraction-static"] == ["0.85"] and pairs["--context-length"] == ["32768"]
    assert argv[-3:] == ["--tp-size", "1", "--enable-priority-scheduling"]  # extras last, verbatim
    bare = sglang_args(FleetSpec(model_path="m", gpus=(0,), metrics=False, cache_report=False), 0, 30000)
    assert bare == ["--model-path", "m", "--host", "127.0.0.1", "--port", "30000"]


def test_the_fixture_flags_are_sglangs() -> None:
    # a few facts read by hand in the wheels (arg_groups/fields/*.py, server_args.py)
    for version in VERSIONS:
        flags = _flags(version)
        assert len(flags) > 400
        assert flags["--enable-metrics"]["takes_value"] is False
        assert flags["--model-path"]["takes_value"] is True
        assert flags["--tensor-parallel-size"] == flags["--tp-size"]  # an alias
        assert "--no-such-flag" not in flags
        # the parsers' choices: "auto" + the registries' keys (parser/reasoning_parser.py
        # ReasoningParser.DetectorMap, function_call/function_call_parser.py ToolCallParserEnum);
        # the compose file's qwen3 / qwen25 among them
        reasoning = flags["--reasoning-parser"]["choices"]
        assert reasoning[0] == "auto" and {"qwen3", "deepseek-r1", "gpt-oss"} <= set(reasoning)
        assert {"qwen25", "llama3", "hermes"} <= set(flags["--tool-call-parser"]["choices"])


def test_template_placeholders() -> None:
    spec = FleetSpec(
        model_path="/m",
        gpus=(3, 4),
        port=41090,
        server_command="{python} -m simulator --port {port} --model-path {model} --name={name} --gpu {gpu}",
    )
    expected = [sys.executable, "-m", "simulator", "--port", "41091", "--model-path", "/m", "--name=gpu-4"]
    assert server_argv(spec, 1) == [*expected, "--gpu", "4"]
    default = FleetSpec(model_path="/m", gpus=(0,), reasoning_parser="qwen3")
    assert server_argv(default, 0, python="python3") == [
        "python3", "-m", "sglang.launch_server", *sglang_args(default, 0, 30000)
    ]  # fmt: skip
    with pytest.raises(ConfigError, match=r"unknown placeholder\(s\) \{gpus\}, \{mdoel\}"):
        server_argv(FleetSpec(model_path="/m", gpus=(0,), server_command="run {mdoel} {gpus} {port}"), 0)
    with pytest.raises(ConfigError, match="a word of its own"):
        server_argv(FleetSpec(model_path="/m", gpus=(0,), server_command="run --x={args}"), 0)
    with pytest.raises(ConfigError, match="server-command"):
        server_argv(FleetSpec(model_path="/m", gpus=(0,), server_command="run 'unclosed"), 0)


def test_gpus_ports_and_spec_round_trip() -> None:
    assert parse_gpus("7") == (0, 1, 2, 3, 4, 5, 6)
    assert parse_gpus("0,2,5") == (0, 2, 5)
    for bad in ("0", "-1,2", "a", "1,1", ""):
        with pytest.raises(ConfigError, match="--gpus"):
            parse_gpus(bad)
    assert EVERYTHING.urls == ["http://127.0.0.1:31000", "http://127.0.0.1:31001", "http://127.0.0.1:31002"]
    assert FleetSpec.from_json(json.loads(json.dumps(EVERYTHING.to_json()))) == EVERYTHING
    with pytest.raises(ConfigError, match="fleet name"):
        FleetSpec(model_path="m", gpus=(0,), name="a/b")


def test_server_urls_of_every_kind_of_host_are_valid_urls() -> None:
    for host, url in [("0.0.0.0", "http://127.0.0.1:31000"), ("::", "http://[::1]:31000"),
                      ("::1", "http://[::1]:31000"), ("fd00::7", "http://[fd00::7]:31000"),
                      ("gpu-0", "http://gpu-0:31000")]:  # fmt: skip
        spec = FleetSpec(model_path="m", gpus=(0,), port=31000, host=host)
        assert spec.urls == [url]
        assert check_server_url(url) == url


def test_environment_line_is_read_back_by_supervisord_as_written() -> None:
    env = [
        ("CUDA_VISIBLE_DEVICES", "3"),
        ("A", 'x "q" y, z=1'),
        ("B", "it's 100%"),
        ("C", ""),
        ("D", "/a b:c"),
    ]
    line = environment_line(env)
    # supervisord expands %(name)s first (so %% is one %), then splits the pairs
    assert dict_of_key_value_pairs(line.replace("%%", "%")) == dict(env)
    for bad in ("both \" and '", '"starts with a quote', "new\nline", "a ;comment", "a\t#comment"):
        with pytest.raises(ConfigError, match="cannot be written"):
            environment_line([("X", bad)])
