"""Issue 15 on the main job: the bundled ShareGPT sample with tool calls (a JSON array file) runs
through ``kafkagen run`` on two simulated SGLang servers already listening, and the export is
written in every format at once, each read back with its users' library: Parquet with pyarrow,
OpenAI Batch lines with the openai package's types, chat rows as plain JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard
from openai.types.chat import ChatCompletion

from launch.stack import LocalStack
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.timeout(900)

SHAREGPT = REPO_ROOT / "data" / "sharegpt" / "glaive_toolcall_en_demo.json"


def test_the_sharegpt_sample_through_the_main_job_in_every_format(
    local_stack: LocalStack, kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    rows = json.loads(SHAREGPT.read_text())
    dataset = tmp_path / "dataset"
    args = [
        sys.executable,
        "-m",
        "launch.run",
        "--run-id",
        f"e2e-sharegpt-{unique}",
        "--prompts",
        str(SHAREGPT),
    ]
    args += [a for url in user_servers for a in ("--server", url)]
    args += [
        "--max-tokens",
        "4096",
        "--export-format",
        "jsonl,parquet,openai_batch,chat",
        "--to",
        str(dataset),
    ]
    args += ["--server-timeout", "60", "--no-progress", "--timeout", "600", "--no-preflight"]
    env = {**os.environ, "KAFKAGEN_GATE__ENABLED": "false"}  # the simulator's answers are judged elsewhere
    done = subprocess.run(
        args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=800, check=False, env=env
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest["ok"] and manifest["records"]["ids"] == len(rows) and manifest["missing"]["count"] == 0

    table = pq.read_table(sorted(dataset.glob("completions-*.parquet")))
    assert table.num_rows == manifest["records"]["completions"]
    with_tools = [
        json.loads(m)
        for m, t in zip(table["messages"].to_pylist(), table["tools"].to_pylist(), strict=True)
        if t
    ]
    assert with_tools, "the sample's tool definitions reach the prompts"
    assert any(m.get("role") == "tool" for messages in with_tools for m in messages), (
        "observations as tool turns"
    )

    batch = [json.loads(line) for f in sorted(dataset.glob("*.jsonl")) for line in f.read_text().splitlines()]
    answered = [b for b in batch if b["response"] is not None]
    assert len(answered) == manifest["records"]["completions"]
    for line in answered:
        assert line["custom_id"] and line["response"]["status_code"] == 200
        ChatCompletion.model_validate(line["response"]["body"])

    chats = []
    for shard in sorted(dataset.glob("chat-*.jsonl.zst")):
        with zstandard.open(shard, "rt", encoding="utf-8") as f:
            chats += [json.loads(line) for line in f if line.strip()]
    assert len(chats) == manifest["records"]["completions"]
    assert all(c["messages"][-1]["role"] == "assistant" for c in chats)
