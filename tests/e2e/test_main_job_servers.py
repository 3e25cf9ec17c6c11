"""The main job on a GPU host's servers (issue 12): two SGLang-API simulators already listening on
127.0.0.1, started here as a user's servers would be, and GSM8K's raw rows mapped by the
producer's options on ``run``; and ``run --serve``, which launches the fleet itself. The job must
use the servers as they are (no llama.cpp), with the production generation defaults."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import psutil
import pyarrow.parquet as pq
import pytest
import zstandard

from launch.serve.fleet import Fleet
from launch.stack import LocalStack
from streams.quality import degenerate
from tests.helpers import REPO_ROOT, unused_port

pytestmark = pytest.mark.timeout(600)

GSM8K = REPO_ROOT / "data" / "gsm8k" / "test.jsonl"
FLEET_SIMULATOR = "{python} -m simulator --port {port} --model-path {model} --time-scale 50"
"""``kafkagen serve``'s server command template with the simulator standing in for SGLang."""


def _rows(count: int) -> list[dict[str, Any]]:
    lines = GSM8K.read_text().splitlines()[:count]
    return [json.loads(line) for line in lines]


def _dataset(folder: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for shard in sorted(folder.glob("completions-*.jsonl.zst")):
        with zstandard.open(shard, "rt", encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    return rows


def _llama_servers_on(ports: set[int]) -> list[int]:
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any("llama-server" in part for part in cmd) and any(str(p) in cmd for p in ports):
            pids.append(proc.info["pid"])
    return pids


def test_servers_already_running_and_raw_gsm8k_rows(
    local_stack: LocalStack, kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    rows = _rows(20)
    prompts = tmp_path / "gsm8k-20.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_id = f"e2e-servers-{unique}"
    dataset = tmp_path / "dataset"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(prompts)]
    args += ["--prompt-field", "question", "--keep-field", "answer", "--tag", "gsm8k"]
    for url in user_servers:
        args += ["--server", url]
    args += ["--server-timeout", "60", "--to", str(dataset), "--no-progress", "--timeout", "480"]
    done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=540, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]

    # The servers were used as they are: described, not started.
    for url in user_servers:
        assert re.search(rf"^server {re.escape(url)}: sglang .*model sim-qwen3, 8 slots", output, re.M), (
            output
        )
    ports = {int(u.rsplit(":", 1)[1]) for u in user_servers}
    assert not [p for p in ports if local_stack.processes.pid_path(f"llm-{p}").exists()], "an llm pid file"
    assert not _llama_servers_on(ports)
    assert "llm-" not in output

    # Every row once, mapped by the options, with the production generation defaults.
    completions = _dataset(dataset)
    ids = Counter(r["id"] for r in completions)
    assert len(ids) == 20 and max(ids.values()) == 1, ids
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest["missing"]["count"] == 0 and manifest["records"]["errors"] == 0
    answers = {r["question"]: r["answer"] for r in rows}
    for record in completions:
        prompt = record["prompt"]
        question = prompt["messages"][-1]["content"]
        assert prompt["metadata"]["extra"] == {"answer": answers[question]}
        assert "gsm8k" in prompt["metadata"]["tags"]
        assert record["params"]["max_tokens"] == 4096, record["params"]
        assert record["params"]["chat_template_kwargs"]["enable_thinking"] is True
        assert record["reasoning_content"], "thinking on: the simulator reasons"
    # Only the user's servers generated (not always both: at 50x the first consumer to join the
    # group can finish all 20 before the second one joins).
    assert {r["server"] for r in completions} <= set(user_servers)

    # The same command on the finished run: no preflight, no consumer, no sink, no request; the
    # dataset is exported again, whole.
    received = {url: _received(url) for url in user_servers}
    again = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-4000:]
    assert f"run {run_id}: already complete" in output, output
    assert "preflight:" not in output and "consumers and sink started" not in output, output
    assert {url: _received(url) for url in user_servers} == received
    assert len(_dataset(dataset)) == 20

    # A row added to the input since: the run is not finished, that row is generated.
    with prompts.open("a") as f:
        f.write(json.dumps(_rows(21)[20]) + "\n")
    grown = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=480, check=False)
    output = grown.stdout + grown.stderr
    assert grown.returncode == 0, output[-4000:]
    assert "already complete" not in output and "consumers and sink started" in output, output
    ids = Counter(r["id"] for r in _dataset(dataset))
    assert len(ids) == 21 and max(ids.values()) == 1, ids


