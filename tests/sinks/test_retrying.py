"""Store calls from the event loop (:mod:`sinks.retrying`): retried on transient errors, raised at
once on permanent ones, S3's health counted. Milliseconds, no services."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from sinks.metrics import SinkStats
from sinks.retrying import RetryingStore
from sinks.store import ObjectStore
from streams.errors import PermanentStorageError, StorageError


def _retrying(stopping: asyncio.Event | None = None) -> tuple[RetryingStore, SinkStats]:
    stats = SinkStats()
    store = ObjectStore(None, "bucket-x", 1 << 30)  # type: ignore[arg-type]  # never called here
    return RetryingStore(
        store, stats, initial_s=0.001, max_s=0.002, stopping=stopping or asyncio.Event()
    ), stats


def _failing(errors: list[Exception], result: str = "done") -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result

    return calls, call


async def test_transient_failures_are_retried_counted_and_s3_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "kafkagen.sink")
    retrying, stats = _retrying()
    calls, call = _failing([StorageError("down"), StorageError("still down")])
    assert await retrying.call("upload k", call) == "done"
    assert len(calls) == 3 and stats.s3_failures == 2 and stats.s3_down_since is None
    assert "S3 upload k failed (attempt 2): still down" in caplog.text
    assert "S3 answers again" in caplog.text


async def test_a_permanent_failure_is_raised_at_once() -> None:
    retrying, stats = _retrying()
    calls, call = _failing([PermanentStorageError("denied")])
    with pytest.raises(PermanentStorageError, match="denied"):
        await retrying.call("upload k", call)
    assert len(calls) == 1 and stats.s3_failures == 0


async def test_a_failure_while_stopping_ends_the_call() -> None:
    stopping = asyncio.Event()
    stopping.set()
    retrying, stats = _retrying(stopping)
    calls, call = _failing([StorageError("down")])
    with pytest.raises(asyncio.CancelledError):
        await retrying.call("upload k", call)
    assert len(calls) == 1 and stats.s3_failures == 0
