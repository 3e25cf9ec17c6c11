"""The main job on servers that are not SGLang (issue 29): two simulators passing for vLLM 0.11.0
(``--persona vllm``: vLLM's endpoints, ``vllm:*`` load series, no slot count) and one passing for
a generic OpenAI-compatible server (``--persona openai``: ``/v1/models`` and chat only, so the
consumer's window adapts from latency and errors). ``kafkagen run --server URL ...`` must
recognise each kind and export every prompt exactly once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from launch.stack import LocalStack
from tests.e2e.test_main_job_servers import _dataset, _rows
from tests.helpers import REPO_ROOT, simulators

pytestmark = pytest.mark.timeout(600)

ROWS = 30


def _personas(tmp_path: Path, persona: str, count: int) -> Iterator[list[str]]:
    args = ("--persona", persona, "--time-scale", "50", "--served-model-name", "sim-qwen3")
    with simulators(tmp_path, count, *args, name=persona) as urls:
        yield urls


@pytest.fixture
def vllm_servers(tmp_path: Path) -> Iterator[list[str]]:
    """Two vLLM-persona simulators already listening."""
    yield from _personas(tmp_path, "vllm", 2)


@pytest.fixture
def generic_server(tmp_path: Path) -> Iterator[list[str]]:
    """One generic OpenAI-compatible simulator already listening."""
    yield from _personas(tmp_path, "openai", 1)


def _run(servers: list[str], tmp_path: Path, run_id: str) -> tuple[str, Path, list[dict[str, object]]]:
    """``kafkagen run`` of the first GSM8K rows on ``servers``: its output, dataset folder and rows."""
    rows = _rows(ROWS)
    prompts = tmp_path / "gsm8k.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dataset = tmp_path / "dataset"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(prompts)]
    args += ["--prompt-field", "question", "--keep-field", "answer"]
    for url in servers:
        args += ["--server", url]
    args += ["--server-timeout", "60", "--to", str(dataset), "--no-progress", "--timeout", "480"]
    done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=540, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    return output, dataset, rows


def _exact(dataset: Path, rows: list[dict[str, object]], servers: list[str]) -> list[dict[str, object]]:
    """Every row exactly once in the exported dataset, nothing missing, no error record."""
    completions = _dataset(dataset)
    ids = Counter(r["id"] for r in completions)
    assert len(ids) == len(rows) and max(ids.values()) == 1, ids
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest["missing"]["count"] == 0 and manifest["records"]["errors"] == 0, manifest
    questions = {str(r["question"]) for r in rows}
    assert {str(c["prompt"]["messages"][-1]["content"]) for c in completions} == questions
    assert {c["server"] for c in completions} <= set(servers)
    return completions


def test_the_main_job_on_two_vllm_servers_exports_every_prompt_once(
    local_stack: LocalStack, kafka: str, s3: str, vllm_servers: list[str], tmp_path: Path, unique: str
) -> None:
    output, dataset, rows = _run(vllm_servers, tmp_path, f"e2e-vllm-{unique}")
    for url in vllm_servers:
        assert re.search(rf"^server {re.escape(url)}: vllm\b.*model sim-qwen3", output, re.M), output
    completions = _exact(dataset, rows, vllm_servers)
    for c in completions:  # vLLM splits the thinking, unless max_tokens cut it before </think>
        cut = c["finish_reason"] == "length" and str(c["content"]).startswith("<think>")
        assert c["reasoning_content"] or cut, c


def test_the_main_job_on_a_generic_openai_server_exports_every_prompt_once(
    local_stack: LocalStack, kafka: str, s3: str, generic_server: list[str], tmp_path: Path, unique: str
) -> None:
    output, dataset, rows = _run(generic_server, tmp_path, f"e2e-openai-{unique}")
    url = re.escape(generic_server[0])
    assert re.search(rf"^server {url}: openai\b.*model sim-qwen3", output, re.M), output
    _exact(dataset, rows, generic_server)
