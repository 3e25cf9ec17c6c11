"""The randomized fault audit (``python -m bench.chaos``) on one short fixed seed: its own 3-broker
cluster and S3, 3 simulators, consumers, the sink and the producer as real processes, 8 faults
(seed 32: sink, producer and consumer SIGKILLs, a graceful stop, more consumers than partitions,
a broker SIGKILL, S3 down, a simulator crash) over ~1000 prompts, then every audit check; and the
same audit, without faults, over a product made to break three guarantees on purpose."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.chaos.pipeline import audit_settings
from launch.stack import LocalStack
from streams.config import Settings
from tests.helpers import REPO_ROOT

# alone: the audit judges its harness on time too (harness_on_time), so no test of the parallel tier
# runs beside it; scripts/test.sh runs the two audits below beside each other (each on ports of its
# own, each its own xdist group) and the llama.cpp tier at nice 10 meanwhile: the machine is mostly
# idle while an audit waits on its schedule, and the harness's waits scale with the load average
pytestmark = [pytest.mark.timeout(900), pytest.mark.alone]

SEED = 32
"""8 faults of 8 kinds (tests/bench/test_chaos.py checks the schedule itself)."""
BASE_PORT = 21300
"""Kafka 21300-21305, S3 21310 (+555, +1000, +1007, each +10000), simulators 21320-21322: apart
from the configured stack, the tests' 3-broker cluster and the CLI's default (21000)."""

PLANT_BASE_PORT = 21400
"""The planted run's ports, the same offsets from 21400: apart from the seed's, so both can run at
once (the highest, S3's gRPC 32417, stays below Linux's ephemeral range)."""


def _audit(tmp_path: Path, *args: str, base_port: int = BASE_PORT) -> tuple[int, str, Path]:
    """Run ``python -m bench.chaos ARGS`` on ports from ``base_port``; (exit status, output, work dir)."""
    work = tmp_path / "chaos"
    argv = [sys.executable, "-m", "bench.chaos", *args]
    argv += ["--work-dir", str(work), "--base-port", str(base_port)]
    started = time.monotonic()
    out = tmp_path / "chaos.out"
    with out.open("w") as f:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT, text=True)
        try:
            rc = proc.wait(780)
        except subprocess.TimeoutExpired:
            proc.terminate()  # the audit stops its processes and its stack on SIGTERM
            rc = proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            _stop_stack(work, base_port)
    output = out.read_text()
    print(output)
    print(f"bench.chaos {' '.join(args)}: wall {time.monotonic() - started:.0f} s")
    return rc, output, work


@pytest.mark.xdist_group("audit-seed")
def test_a_short_fixed_seed_passes_every_check(tmp_path: Path) -> None:
    rc, output, work = _audit(
        tmp_path, *("--seed", str(SEED), "--faults", "8", "--prompts", "1000", "--duration", "120")
    )
    assert rc == 0, output[-8000:]
    report = json.loads((work / "report.json").read_text())
    assert report["ok"] and report["seed"] == SEED
    assert [c["name"] for c in report["checks"]] == [
        "producer_bad_lines",
        "prompts_exactly_once",
        "topics_cover_every_prompt",
        "dataset_exactly_once",
        "generate_commits_durable",
        "sink_commits_durable",
        "s3_contiguous",
        "duplicates_within_bound",
        "pipeline_recovered",
        "harness_on_time",
    ]
    assert all(c["ok"] for c in report["checks"]), report["checks"]
    assert len(report["faults"]) == 8 and all(f["ok"] for f in report["faults"])
    assert {f["kind"] for f in report["faults"]} >= {
        "producer_kill",
        "consumer_kill",
        "broker_kill",
        "s3_down",
    }
    stats = report["stats"]
    assert (
        stats["dataset"]["completions"] + stats["dataset"]["errors"] == 1002
    )  # + the 2 over-context prompts
    assert stats["dataset"]["errors"] >= 2
    assert "PASS" in output.splitlines()[-2]


def _stop_stack(work: Path, base_port: int) -> None:
    """Stop whatever the audit's stack still runs (nothing, unless the audit was killed)."""
    settings = audit_settings(
        Settings(), work_dir=work, base_port=base_port, run_id="cleanup", servers=3, publish_rate=1.0
    )
    LocalStack(settings).down(["kafka", "s3"])


@pytest.mark.xdist_group("audit-plant")
def test_each_planted_violation_fails_its_check_and_only_its_check(tmp_path: Path) -> None:
    """The product made to break three guarantees on purpose (streams/audit_trace.py): commits
    ahead of the acknowledgement, results written twice without a handover, the sink's commits
    ahead of its uploads. Each fails the check that guards it; the data checks still pass (the
    run has no fault that could turn an early commit into a loss)."""
    plants = ("commit_before_ack", "resend", "commit_before_upload")
    rc, output, work = _audit(
        tmp_path,
        *("--seed", "3", "--faults", "0", "--prompts", "300", "--duration", "30"),
        *(arg for plant in plants for arg in ("--plant", plant)),
        base_port=PLANT_BASE_PORT,
    )
    assert rc == 1, output[-8000:]
    report = json.loads((work / "report.json").read_text())
    failed = {c["name"]: c["violations"] for c in report["checks"] if not c["ok"]}
    assert set(failed) == {"generate_commits_durable", "sink_commits_durable", "duplicates_within_bound"}
    assert "acknowledged +" in failed["generate_commits_durable"][0]
    assert "was stored +" in failed["sink_commits_durable"][0]
    assert "causes in the traces: none" in failed["duplicates_within_bound"][0]
    assert report["product_ok"] is False and report["harness_ok"] is True
