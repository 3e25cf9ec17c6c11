"""Issue 29's budgets on the main job (docs/budgets.md): ``kafkagen run --max-output-tokens N`` on
simulated servers halts through the quality gate's halt once the completions hold N output tokens,
exits 1 naming the budget and how to go on; the same command with a raised budget resumes and
exports every prompt exactly once. ``--deadline`` already passed halts it the same way."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from launch.stack import LocalStack
from streams.config import Settings
from streams.control import read_control
from streams.records import CompletionRecord
from tests.e2e.test_main_job_servers import GSM8K
from tests.helpers import REPO_ROOT, read_topic

pytestmark = pytest.mark.timeout(900)

PROMPTS = 150
BUDGET = 3_000
"""output tokens: a few dozen of the 150 answers at --max-tokens 256."""


def _run(args: list[str]) -> tuple[int, str]:
    done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    return done.returncode, done.stdout + done.stderr


def test_a_run_halts_at_its_token_budget_and_resumes_with_a_raised_one(
    local_stack: LocalStack, kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    prompts = tmp_path / "gsm8k.jsonl"
    prompts.write_text("".join(GSM8K.read_text().splitlines(keepends=True)[:PROMPTS]))
    run_id = f"e2e-budget-{unique}"
    settings = Settings(run_id=run_id)
    dataset = tmp_path / "dataset"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(prompts)]
    args += ["--prompt-field", "question", "--max-tokens", "256", "--no-thinking", "--no-preflight"]
    args += ["--gate.max-truncated", "1.0"]  # the simulator's answers pass 256 tokens half the time
    for url in user_servers:
        args += ["--server", url]
    args += ["--server-timeout", "60", "--to", str(dataset), "--no-progress", "--timeout", "480"]

    # 1. a deadline already passed halts before the budget does
    code, output = _run([*args, "--deadline", "2000-01-01T00:00:00Z"])
    assert code == 1, output[-4000:]
    assert "HALTED by its quality gate: deadline 2000-01-01T00:00:00+00:00 reached" in output, output[-4000:]
    assert "fix: give a later --deadline" in output, output[-4000:]
    code, output = _run([*args, "--deadline", "xyz"])
    assert code == 2 and "--deadline" in output and "2h" in output, output[-2000:]

    # 2. the token budget halts the run, resumably
    code, output = _run([*args, "--max-output-tokens", str(BUDGET)])
    assert code == 1, output[-4000:]
    assert f"HALTED by its quality gate: output token budget {BUDGET:,} reached: " in output, output[-4000:]
    assert "--max-output-tokens above" in output and "then run the same command with the fix" in output
    state = asyncio.run(read_control(settings))
    assert state.halted and state.gate is not None and state.gate.params["budget"] == "output_tokens"
    before = asyncio.run(read_topic(settings, settings.topics.completions, CompletionRecord))
    assert 0 < len(before) < PROMPTS, "the budget did not stop the run early"
    assert sum(c.usage.completion_tokens if c.usage is not None else 0 for c in before) >= BUDGET

    # 3. raised: the same command resumes it; every prompt exactly once, the ones before kept
    code, output = _run([*args, "--max-output-tokens", "100000000"])
    assert code == 0, output[-4000:]
    assert f"run {run_id} was halted (output token budget {BUDGET:,} reached" in output, output[-4000:]
    after = asyncio.run(read_topic(settings, settings.topics.completions, CompletionRecord))
    counts = Counter(c.id for c in after)
    assert len(counts) == PROMPTS and max(counts.values()) == 1, {i: n for i, n in counts.items() if n > 1}
    assert {c.id for c in before} <= set(counts)
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest["ok"] and manifest["records"]["ids"] == PROMPTS, manifest["records"]
    assert manifest["missing"]["count"] == 0 and manifest["duplicates"]["records_dropped"] == 0
