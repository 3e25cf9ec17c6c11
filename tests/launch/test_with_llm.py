"""``scripts/with-llm.sh``: whether ``scripts/run.sh ARGS`` builds llama.cpp (~10 minutes once)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("env", "args", "needed"),
    [
        ({}, [], "1"),  # the embedded default
        ({}, ["--prompts", "x.jsonl", "--max-tokens", "256"], "1"),
        ({}, ["--server", "http://localhost:30000"], "0"),
        ({}, ["--server=http://localhost:30000"], "0"),
        ({}, ["--serve", "/m", "--gpus", "7"], "0"),
        ({}, ["--servers", '["http://gpu-0:30000"]'], "0"),  # the servers setting as a flag
        ({}, ['--servers=["http://gpu-0:30000"]'], "0"),
        ({"KAFKAGEN_SERVERS": '["http://gpu-0:30000"]'}, [], "0"),
        ({}, ["--help"], "0"),  # help needs no server
        ({}, ["-h"], "0"),
        ({}, ["--settings-help"], "0"),
        ({}, ["--server", "http://127.0.0.1:30000", "--local-llm"], "1"),  # asked for
    ],
)
def test_llama_cpp_is_built_only_for_the_embedded_default_or_when_asked(
    env: dict[str, str], args: list[str], needed: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KAFKAGEN_")}
    done = subprocess.run(
        ["bash", "scripts/with-llm.sh", *args], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == needed