def _received(url: str) -> int:
    """Generation requests the simulator at ``url`` has received since it started."""
    stats = httpx.get(url + "/simulator/stats", timeout=10).json()
    return int(stats["requests_received"])


def _free_ports(count: int) -> int:
    """A port P with P .. P+count-1 all free on 127.0.0.1 (``KAFKAGEN_TEST_SERVER_PORT`` + 10 when
    set: a machine shared with other test runs)."""
    base = int(os.environ.get("KAFKAGEN_TEST_SERVER_PORT", "0"))
    return base + 10 if base else unused_port(count)


def test_run_serve_launches_a_fleet_runs_the_preflight_and_runs_on_it(
    local_stack: LocalStack, kafka: str, s3: str, tmp_path: Path, unique: str
) -> None:
    """``run --serve MODEL --gpus 2``: the fleet is launched under supervisord (the simulator stands
    in for SGLang through --server-command), its preflight run on the job's input, and used; a
    budget that reasoning eats stops the job before anything is published, with the fix; the fleet
    outlives the job."""
    prompts = tmp_path / "gsm8k-12.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in _rows(12)))
    port, fleet_name = _free_ports(2), f"e2e-{unique}"
    run_id = f"e2e-serve-{unique}"
    dataset = tmp_path / "dataset"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(prompts)]
    args += ["--prompt-field", "question", "--serve", str(tmp_path / "Qwen3-8B"), "--gpus", "2"]
    args += ["--port", str(port), "--fleet", fleet_name, "--server-command", FLEET_SIMULATOR]
    args += ["--ready-timeout", "120", "--to", str(dataset), "--no-progress", "--timeout", "400"]
    fleet = Fleet(local_stack.home, fleet_name)
    try:
        failed = subprocess.run(
            [*args, "--max-tokens", "512"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
        )
        output = failed.stdout + failed.stderr
        assert failed.returncode == 2, output[-4000:]
        assert "gpu-0 ready after" in output and "gpu-1 ready after" in output, output
        assert "gpu-0: reasoning_ate_budget in" in output and "gpu-1: reasoning_ate_budget in" in output
        assert "fix: raise --max-tokens" in output and "recommended: --max-tokens " in output
        assert "consumers and sink started" not in output, "the preflight comes before anything starts"
        pids = {s.program: s.pid for s in fleet.status()}

        done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=480)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-4000:]
        # 12 answers a server at a budget that fits: too few to call it ok at 95 % (the verdict's
        # bounds, launch/preflight/verdict.py), and nothing to refuse: the run goes on
        assert "already running" in output and output.count("not enough answers to judge") == 2, output
        assert {s.program: s.pid for s in fleet.status()} == pids, "the fleet was reused, not restarted"
        completions = _dataset(dataset)
        assert sorted(Counter(r["id"] for r in completions).values()) == [1] * 12
        assert {r["server"] for r in completions} <= set(fleet.urls())
        assert all(r["params"]["max_tokens"] == 4096 for r in completions)
        assert "kafkagen serve down --fleet" in output
        assert all(s.ready for s in fleet.status()), "the fleet keeps running after the job"
    finally:
        fleet.down(echo=lambda _line: None)


def test_a_file_of_only_bad_lines_ends_the_run_instead_of_waiting_forever(
    local_stack: LocalStack, kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    """GSM8K's raw rows without --prompt-field: every line is bad, nothing is published; the job
    says so and exits 1 (it used to wait for the empty prompts topic forever)."""
    prompts = tmp_path / "gsm8k-5.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in _rows(5)))
    args = [
        sys.executable,
        "-m",
        "launch.run",
        "--run-id",
        f"e2e-bad-{unique}",
        "--prompts",
        str(prompts),
    ]
    args += ["--server", user_servers[0], "--no-progress", "--timeout", "120"]
    done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=200, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-4000:]
    assert f"error: nothing to generate: e2e-bad-{unique}.prompts holds no prompt" in output
    assert "every input line was bad: see" in output and "bad-lines.jsonl" in output


ALPACA_TEMPLATE = "{{ instruction }}\n{%- if instances[0].input %}\n\n{{ instances[0].input }}\n{%- endif %}"
"""The bundled ``data/instructions/template.j2``, given as text (several lines) on the command line."""


