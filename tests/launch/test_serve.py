"""``kafkagen serve`` on real processes: the SGLang-API simulator stands in for SGLang (through
``--server-command``), under a real supervisord, on ports 27000-27199 of 127.0.0.1: below Linux's
ephemeral range (32768-60999), where a client connection of another test could hold a port the
fleet must bind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from launch.cli import main
from launch.serve.fleet import Fleet
from launch.stack.process import port_owner, wait_until

pytestmark = pytest.mark.xdist_group("serve-ports")  # ports 27000-27199: one test at a time

SIMULATOR = "{python} -m simulator --port {port} --model-path {model} --time-scale 50"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stack home of the test's own (KAFKAGEN_HOME); every fleet in it stopped after."""
    stack_home = tmp_path / "stack"
    monkeypatch.setenv("KAFKAGEN_HOME", str(stack_home))
    yield stack_home
    for folder in (stack_home / "serve").glob("*"):
        Fleet(stack_home, folder.name).down(echo=lambda _line: None)


def _serve(*args: str) -> int:
    return main(["serve", *args])


def _pids(fleet: Fleet) -> dict[str, int]:
    return {s.program: s.pid for s in fleet.status()}


def test_fleet_up_ready_idempotent_restarted_after_sigkill_and_down(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "nfs" / "tiny-model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    shm = tmp_path / "shm"
    up = ["up", str(model), "--gpus", "2", "--port", "27000", "--server-command", SIMULATOR,
          "--copy-model-to", str(shm), "--ready-timeout", "120"]  # fmt: skip
    assert _serve(*up) == 0
    out = capsys.readouterr().out
    assert "gpu-0 ready after" in out and "gpu-1 ready after" in out, out

    fleet = Fleet(home, "fleet")
    record = json.loads(fleet.record_path.read_text())
    assert [s["url"] for s in record["servers"]] == ["http://127.0.0.1:27000", "http://127.0.0.1:27001"]
    assert record["model_path"] == str((shm / "tiny-model").resolve())  # the servers load the copy
    assert all(Path(s["log"]).name == f"gpu-{s['gpu']}.log" for s in record["servers"])
    pids = _pids(fleet)
    for gpu, program in enumerate(("gpu-0", "gpu-1")):
        proc = psutil.Process(pids[program])
        assert proc.environ()["CUDA_VISIBLE_DEVICES"] == str(gpu)
        assert str(shm / "tiny-model") in proc.cmdline()  # --model-path {model} is the copy

    # up again with the same spec: nothing restarted (and no second copy)
    assert _serve(*up) == 0
    assert "already running" in capsys.readouterr().out
    assert _pids(fleet) == pids
    # another spec while it runs: a clear error, nothing touched
    assert _serve(*[a if a != "2" else "3" for a in up]) == 2
    assert "serve down" in capsys.readouterr().err
    assert _serve("status") == 0
    assert capsys.readouterr().out.count(" ready ") == 2

    # One server stops answering (SIGSTOP: no restart can race the status call): status shows it.
    os.kill(pids["gpu-1"], signal.SIGSTOP)
    assert _serve("status") == 1
    status = capsys.readouterr().out
    assert "gpu-1" in status and "NOT READY" in status, status
    # SIGKILL it: supervisord restarts it; the other keeps its pid
    os.kill(pids["gpu-1"], signal.SIGKILL)
    assert wait_until(lambda: all(s.ready for s in fleet.status()), timeout_s=60, interval_s=0.5)
    after = _pids(fleet)
    assert after["gpu-0"] == pids["gpu-0"] and after["gpu-1"] not in (0, pids["gpu-1"])

    assert _serve("logs", "1", "-n", "5") == 0
    assert "gpu-1.log" in capsys.readouterr().out

    # down: every server gone, ports free, status exit 1
    assert _serve("down") == 0
    assert not any(psutil.pid_exists(p) for p in after.values())
    assert port_owner(27000) is None and port_owner(27001) is None
    assert _serve("status") == 1
    assert capsys.readouterr().out.count("DOWN") == 2


def test_a_server_that_cannot_start_is_named_with_its_log_line_within_seconds(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = "{python} -m simulator --port {port} --model-path {model} --no-such-simulator-flag"
    t0 = time.monotonic()
    code = _serve("up", str(tmp_path), "--gpus", "3,", "--port", "27010", "--server-command", bad)
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 3, err
    assert elapsed < 60, "must fail fast, not after the ready timeout (1800 s)"
    assert "gpu-3 (http://127.0.0.1:27010) failed to start" in err
    assert "unrecognized arguments: --no-such-simulator-flag" in err  # the log's error line
    assert "gpu-3.log" in err


def test_template_with_an_unknown_placeholder_is_a_usage_error(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _serve("up", str(tmp_path), "--gpus", "1", "--port", "27020", "--server-command", "x {prot}")
    assert code == 2
    assert "{prot}" in capsys.readouterr().err
    assert not Fleet(home, "fleet").supervisor.running()


def test_a_server_never_ready_times_out_naming_the_gpu_and_its_last_log_line(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a server that runs but answers 404 on the health path: not ready, never failed
    never = "{python} -m http.server {port} --bind 127.0.0.1"
    code = _serve("up", str(tmp_path), "--gpus", "1", "--port", "27030", "--server-command", never,
                  "--ready-timeout", "4")  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3, err
    assert "not ready after 4 s" in err and "gpu-0 (http://127.0.0.1:27030)" in err, err
    assert '"GET /health_generate HTTP/1.1" 404' in err  # its last log line


def test_up_runs_the_preflight_on_every_server_and_fails_with_the_fix_when_reasoning_eats_the_budget(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    up = ["up", str(tmp_path), "--gpus", "2", "--port", "27040", "--server-command", SIMULATOR,
          "--ready-timeout", "120"]  # fmt: skip
    assert _serve(*up, "--max-tokens", "512", "--thinking") == 2
    captured = capsys.readouterr()
    assert "gpu-0: reasoning_ate_budget in" in captured.err, captured.err
    assert "gpu-1: reasoning_ate_budget in" in captured.err
    assert "fix: raise --max-tokens" in captured.err and "recommended: --max-tokens " in captured.err
    assert "reasoning p50 512, p95 512, max 512" in captured.out  # what each server answered
    # The servers stay up: the preflight again with a budget that leaves room for the answer passes.
    assert _serve("probe", "--max-tokens", "8192") == 0
    assert capsys.readouterr().out.count("\n  verdict    ok at 95% confidence: ") == 2
    # --ignore-preflight reports and goes on; --no-preflight asks nothing.
    assert _serve(*up, "--max-tokens", "512", "--ignore-preflight") == 0
    assert "running anyway (--ignore-preflight)" in capsys.readouterr().out
    assert _serve(*up, "--max-tokens", "512", "--no-preflight") == 0
    assert "preflight:" not in capsys.readouterr().out
    assert _serve(*up, "--max-tokens", "512", "--no-preflight") == 0
    assert "preflight:" not in capsys.readouterr().out
    # One server by URL, thinking off.
    assert _serve("probe", "--server", "http://127.0.0.1:27041", "--no-thinking", "--max-tokens", "512") == 0


def test_after_supervisord_is_sigkilled_down_stops_the_servers_it_left_and_up_works_again(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    up = ["up", str(tmp_path), "--gpus", "2", "--port", "27150", "--server-command", SIMULATOR,
          "--ready-timeout", "120", "--no-preflight"]  # fmt: skip
    assert _serve(*up) == 0
    fleet = Fleet(home, "fleet")
    pids = _pids(fleet)
    os.kill(int((fleet.home / "supervisord.pid").read_text()), signal.SIGKILL)
    assert wait_until(lambda: not fleet.supervisor.running(), timeout_s=10)
    capsys.readouterr()
    # its servers still run: status says so and what to do; up names them as this fleet's
    assert _serve("status") == 1
    assert "serve down --fleet fleet" in capsys.readouterr().out
    assert _serve(*up) == 3
    assert "left running without its supervisord" in capsys.readouterr().err
    # down stops them (not a 2-minute wait ending in "ports still taken")
    t0 = time.monotonic()
    assert _serve("down") == 0
    assert time.monotonic() - t0 < 60
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids.values()
    )
    assert port_owner(27150) is None and port_owner(27151) is None
    assert _serve(*up) == 0


def test_down_stops_a_running_fleet_whose_record_is_corrupt(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    up = ["up", str(tmp_path), "--gpus", "1", "--port", "27160", "--server-command", SIMULATOR,
          "--ready-timeout", "120", "--no-preflight"]  # fmt: skip
    assert _serve(*up) == 0
    fleet = Fleet(home, "fleet")
    fleet.record_path.write_text('{"name": ')
    capsys.readouterr()
    assert _serve(*up) == 2  # running, record unreadable: the message says `serve down`
    assert "serve down" in capsys.readouterr().err
    assert _serve("down") == 0  # ... and down does it
    assert "fleet.json.corrupt" in capsys.readouterr().out
    assert not fleet.supervisor.running() and port_owner(27160) is None
    assert _serve(*up) == 0


def test_a_server_command_that_does_not_exist_is_named_and_leaves_nothing_running(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = "/opt/no-such-venv/bin/python -m sglang.launch_server {args}"
    assert _serve("up", str(tmp_path), "--gpus", "1", "--port", "27170", "--server-command", missing) == 2
    err = capsys.readouterr().err
    assert "/opt/no-such-venv/bin/python" in err and "Traceback" not in err, err
    assert not Fleet(home, "fleet").supervisor.running()


def test_two_ups_at_once_start_one_fleet_copied_once(home: Path, tmp_path: Path) -> None:
    model = tmp_path / "nfs" / "m"
    model.mkdir(parents=True)
    (model / "w.bin").write_bytes(os.urandom(200_000_000))  # a copy that takes a moment
    up = [sys.executable, "-m", "launch.cli", "serve", "up", str(model), "--gpus", "2", "--port", "27180",
          "--server-command", SIMULATOR, "--ready-timeout", "120", "--no-preflight",
          "--copy-model-to", str(tmp_path / "shm")]  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    first = subprocess.Popen(up, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    second = subprocess.run(up, cwd=root, capture_output=True, text=True, timeout=300)
    out_first, _ = first.communicate(timeout=300)
    assert first.returncode == 0, out_first
    assert second.returncode == 0, second.stdout + second.stderr
    assert "already running" in out_first + second.stdout  # one of them started it, the other found it
    fleet = Fleet(home, "fleet")
    assert all(s.ready for s in fleet.status())
    assert sorted(p.name for p in (tmp_path / "shm").iterdir()) == [".m.lock", "m"]


def test_down_while_up_waits_says_it_was_stopped_not_that_it_failed_to_start(
    home: Path, tmp_path: Path
) -> None:
    never = "{python} -m http.server {port} --bind 127.0.0.1"  # runs, never ready (404)
    up = [sys.executable, "-m", "launch.cli", "serve", "up", str(tmp_path), "--gpus", "1", "--port", "27185",
          "--server-command", never, "--ready-timeout", "120", "--no-preflight"]  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    waiting = subprocess.Popen(up, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fleet = Fleet(home, "fleet")
    assert wait_until(lambda: fleet.supervisor.running() and port_owner(27185) is not None, timeout_s=60)
    fleet.down(echo=lambda _line: None)
    _, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 3, err
    assert "stopped while waiting" in err and "failed to start" not in err and "Traceback" not in err, err
