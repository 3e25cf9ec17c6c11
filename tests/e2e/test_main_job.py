"""The main job end to end (``python -m launch.run``) on 20 of the bundled real prompts, the real
local stack and llama.cpp servers: the exported dataset holds every prompt id exactly once.

Crashes of the pipeline's processes (consumer, sink, producer, inference server, a broker, S3) are
the fault audit's (tests/e2e/test_chaos.py, one fixed seed); a whole-Kafka outage under a consumer
and under the sink is tested on a broker of the test's own (tests/consumers/test_guarantees.py,
tests/sinks/test_s3_sink.py); supervisord restarting a killed program is tests/launch/test_supervise.py's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import zstandard

from launch.stack import LocalStack
from producers.sample import DEMO_FILE
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.timeout(900)


def _local_llm() -> list[str]:
    """The run's llama.cpp servers are the stack's (the ``llm`` fixture), on the ports the tests'
    settings name. Without ``KAFKAGEN_SERVERS`` that is the embedded default, started by the job
    itself; with it (a stack on other ports) the job would use them as servers already running,
    with the production budget, so ``--local-llm`` asks for the embedded llama.cpp there."""
    return ["--local-llm"] if "KAFKAGEN_SERVERS" in os.environ else []


def _start_run(run_id: str, prompts: Path, log: Path) -> subprocess.Popen[str]:
    # The run gets the test's environment, so KAFKAGEN_* overrides (other ports) reach it too.
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "launch.run",
            "--run-id",
            run_id,
            "--prompts",
            str(prompts),
            "--no-progress",
            *_local_llm(),
            "--timeout",
            "800",  # pytest's limit is 900 s
        ],
        cwd=REPO_ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )


def _dataset_ids(dataset: Path) -> Counter[str]:
    ids: Counter[str] = Counter()
    for shard in sorted(dataset.glob("*.jsonl.zst")):
        with zstandard.open(shard, "rt", encoding="utf-8") as f:
            ids.update(json.loads(line)["id"] for line in f if line.strip())
    return ids


def _input_ids(prompts: Path) -> set[str]:
    return {json.loads(line)["id"] for line in prompts.read_text().splitlines() if line.strip()}


def _finish(proc: subprocess.Popen[str], log: Path, local_stack: LocalStack, run_id: str) -> dict[str, Any]:
    rc = proc.wait(860)
    output = log.read_text()
    assert rc == 0, output[-4000:]
    dataset = local_stack.home / "datasets" / run_id
    manifest: dict[str, Any] = json.loads((dataset / "manifest.json").read_text())
    manifest["_output"] = output
    manifest["_dataset"] = dataset
    return manifest


def _assert_exactly_once(manifest: dict[str, Any], expected: set[str]) -> None:
    ids = _dataset_ids(manifest["_dataset"])
    assert set(ids) == expected
    assert max(ids.values()) == 1, "an id appears twice in the dataset"
    assert manifest["missing"]["count"] == 0
    assert manifest["expected"]["ids"] == len(expected)
    assert manifest["records"]["ids"] == len(expected)


def _subset(tmp_path: Path, step: int) -> Path:
    lines = DEMO_FILE.read_text().splitlines()[::step]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_happy_path_on_the_bundled_real_prompts(
    local_stack: LocalStack, kafka: str, s3: str, llm: list[str], tmp_path: Path, unique: str
) -> None:
    run_id = f"e2e-happy-{unique}"
    prompts = _subset(tmp_path, 5)  # 20 prompts, 6 of them with tools
    log = tmp_path / "run.log"
    manifest = _finish(_start_run(run_id, prompts, log), log, local_stack, run_id)
    expected = _input_ids(prompts)
    assert len(expected) == 20
    _assert_exactly_once(manifest, expected)
    tokens = manifest["tokens"]
    assert tokens["prompt"] > 0
    assert tokens["completion"] > 0
    # The printed summary is the manifest's.
    out = manifest["_output"]
    assert re.search(rf"^  completions  {manifest['records']['completions']}$", out, re.M)
    assert re.search(rf"^  errors       {manifest['records']['errors']}$", out, re.M)
    assert f"completion {tokens['completion']}," in out
    assert json.dumps(manifest["by_finish_reason"], sort_keys=True) in out
    # Tool-calling prompts kept their tools and the completions carry the prompt.
    with zstandard.open(next(manifest["_dataset"].glob("completions-*.jsonl.zst")), "rt") as f:
        rows = [json.loads(line) for line in f]
    assert any(r["prompt"]["tools"] for r in rows)
    assert all(r["usage"]["completion_tokens"] > 0 for r in rows)
