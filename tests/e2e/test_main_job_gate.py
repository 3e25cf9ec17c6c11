"""The held-back check of the operate issue, on the main job: GSM8K with thinking on and
``max_tokens`` 512 on simulated servers, where reasoning eats the budget of ~94% of the prompts.
The preflight refuses it before anything is published; forced past the preflight, the run's own
quality gate halts it within its first 200 results with the cause and the fix; the same command
with the fix resumes it, and the prompts done before the halt are not generated again."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from launch.stack import LocalStack
from streams.config import Settings
from streams.control import read_control
from streams.kafka import end_offsets
from streams.records import CompletionRecord, ErrorRecord
from tests.e2e.test_main_job_servers import GSM8K
from tests.helpers import REPO_ROOT, read_topic

pytestmark = pytest.mark.timeout(900)

PROMPTS = 400
"""GSM8K rows of the run: enough for the warm-up (200) to matter, few enough to finish quickly."""


def _run(args: list[str]) -> tuple[int, str]:
    done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    return done.returncode, done.stdout + done.stderr


def test_the_held_back_run_is_refused_then_halted_then_resumed_by_one_command(
    local_stack: LocalStack, kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    prompts = tmp_path / "gsm8k.jsonl"
    prompts.write_text("".join(GSM8K.read_text().splitlines(keepends=True)[:PROMPTS]))
    run_id = f"e2e-gate-{unique}"
    settings = Settings(run_id=run_id)
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(prompts)]
    args += ["--prompt-field", "question"]
    for url in user_servers:
        args += ["--server", url]
    args += ["--server-timeout", "60", "--to", str(tmp_path / "dataset"), "--no-progress", "--timeout", "480"]

    # 1. The preflight catches the configuration before anything is published.
    code, output = _run([*args, "--max-tokens", "512"])
    assert code == 2, output[-4000:]
    assert "reasoning_ate_budget" in output and "recommended: --max-tokens " in output, output[-4000:]
    assert not sum(asyncio.run(end_offsets(settings.kafka, settings.topics.prompts)).values())

    # 2. Forced past it, the run's gate halts the fleet within its first 200 results, on its own.
    code, output = _run([*args, "--max-tokens", "512", "--ignore-preflight"])
    assert code == 1, output[-4000:]
    halted = f"error: run {run_id} HALTED by its quality gate: reasoning_ate_budget in"
    assert halted in output, output[-4000:]
    assert "fix: raise --max-tokens" in output and "then run the same command with the fix" in output
    state = asyncio.run(read_control(settings))
    assert state.halted and state.gate is not None
    assert state.gate.counts.results <= 200, state.gate
    assert state.gate.params["max_tokens"] == 512
    assert "reasoning_ate_budget" in {b.cls for b in state.gate.breaches}
    before = asyncio.run(_results(settings))
    assert 0 < len(before) < PROMPTS, "halted: most prompts were never sent"

    # 3. The same command with the fix resumes the run and finishes it.
    code, output = _run([*args, "--max-tokens", "4096"])
    assert code == 0, output[-4000:]
    assert f"run {run_id} was halted (reasoning_ate_budget in" in output, output[-4000:]
    assert "resumed: gate epoch 1" in output, output[-4000:]
    written = sum(len(budgets) for budgets in before.values())  # the ones in flight at the halt too
    assert f"the {written} results written before the halt stay in the run" in output, output[-4000:]
    state = asyncio.run(read_control(settings))
    assert not state.halted and state.epoch == 1
    after = asyncio.run(_results(settings))
    assert len(after) == PROMPTS, "every prompt has a result"
    # A prompt done before the halt is not generated again: its only results are at 512 tokens.
    for record_id, budgets in before.items():
        assert after[record_id] == budgets, (record_id, after[record_id])
    resumed = [i for i, budgets in after.items() if i not in before]
    assert resumed and all(set(after[i]) == {4096} for i in resumed)


async def _results(settings: Settings) -> dict[str, list[int | None]]:
    """id → the ``max_tokens`` of each of its results on the completions and errors topics (None for
    a dead letter)."""
    found: dict[str, list[int | None]] = defaultdict(list)
    for record in await read_topic(settings, settings.topics.completions, CompletionRecord):
        found[record.id].append(record.params.get("max_tokens"))
    for error in await read_topic(settings, settings.topics.errors, ErrorRecord):
        found[error.id].append(None)
    return {k: sorted(v, key=lambda x: x or 0) for k, v in found.items()}


def test_a_run_shorter_than_the_warmup_is_judged_whole_at_its_end(
    local_stack: LocalStack, kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    """45 prompts, reasoning eating 512 tokens: the warm-up's early trip needs more than 50 bad
    results of 200 and never comes; the run must not end "done", exit 0, with ~95% empty answers."""
    prompts = tmp_path / "gsm8k.jsonl"
    prompts.write_text("".join(GSM8K.read_text().splitlines(keepends=True)[:45]))
    run_id = f"e2e-short-{unique}"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(prompts)]
    args += ["--prompt-field", "question", "--max-tokens", "512", "--ignore-preflight"]
    for url in user_servers:
        args += ["--server", url]
    args += ["--server-timeout", "60", "--to", str(tmp_path / "dataset"), "--no-progress", "--timeout", "300"]
    code, output = _run(args)
    assert code == 1, output[-4000:]
    assert f"error: run {run_id} fails its quality gate over all its " in output, output[-4000:]
    assert "(fewer than the warm-up's 200): reasoning_ate_budget in " in output
    assert "fix: raise --max-tokens" in output and "completions  45" in output, output[-4000:]
