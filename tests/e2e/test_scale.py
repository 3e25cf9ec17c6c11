"""Scaling a running run: the main job on 2 simulated servers, ``kafkagen scale`` to 4
mid-run (until 4 group members hold partitions and each added server generated); the main job
SIGKILLed and its same command run again, which starts the fleet as scaled (4 servers, not its
own 2); then down to 1; the run finishes and its export is exact. Each added server's simulator
generated after it was added, and each removed one received nothing once its consumer had stopped
(its requests in flight at the removal finish or are handed over before that). The same command
run again once the run is done starts the fleet as scaled (one server).

The run is paced by the simulators' ``slow_factor`` fault, not by a slow time scale: a server is
slowed (its requests in flight stay, nothing more finishes in the test's time) while the test
needs the run to go on, and made fast again where it needs the run to move."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from launch.scale.policy import program_name
from launch.supervise import Supervisor
from streams.config import Settings
from streams.control import ControlState, read_control
from streams.runs import naming
from tests.e2e.test_main_job_servers import GSM8K, _dataset
from tests.helpers import REPO_ROOT, simulators

pytestmark = pytest.mark.timeout(900)

PROMPTS = 200
TIME_SCALE = "50"
"""Fast: a request of the simulator's median 1,800 tokens (thinking on) takes ~0.2 s of wall time."""
PACED = {"slow_factor": 10.0}
"""Paced: a request takes ~2 s, so 2 servers of 8 slots finish ~8 a second."""
LENT = {"slow_factor": 100.0}
"""The added servers' pace: a request takes ~20 s. Until their consumers join and take partitions
they are idle, so the slowed servers' consumers lend them their waiting prompts (tail lending,
docs/consumer.md); unpaced, they drained the whole backlog before the test could slow them, and
the run ended before the scale-down (a CI failure)."""
SLOW = {"slow_factor": 5000.0}
"""Slowed: a request then takes ~15 min, past every phase of the test (the consumer's hang timeout
is 10 min of requests in flight with none finishing, its collapse watchdog 5 min), while the
server still answers health checks at once."""


@pytest.fixture
def four_servers(tmp_path: Path) -> Iterator[list[str]]:
    args = ("--time-scale", TIME_SCALE, "--max-running-requests", "8", "--served-model-name", "sim-qwen3")
    with simulators(tmp_path, 4, *args) as urls:
        yield urls


def _faults(urls: list[str] | tuple[str, ...], faults: dict[str, float] | None) -> None:
    """Set ``faults`` on each simulator of ``urls`` (None: clear them)."""
    for url in urls:
        if faults is None:
            httpx.delete(url + "/simulator/faults", timeout=10).raise_for_status()
        else:
            httpx.post(url + "/simulator/faults", json=faults, timeout=10).raise_for_status()


def _received(url: str) -> int:
    stats = httpx.get(url + "/simulator/stats", timeout=10).json()
    return int(stats["requests_received"])


def _control(settings: Settings) -> ControlState:
    return asyncio.run(read_control(settings, timeout_s=30))


