"""``kafkagen serve --engine vllm``: the vLLM 0.11.0 command line, checked against the flags read
from vLLM's source (tests/fixtures/vllm/0.11.0/server_flags.json), and the fleet supervisor
starting it (no GPU here: the real command fails for want of vLLM, the vLLM-persona simulator
stands in for the ready case) on ports 27150-27159 of 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launch.cli import main
from launch.serve.cli import spec_from_options
from launch.serve.fleet import Fleet
from launch.serve.sglang_args import server_argv
from launch.serve.spec import FleetSpec, Speculative
from launch.serve.vllm_args import VLLM_HEALTH_PATH, VLLM_SERVER_COMMAND, vllm_args
from streams.errors import ConfigError

pytestmark = pytest.mark.xdist_group("serve-ports")

FLAGS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "0.11.0" / "server_flags.json"

EVERYTHING = FleetSpec(
    model_path="/dev/shm/models/Qwen3-8B",
    gpus=(0, 2),
    port=8000,
    host="0.0.0.0",
    served_model_name="Qwen/Qwen3-8B",
    reasoning_parser="qwen3",
    tool_call_parser="hermes",
    metrics=False,
    cache_report=True,
    context_length=32768,
    mem_fraction_static=0.9,
    server_args=("--tensor-parallel-size", "1"),
    engine="vllm",
    server_command=VLLM_SERVER_COMMAND,
)


def _split(argv: list[str]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for word in argv:
        if word.startswith("--"):
            out.append((word, []))
        else:
            assert out, f"a value before any flag: {word!r}"
            out[-1][1].append(word)
    return out


def test_every_emitted_flag_is_vllms_and_takes_a_value_exactly_when_it_should() -> None:
    flags = json.loads(FLAGS.read_text())
    assert flags["vllm_version"] == "0.11.0"
    pairs = _split(vllm_args(EVERYTHING, 2, 8001))
    emitted = [flag for flag, _ in pairs]
    for flag in ("--model", "--served-model-name", "--host", "--port", "--reasoning-parser",
                 "--enable-auto-tool-choice", "--tool-call-parser", "--disable-log-stats",
                 "--enable-prompt-tokens-details", "--max-model-len", "--gpu-memory-utilization",
                 "--tensor-parallel-size"):  # fmt: skip
        assert flag in emitted, flag
    for flag, values in pairs:
        assert flag in flags["flags"], f"vllm 0.11.0 has no {flag}"
        assert len(values) == (1 if flags["flags"][flag]["takes_value"] else 0), (flag, values)
    assert not any(flag.startswith("--enable-metrics") or flag == "--model-path" for flag in emitted)


def test_the_vllm_command_line_carries_the_spec() -> None:
    argv = server_argv(EVERYTHING, 1, python="python3")
    assert argv[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    pairs = dict(_split(argv[3:]))
    assert pairs["--port"] == ["8001"] and pairs["--model"] == ["/dev/shm/models/Qwen3-8B"]
    assert pairs["--max-model-len"] == ["32768"] and pairs["--gpu-memory-utilization"] == ["0.9"]
    assert argv[-2:] == ["--tensor-parallel-size", "1"]
    bare = vllm_args(FleetSpec(model_path="m", gpus=(0,), cache_report=False, engine="vllm"), 0, 8000)
    assert bare == ["--model", "m", "--host", "127.0.0.1", "--port", "8000"]
    with pytest.raises(ConfigError, match="--speculative-config"):
        vllm_args(FleetSpec(model_path="m", gpus=(0,), speculative=Speculative(algorithm="EAGLE3")), 0, 1)
    with pytest.raises(ConfigError, match="--engine"):
        FleetSpec(model_path="m", gpus=(0,), engine="tgi")


def test_engine_vllm_picks_vllms_command_and_health_path_and_round_trips() -> None:
    unset = ("served_model_name", "reasoning_parser", "tool_call_parser", "context_length",
             "mem_fraction_static", "speculative_algorithm", "speculative_draft_model_path",
             "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
             "health_path", "server_command", "copy_model_to")  # fmt: skip
    options: dict[str, Any] = dict.fromkeys(unset)
    options |= {"fleet_name": "fleet", "gpus": "1", "port": 8000, "host": "127.0.0.1", "metrics": True}
    options |= {"cache_report": True, "server_args": (), "ready_timeout_s": 60.0, "engine": "vllm"}
    spec = spec_from_options("m", options)
    assert (spec.engine, spec.server_command, spec.health_path) == (
        "vllm",
        VLLM_SERVER_COMMAND,
        VLLM_HEALTH_PATH,
    )
    assert FleetSpec.from_json(spec.to_json()) == spec
    sglang = spec_from_options("m", options | {"engine": "sglang"})
    assert sglang.server_command == FleetSpec("m", (0,)).server_command
    assert sglang.health_path == "/health_generate"
    old = sglang.to_json()
    del old["engine"]  # a fleet.json written before --engine
    assert FleetSpec.from_json(old).engine == "sglang"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    stack_home = tmp_path / "stack"
    monkeypatch.setenv("KAFKAGEN_HOME", str(stack_home))
    yield stack_home
    for folder in (stack_home / "serve").glob("*"):
        Fleet(stack_home, folder.name).down(echo=lambda _line: None)


def test_the_supervisor_starts_the_vllm_command_line(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default vLLM command under supervisord: here, without vLLM, it fails naming the GPU and
    the log's error line; supervisord's program is the command line built above."""
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: its server would start for real")
    code = main(["serve", "up", str(tmp_path), "--engine", "vllm", "--gpus", "1", "--port", "27150",
                 "--reasoning-parser", "qwen3", "--ready-timeout", "60"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3, err
    assert "gpu-0 (http://127.0.0.1:27150) failed to start" in err, err
    assert "'vllm.entrypoints.openai.api_server' (ModuleNotFoundError: No module named 'vllm')" in err, err
    conf = Fleet(home, "fleet").supervisor.conf.read_text()
    assert f"-m vllm.entrypoints.openai.api_server --model {tmp_path} " in conf, conf
    assert "--port 27150 --reasoning-parser qwen3 --enable-prompt-tokens-details" in conf, conf


def test_a_vllm_fleet_is_ready_by_vllms_health_path(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    simulator = (
        "{python} -m simulator --persona vllm --port {port} --served-model-name {model} --time-scale 50"
    )
    code = main(["serve", "up", str(tmp_path), "--engine", "vllm", "--gpus", "1", "--port", "27151",
                 "--server-command", simulator, "--ready-timeout", "60", "--no-preflight"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "gpu-0 ready after" in out.out
    assert json.loads(Fleet(home, "fleet").record_path.read_text())["spec"]["health_path"] == "/health"