def test_a_template_given_as_text_puts_every_input_into_its_prompt(
    kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    tasks = REPO_ROOT / "data" / "instructions" / "tasks.jsonl"
    rows = {r["id"]: r for r in map(json.loads, tasks.read_text().splitlines())}
    run_id = f"e2e-template-{unique}"
    dataset = tmp_path / "dataset"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(tasks)]
    args += ["--template", ALPACA_TEMPLATE, "--server", user_servers[0], "--server", user_servers[1]]
    args += ["--server-timeout", "60", "--to", str(dataset), "--no-progress", "--timeout", "480"]
    done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    completions = _dataset(dataset)
    assert sorted(r["id"] for r in completions) == sorted(rows)
    for record in completions:
        row = rows[record["id"]]
        [user] = record["prompt"]["messages"]
        given = row["instances"][0]["input"]
        assert user["content"] == (f"{row['instruction']}\n\n{given}" if given else row["instruction"])

    # The export's expected-id check reads the input through the same template.
    export = [sys.executable, "-m", "sinks.export", "--run-id", run_id, "--to", str(tmp_path / "again")]
    export += ["--input", str(tasks), "--template", ALPACA_TEMPLATE]
    done = subprocess.run(export, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((tmp_path / "again" / "manifest.json").read_text())
    assert manifest["missing"]["count"] == 0 and manifest["records"]["completions"] == len(rows), manifest


def test_a_limited_run_generates_and_exports_only_the_first_rows(
    kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    tasks = REPO_ROOT / "data" / "instructions" / "tasks.jsonl"
    first = [json.loads(line)["id"] for line in tasks.read_text().splitlines()[:7]]
    run_id = f"e2e-limit-{unique}"
    dataset = tmp_path / "dataset"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(tasks), "--limit", "7"]
    args += ["--template", ALPACA_TEMPLATE, "--server", user_servers[0], "--no-preflight"]
    args += ["--server-timeout", "60", "--to", str(dataset), "--no-progress", "--timeout", "480"]
    done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert sorted(r["id"] for r in _dataset(dataset)) == sorted(first)
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest["missing"]["count"] == 0 and manifest["records"]["completions"] == 7, manifest


SUM_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}, "why": {"type": "string"}},
    "required": ["answer", "why"],
}