def _wait(check: Any, timeout_s: float, what: str, job: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert job.poll() is None, (
            f"the main job ended (exit {job.returncode}) while waiting for {what}:\n"
            + (log.read_text()[-4000:])
        )
        assert time.monotonic() < deadline, (
            f"timed out after {timeout_s:.0f} s waiting for {what}:\n" + (log.read_text()[-4000:])
        )
        time.sleep(1.0)


def _scale(run_id: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "launch.cli", "scale", "--run-id", run_id, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def test_scale_2_to_4_to_1_mid_run_and_the_export_is_exact(
    base_settings: Settings, kafka: str, s3: str, four_servers: list[str], tmp_path: Path, unique: str
) -> None:
    prompts = tmp_path / "gsm8k.jsonl"
    prompts.write_text("".join(GSM8K.read_text().splitlines(keepends=True)[:PROMPTS]))
    run_id = f"e2e-scale-{unique}"
    settings = naming.for_run(base_settings, run_id)
    dataset = tmp_path / "dataset"
    first, second, third, fourth = four_servers
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(prompts)]
    args += ["--prompt-field", "question", "--server", first, "--server", second, "--no-preflight"]
    args += ["--server-timeout", "60", "--to", str(dataset), "--no-progress", "--timeout", "780"]
    log = tmp_path / "main-job.log"
    # Paced while the test waits for the first 30 completions, which it sees only in the members'
    # reports (seconds apart): unpaced, 2 servers finish ~80 a second, and CI once saw 157 of the
    # 200 done when the scale-up came, leaving an added server a partition with nothing left in it.
    _faults([first, second], PACED)
    job = subprocess.Popen(args, cwd=REPO_ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True)
    supervisor = Supervisor(Path(base_settings.home) / "runs" / run_id)
    try:
        started = time.monotonic()

        def generated(n: int) -> bool:
            return sum(m.completions for m in _control(settings).members.values()) >= n

        _wait(lambda: generated(30), 240, "30 completions on 2 servers", job, log)
        _faults([first, second], SLOW)  # the run must go on until it is scaled down
        state = _control(settings)
        assert state.run is not None and state.run.servers == [first, second], state.run
        assert state.fleet is not None and state.fleet.version == 0 and state.fleet.servers == [first, second]
        added_before = {u: _received(u) for u in (third, fourth)}

        # Up to 4: the added servers' consumers join the group and take partitions.
        _faults([third, fourth], LENT)
        out = _scale(run_id, "--add-server", third, "--add-server", fourth)
        assert f"+ {third}" in out and f"+ {fourth}" in out and "fleet version 1, 4 servers" in out, out
        scaled_up_at = time.monotonic()

        def holding(urls: list[str]) -> bool:
            members = _control(settings).members.values()
            fresh = {
                m.server for m in members if m.state == "running" and m.partitions and time.time() - m.at < 10
            }
            return set(urls) <= fresh

        _wait(lambda: holding(four_servers), 180, "4 group members holding partitions", job, log)
        up_s = time.monotonic() - scaled_up_at

        def added_generated(n: int) -> bool:
            done = {m.server: m.completions for m in _control(settings).members.values()}
            return all(done.get(u, 0) >= n for u in (third, fourth))

        _wait(lambda: added_generated(5), 120, "5 completions from each added server", job, log)
        _faults([third, fourth], SLOW)
        text = log.read_text()
        assert "fleet v1 (kafkagen scale@" in text and f"+ {third}: consumer started" in text, text[-3000:]

        # The main job SIGKILLed after the scale (its supervisord and consumers outlive it), and the
        # same command run again: it starts the fleet as scaled (4 servers), not its own 2.
        job.kill()
        job.wait(30)
        log = tmp_path / "main-job-again.log"
        job = subprocess.Popen(args, cwd=REPO_ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True)
        _wait(
            lambda: "consumers and sink started" in log.read_text(), 240, "the re-run's consumers", job, log
        )
        text = log.read_text()
        assert f"run {run_id}: starting the fleet's 4 servers (version 1, set by kafkagen scale@" in text, (
            text
        )
        assert f"run {run_id}: servers {first}, {second}, {third}, {fourth} (running already" in text, text
        _wait(lambda: holding(four_servers), 180, "4 group members again after the re-run", job, log)
        assert set(supervisor.states()) == {program_name(u) for u in four_servers} | {"sink"}
        assert not generated(PROMPTS), "the run ended before it was scaled down"

        # Down to 1 (one of the added servers): three consumers stop and hand their partitions over.
        out = _scale(run_id, "--servers", third)
        assert f"- {first}" in out and f"- {second}" in out and f"- {fourth}" in out, out
        removed = (first, second, fourth)
        _faults(removed, None)  # their consumers' requests in flight finish as they stop

        def gone() -> bool:
            states = supervisor.states()
            return not any(program_name(u) in states for u in removed)

        _wait(gone, 180, "the removed consumers' programs to stop and be removed", job, log)
        after_removal = {u: _received(u) for u in removed}
        stopped = {m.server: m.state for m in _control(settings).members.values() if m.server in removed}
        assert set(stopped.values()) == {"stopped"}, stopped
        _faults([third], None)  # the one server left finishes the run

        job.wait(timeout=720)
        output = log.read_text()
        assert job.returncode == 0, output[-5000:]
        total_s = time.monotonic() - started
    finally:
        if job.poll() is None:
            job.terminate()
            job.wait(120)

    assert "aiokafka" not in output and "ERROR" not in output, output[-5000:]
    # One line per change in the main job's output.
    for url in removed:
        assert (
            f"- {url}: stopping its consumer" in output and f"- {url}: consumer stopped and removed" in output
        )
    # The export is exact: every prompt once, nothing missing.
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest["ok"] is True, manifest
    assert manifest["expected"]["ids"] == PROMPTS and manifest["missing"]["count"] == 0
    assert manifest["records"]["ids"] == PROMPTS and manifest["records"]["errors"] == 0
    completions = _dataset(dataset)
    ids = Counter(r["id"] for r in completions)
    assert len(ids) == PROMPTS and set(ids.values()) == {1}, ids.most_common(3)
    by_server = Counter(r["server"] for r in completions)
    # The added servers generated after they were added (they had no consumer before).
    for url in (third, fourth):
        assert by_server[url] > 0 and _received(url) > added_before[url], (url, by_server)
    # The removed servers received nothing after their consumers had stopped.
    assert {u: _received(u) for u in removed} == after_removal
    assert set(by_server) <= set(four_servers)

    # The same command again (as after a SIGKILL of the job): the fleet as scaled, not --server's.
    again = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-4000:]
    assert f"run {run_id}: starting the fleet's 1 servers (version 2, set by kafkagen scale@" in output, (
        output
    )
    assert f"run {run_id}: servers {third} (running already" in output, output
    assert "already complete" in output, output
    print(f"\nscaled up in {up_s:.0f} s; run {total_s:.0f} s; completions by server {dict(by_server)}")
