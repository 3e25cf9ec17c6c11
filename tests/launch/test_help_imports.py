"""``--help`` answers at once (issue 30 item 10): the command modules a help call loads import none
of the heavy machinery (HTTP clients, S3, Kafka's producer path, JSON Schema, the preflight, the
fleet). Checked on the modules a help imports, in a child interpreter, not by timing it; the wall
time of one help call is printed for the record (the target is in BENCHMARKS.md, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO_ROOT

HEAVY = ("aiohttp", "boto3", "botocore", "jsonschema", "faust", "httpx", "producers.publisher",
         "launch.serve.fleet", "launch.preflight.check", "launch.preflight.sample")  # fmt: skip
"""Modules that cost tenths of a second each to import and that no help needs."""

LIGHT_HELPS = {
    "run": "launch.run.cli",
    "produce": "producers.cli",
    "preflight": "launch.preflight.cli",
    "serve": "launch.serve.cli",
    "status": "launch.status.cli",
    "replay": "launch.regenerate.replay_cli",
    "gate": "launch.gate.cli",
    "runs": "launch.status.runs_cli",
    "scale": "launch.scale.cli",
    "export": "sinks.export.cli",
    "regenerate": "launch.regenerate.cli",
}
"""The commands whose help must stay light, and the module each imports."""


def loaded_by(module: str) -> set[str]:
    code = f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("command", sorted(LIGHT_HELPS))
def test_a_help_imports_no_heavy_module(command: str) -> None:
    loaded = loaded_by(LIGHT_HELPS[command])
    heavy = sorted(m for m in loaded if m in HEAVY)
    assert not heavy, f"kafkagen {command} --help imports {heavy}: import them where they are used"


def test_the_check_sees_a_heavy_import() -> None:
    assert "botocore" in loaded_by("sinks.store"), "the check must be able to fail"


def test_a_help_call_answers(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "launch.cli", "run", "--help"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    elapsed = time.monotonic() - started
    assert out.returncode == 0 and "--prompts" in out.stdout
    with capsys.disabled():
        print(f"\nkafkagen run --help: {elapsed:.2f} s wall")