def test_samples_and_structured_output_through_the_main_job_into_every_export_format(
    kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    """Two samples per prompt, a response_format for every prompt; one server breaks every
    structured answer (the simulator's fault), so its completions are asked for once more and
    then kept, flagged; every export format carries the samples and the flags."""
    tasks = REPO_ROOT / "data" / "instructions" / "tasks.jsonl"
    template = str(REPO_ROOT / "data" / "instructions" / "template.j2")
    ids = [json.loads(line)["id"] for line in tasks.read_text().splitlines()]
    faulty = user_servers[1]
    assert (
        httpx.post(f"{faulty}/simulator/faults", json={"structured_violation_rate": 1.0}).status_code == 200
    )
    response_format = {"type": "json_schema", "json_schema": {"name": "sum", "schema": SUM_SCHEMA}}
    run_id = f"e2e-samples-{unique}"
    dataset = tmp_path / "dataset"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(tasks)]
    args += ["--template", template, "--samples", "2", "--server", user_servers[0], "--server", faulty]
    args += ["--generation.response-format", json.dumps(response_format), "--consumer.retry-invalid", "1"]
    args += ["--no-thinking", "--max-tokens", "1000", "--gate.no-enabled", "--export-format", "jsonl,parquet"]
    args += ["--export-format", "openai_batch", "--export-format", "chat"]
    args += ["--server-timeout", "60", "--to", str(dataset), "--no-progress", "--timeout", "480"]
    done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    completions = _dataset(dataset)
    expected_ids = sorted(f"{i}#{k}" for i in ids for k in (0, 1))
    assert sorted(r["id"] for r in completions) == expected_ids
    by_prompt: dict[str, list[dict[str, Any]]] = {}
    flagged = 0
    for record in completions:
        by_prompt.setdefault(record["id"].rsplit("#", 1)[0], []).append(record)
        broken = {"invalid_json", "schema_mismatch"} & set(record["quality"])
        if record["server"] == faulty:
            assert broken and record["invalid_retries"] == 1, record
            flagged += 1
        else:
            assert not broken and record["invalid_retries"] == 0, record
            jsonschema.validate(json.loads(record["content"]), SUM_SCHEMA)
    for samples in by_prompt.values():
        assert sorted(r["prompt"]["sample"] for r in samples) == [0, 1]
        assert len({r["params"]["seed"] for r in samples}) == 2, "each sample its own seed"
        assert len({json.dumps(r["prompt"]["messages"]) for r in samples}) == 1, "the same prompt"
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest["samples"] == {
        "per_prompt": 2,
        "prompts": len(ids),
        "short": {"count": 0, "ids": [], "truncated": False},
    }, manifest["samples"]
    flags = manifest["quality"]["classes"]
    assert flags.get("invalid_json", 0) + flags.get("schema_mismatch", 0) == flagged, flags

    # Every format carries each sample and its flags.
    table = pq.read_table(sorted(dataset.glob("completions-*.parquet"))).to_pylist()
    assert sorted(r["id"] for r in table) == expected_ids
    assert {(r["prompt_id"], r["sample"]) for r in table} == {(i, k) for i in ids for k in (0, 1)}
    assert sum(bool({"invalid_json", "schema_mismatch"} & set(r["quality"])) for r in table) == flagged
    batch = [json.loads(line) for f in sorted(dataset.glob("*batch*.jsonl*")) for line in _lines(f)]
    assert sorted(r["custom_id"] for r in batch) == expected_ids
    chat = [json.loads(line) for f in sorted(dataset.glob("*chat*.jsonl*")) for line in _lines(f)]
    assert len(chat) == len(expected_ids)

    # Checked against the input asking for 3 samples: every prompt is short of one, so the run is
    # incomplete (nothing written) unless published as it is.
    export = [sys.executable, "-m", "sinks.export", "--run-id", run_id, "--to", str(tmp_path / "three")]
    export += ["--input", str(tasks), "--template", template, "--samples", "3"]
    done = subprocess.run(export, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and f"{len(ids)} ids missing" in done.stdout, done.stdout + done.stderr
    assert not (tmp_path / "three").exists()
    export.append("--allow-missing")
    done = subprocess.run(export, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((tmp_path / "three" / "manifest.json").read_text())
    assert manifest["samples"]["per_prompt"] == 3 and manifest["samples"]["short"]["count"] == len(ids)
    assert manifest["missing"]["count"] == len(ids) and all(
        i.endswith("#2") for i in manifest["missing"]["ids"]
    )


def _lines(path: Path) -> list[str]:
    if path.suffix == ".zst":
        with zstandard.open(path, "rt", encoding="utf-8") as f:
            return [line for line in f if line.strip()]
    return [line for line in path.read_text().splitlines() if line.strip()]


def test_a_run_of_an_edited_dataset_reuses_the_completions_of_unchanged_requests(
    kafka: str, s3: str, user_servers: list[str], tmp_path: Path, unique: str
) -> None:
    tasks = REPO_ROOT / "data" / "instructions" / "tasks.jsonl"
    rows = [json.loads(line) for line in tasks.read_text().splitlines()]
    template = str(REPO_ROOT / "data" / "instructions" / "template.j2")
    common = ["--template", template, "--server", user_servers[0], "--server", user_servers[1]]
    # the gate judges what the servers generate (3 prompts here, too few to judge): off
    common += ["--server-timeout", "60", "--no-progress", "--timeout", "480", "--gate.no-enabled"]

    def run(run_id: str, prompts: Path, *extra: str) -> tuple[str, list[dict[str, Any]]]:
        dataset = tmp_path / run_id
        args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(prompts), *common]
        args += ["--to", str(dataset), *extra]
        done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=540, check=False)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        return done.stdout, _dataset(dataset)

    first_id = f"e2e-reuse-a-{unique}"
    _, first = run(first_id, tasks)
    edited = tmp_path / "edited.jsonl"
    changed = {rows[i]["id"] for i in (0, 4, 7)}
    edited_rows = [
        {**r, "instruction": r["instruction"] + " Be brief."} if r["id"] in changed else r for r in rows
    ]
    edited.write_text("".join(json.dumps(r) + "\n" for r in edited_rows))
    out, second = run(f"e2e-reuse-b-{unique}", edited, "--consumer.reuse-from", first_id)

    before = {r["id"]: r for r in first}
    # a degenerate completion is never reused: generating it again may give a usable one
    reusable = {i for i, r in before.items() if i not in changed and not degenerate(r["quality"])}
    assert f"completions  {len(rows)} ({len(reusable)} reused from another run)" in out, out
    assert sorted(r["id"] for r in second) == sorted(before)
    for record in second:
        old = before[record["id"]]
        if record["id"] not in reusable:
            assert record["reused_from"] is None
            if record["id"] in changed:
                assert record["prompt"]["messages"] != old["prompt"]["messages"]
        else:
            assert record["reused_from"]["topic"] == f"{first_id}.completions", record["reused_from"]
            assert (record["content"], record["usage"]) == (old["content"], old["usage"]), "the same answer"
            assert record["run_id"] != old["run_id"], "this run's record"
            assert record["source"] != old["source"], "this run's prompt"
