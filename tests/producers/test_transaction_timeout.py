"""A rate-limited producer against the real broker's transaction timeout: it commits each
transaction well within the timeout however slowly it publishes, so a file that takes several
timeouts to publish is published exactly once (issue 9, item 9a)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from producers.cli import EXIT_OK
from streams.config import ProducerSettings, Settings, load_settings
from streams.errors import ConfigError
from streams.records import ProgressRecord, PromptRecord
from tests.helpers import REPO_ROOT, read_topic
from tests.producers.support import flags

TIMEOUT_MS = 10_000
"""The producer's transaction timeout in the test: the broker aborts a transaction open longer
(its check runs every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 10 s)."""
RECORDS = 60
RATE = 2.0
"""records per second: the file takes RECORDS / RATE = 30 s, three transaction timeouts."""


def _run(settings: Settings, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    three = settings.model_copy(update={"topics": settings.topics.model_copy(update={"partitions": 3})})
    return subprocess.run(
        [sys.executable, "-m", "producers.prompts", str(path), *flags(three), *extra],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.kafka
async def test_a_rate_limited_producer_outlasting_the_transaction_timeout_publishes_once(
    kafka: str, settings: Settings, tmp_path: Path
) -> None:
    path = tmp_path / "slow.jsonl"
    rows = (json.dumps({"id": f"s-{i:03d}", "prompt": f"q {i}"}) for i in range(RECORDS))
    path.write_text("".join(row + "\n" for row in rows))
    started = time.monotonic()
    result = await asyncio.to_thread(
        _run,
        settings,
        path,
        "--producer.max-records-per-s",
        str(RATE),
        "--producer.transaction-timeout-ms",
        str(TIMEOUT_MS),
        "--producer.checkpoint-interval-s",
        "2",
    )
    took = time.monotonic() - started
    assert result.returncode == EXIT_OK, result.stderr
    assert took > 2.5 * TIMEOUT_MS / 1000, f"the file must outlast the timeout thrice, took {took:.0f} s"
    published = await read_topic(settings, settings.topics.prompts, PromptRecord)
    assert Counter(p.id for p in published) == Counter(f"s-{i:03d}" for i in range(RECORDS))
    progress = await read_topic(settings, settings.topics.producer_progress, ProgressRecord)
    assert len(progress) >= RECORDS / RATE / 2 / 2, "a transaction (and resume point) every ~2 s"
    assert progress[-1].done and progress[-1].published == RECORDS

    again = await asyncio.to_thread(_run, settings, path)  # the resume point is committed
    assert again.returncode == EXIT_OK, again.stderr
    assert f"published 0, skipped {RECORDS}" in again.stderr


def test_the_checkpoint_interval_must_be_below_a_third_of_the_transaction_timeout() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(
            Settings,
            ["--producer.transaction-timeout-ms", "30000", "--producer.checkpoint-interval-s", "10"],
            prog="t",
        )
    message = str(info.value)
    assert "checkpoint_interval_s 10 must be below a third of transaction_timeout_ms 30000 (10 s)" in message
    assert "KAFKAGEN_PRODUCER__CHECKPOINT_INTERVAL_S" in message
    ok = ProducerSettings(transaction_timeout_ms=30000, checkpoint_interval_s=9.9)
    assert ok.checkpoint_interval_s == 9.9
    defaults = ProducerSettings()
    assert (defaults.transaction_timeout_ms, defaults.checkpoint_interval_s) == (60000, 10)
