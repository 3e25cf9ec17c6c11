"""Re-generation as a workflow (issue 14), on the main job with two simulated SGLang servers
already listening: a full run of GSM8K with thinking on and ``max_tokens`` 1024 (too small: the
simulator's reasoning eats the budget of most prompts; the gate is off so the run finishes);
``kafkagen regenerate`` of its ``reasoning_ate_budget`` ids at 4096 tokens, twice (the second
publishes nothing); the same main job command again, which generates only those; ``kafkagen
replay`` of the whole run under a new run id at another temperature. Each export is exact: every
prompt once, nothing missing, the right attempt and parameters kept."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launch.stack import LocalStack
from streams.config import Settings
from streams.control import read_control
from streams.kafka import end_offsets, topic_partitions
from streams.records import CompletionRecord
from streams.runs import naming
from tests.e2e.test_main_job_servers import GSM8K, _dataset
from tests.helpers import REPO_ROOT, read_topic

pytestmark = pytest.mark.timeout(1200)

PROMPTS = 40


def _run(args: list[str], *, gate: bool = False) -> tuple[int, str]:
    # the quality gate would halt a run whose budget is this small (tests/e2e/test_main_job_gate.py):
    # off unless asked, the run must finish with its too-small budget
    env = {**os.environ, "KAFKAGEN_GATE__ENABLED": "true" if gate else "false"}
    done = subprocess.run(
        args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False, env=env
    )
    return done.returncode, done.stdout + done.stderr


def _manifest(folder: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((folder / "manifest.json").read_text())
    return manifest


def _exact(manifest: dict[str, Any], ids: int) -> None:
    assert manifest["ok"], manifest
    assert manifest["records"]["ids"] == ids and manifest["missing"]["count"] == 0, manifest["records"]
    assert manifest["conflicts"]["count"] == 0 and manifest["foreign"]["count"] == 0


def test_regenerate_the_cut_off_ids_then_replay_the_whole_run(
    local_stack: LocalStack, kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    prompts = tmp_path / "gsm8k.jsonl"
    prompts.write_text("".join(GSM8K.read_text().splitlines(keepends=True)[:PROMPTS]))
    run_id = f"e2e-regen-{unique}"
    settings = naming.for_run(Settings(), run_id)
    servers = [a for url in user_servers for a in ("--server", url)]
    common = [*servers, "--server-timeout", "60", "--no-progress", "--timeout", "480", "--no-preflight"]
    dataset = tmp_path / "dataset"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(prompts)]
    args += ["--prompt-field", "question", "--max-tokens", "1024", "--to", str(dataset), *common]

    # 1. A full run whose budget is too small: most answers never start.
    code, output = _run(args)
    assert code == 0, output[-4000:]
    _exact(_manifest(dataset), PROMPTS)
    first = asyncio.run(read_topic(settings, settings.topics.completions, CompletionRecord))
    cut = {c.id for c in first if "reasoning_ate_budget" in c.quality}
    assert 0 < len(cut) < PROMPTS, f"{len(cut)} of {PROMPTS} cut off: the test needs some of each"

    # 2. Regenerate the cut-off ids with a larger budget; the same command again publishes nothing.
    regenerate = [sys.executable, "-m", "launch.cli", "regenerate", run_id]
    regenerate += ["--where", "quality=reasoning_ate_budget", "--max-tokens", "4096"]
    code, output = _run(regenerate)
    assert code == 0, output
    assert f"published {len(cut)} prompts to {settings.topics.prompts} ({len(cut)} as attempt 1)" in output, (
        output
    )
    published = sum(asyncio.run(end_offsets(settings.kafka, settings.topics.prompts)).values())
    code, output = _run(regenerate)
    assert code == 0 and "this command was published before" in output, output
    assert sum(asyncio.run(end_offsets(settings.kafka, settings.topics.prompts)).values()) == published
    state = asyncio.run(read_control(settings))
    [record] = state.regenerations.values()
    assert record.ids == len(cut) and record.attempts == {"1": len(cut)}
    assert record.where == {"quality": ["reasoning_ate_budget"]} and record.overrides == {"max_tokens": 4096}
    assert state.gate is not None and (state.gate.state, state.gate.epoch) == ("resumed", 1), state.gate
    # an export now would hold the older attempts of those ids: it says so, fails and leaves the
    # run's dataset as it was
    before = {p.name: p.read_bytes() for p in dataset.iterdir()}
    code, output = _run(
        [sys.executable, "-m", "launch.cli", "export", "--run-id", run_id, "--to", str(dataset)]
    )
    assert code == 1 and f"PENDING: {len(cut)} ids were re-published" in output, output
    assert f"is incomplete ({len(cut)} ids re-published and not generated yet): nothing was written" in output
    assert {p.name: p.read_bytes() for p in dataset.iterdir()} == before

    # 3. The same main job command again, its gate on: it publishes nothing new and generates only
    # those; the regeneration started a gate epoch, so the old cut-off results do not halt it
    code, output = _run(args, gate=True)
    assert code == 0, output[-4000:]
    manifest = _manifest(dataset)
    _exact(manifest, PROMPTS)
    assert manifest["attempts"]["kept"] == {"0": PROMPTS - len(cut), "1": len(cut)}, manifest["attempts"]
    assert manifest["attempts"]["records"]["1"] >= len(cut)
    assert [r["digest"] for r in manifest["attempts"]["regenerations"]] == [record.digest]
    rows = {r["id"]: r for r in _dataset(dataset)}
    assert len(rows) == PROMPTS
    for record_id, row in rows.items():
        regenerated = record_id in cut
        assert row["attempt"] == (1 if regenerated else 0), row
        assert row["params"]["max_tokens"] == (4096 if regenerated else 1024), row
        assert row["server"] in user_servers and row["model"] == "sim-qwen3"
    now = asyncio.run(read_topic(settings, settings.topics.completions, CompletionRecord))
    again = [c for c in now if c.attempt == 1]
    assert {c.id for c in again} == cut, "only the regenerated ids were generated again"
    assert sum(1 for c in again if "reasoning_ate_budget" in c.quality) < len(cut) / 2, "4096 tokens fit most"

    # 4. Replay the whole run under a new id at another temperature: every prompt, once, exact.
    replay_id = f"{run_id}-t07"
    replayed = tmp_path / "replayed"
    replay = [sys.executable, "-m", "launch.cli", "replay", run_id, "--as", replay_id, "--temperature", "0.7"]
    replay += ["--max-tokens", "4096", "--to", str(replayed), *common]
    code, output = _run(replay)
    assert code == 0, output[-4000:]
    assert f"run {replay_id} replays run {run_id}" in output, output[-4000:]
    # the parent's settings, but for what the command overrides (max_tokens, temperature)
    inherited = "its generation settings unless overridden: --thinking --generation.top-p 0.95"
    assert f"replay of run {run_id}: {inherited}" in output, output[-4000:]
    _exact(_manifest(replayed), PROMPTS)
    rows = {r["id"]: r for r in _dataset(replayed)}
    assert set(rows) == {c.id for c in first}
    assert all(r["run_id"] == replay_id and r["params"]["temperature"] == 0.7 for r in rows.values())
    # the regenerated ids keep their attempt (the replay generated both; the export keeps the latest)
    assert {i for i, r in rows.items() if r["attempt"] == 1} == cut

    # a replay of a run that does not exist: exit 2 before any consumer starts, no topic created
    missing = f"nope-{unique}"
    code, output = _run(
        [sys.executable, "-m", "launch.cli", "replay", missing, "--as", f"{missing}-2", *common]
    )
    assert (
        code == 2 and f"run {missing} has no prompts topic {missing}.prompts: nothing to replay" in output
    ), output
    assert not asyncio.run(topic_partitions(settings.kafka, f"{missing}.prompts"))


MT_BENCH = REPO_ROOT / "data" / "mt_bench" / "question.jsonl"


def test_mt_bench_second_turns_from_the_first_turns_answers(
    local_stack: LocalStack, kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    """MT-Bench's 2-turn questions: the main job answers turn 1; ``regenerate --next-turn`` builds
    each turn 2 from its question's turn-1 answer; the main job again generates them as attempt 1
    with turn 2; the export keeps the two-turn conversations, exact. Then --next-turn again finds
    no turn 3."""
    questions = MT_BENCH.read_text().splitlines(keepends=True)[:12]
    prompts = tmp_path / "mt_bench.jsonl"
    prompts.write_text("".join(questions))
    turns = {str(json.loads(q)["question_id"]): json.loads(q)["turns"] for q in questions}
    run_id = f"e2e-turns-{unique}"
    dataset = tmp_path / "dataset"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(prompts)]
    args += [
        "--max-tokens",
        "4096",
        "--to",
        str(dataset),
        *[a for u in user_servers for a in ("--server", u)],
    ]
    args += ["--server-timeout", "60", "--no-progress", "--timeout", "480", "--no-preflight"]
    code, output = _run(args)
    assert code == 0, output[-4000:]
    first = {r["id"]: r for r in _dataset(dataset)}
    usable = {i for i, r in first.items() if r["finish_reason"] == "stop" and r["content"].strip()}
    assert usable, "no usable turn-1 answer to continue"

    next_turn = [sys.executable, "-m", "launch.cli", "regenerate", run_id, "--next-turn"]
    code, output = _run(next_turn)
    assert code == 0 and f"published {len(usable)} prompts" in output, output
    code, output = _run(next_turn)  # nothing generated yet: the same command publishes nothing
    assert code == 0 and f"{len(usable)} prompts left alone" in output, output
    code, output = _run(args)
    assert code == 0, output[-4000:]
    _exact(_manifest(dataset), len(turns))
    rows = {r["id"]: r for r in _dataset(dataset)}
    for record_id in usable:
        row = rows[record_id]
        messages = row["prompt"]["messages"]
        assert row["attempt"] == 1 and row["prompt"]["metadata"]["extra"]["turn"] == 2, row
        assert [m["role"] for m in messages] == ["user", "assistant", "user"]
        assert messages[0]["content"] == turns[record_id][0] and messages[2]["content"] == turns[record_id][1]
        assert messages[1]["content"] == first[record_id]["content"], "turn 2 follows the turn-1 answer"
    assert all(rows[i]["attempt"] == 0 for i in set(turns) - usable)
    code, output = _run(next_turn)
    assert code == 0 and "0 have a next turn" in output, output
