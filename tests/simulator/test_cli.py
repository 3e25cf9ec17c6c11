"""``python -m simulator``: the command line of :mod:`simulator.cli` (exit statuses, flags)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import simulator.__main__
from simulator.cli import build_parser, profile_from_args
from simulator.cli import main as cli_main

pytestmark = pytest.mark.timeout(10)

REPO = Path(__file__).resolve().parents[2]


def test_the_old_module_keeps_the_entry_point() -> None:
    assert simulator.__main__.main is cli_main


def test_cli_rejects_bad_fault_json() -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--faults", "{not json"])
    assert exit_info.value.code == 2
    assert cli_main(["--host", "0.0.0.0", "--port", "0"]) == 2


def test_cli_prints_url_and_exits_1_on_crash() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "simulator",
            "--port=0",
            "--time-scale=100",
            '--faults={"crash_after_s": 10}',  # 0.1 s wall
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=8,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "simulator" in result.stdout
    assert "http://127.0.0.1:" in result.stdout
    assert "crashed" in result.stderr


def test_cli_sglang_version_and_cli_only_fields() -> None:
    profile = profile_from_args(
        build_parser().parse_args(["--sglang-version", "0.5.23", "--max-running-requests", "8"])
    )
    assert profile.sglang_version == "0.5.23" and profile.max_running_requests == 8
    assert profile.max_running_requests_set and not profile.context_length_set
