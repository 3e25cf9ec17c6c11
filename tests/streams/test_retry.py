"""The one retry policy: waits, the ``.retriable`` decision, and retry-until-success."""

from __future__ import annotations

import logging
import random

import pytest
from aiokafka.errors import KafkaConnectionError, UnknownTopicOrPartitionError

from streams.errors import (
    ConfigError,
    FatalRequestError,
    PermanentStorageError,
    RetriableServerError,
    StorageError,
)
from streams.retry import Backoff, retriable, retry

log = logging.getLogger("test")


def test_backoff_doubles_up_to_its_cap_with_jitter_in_the_upper_half() -> None:
    rng = random.Random(7)
    backoff = Backoff(initial_s=0.5, max_s=4.0)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0), (10_000, 4.0)]:
        waits = [backoff.delay(attempt, rng) for _ in range(50)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits), (attempt, waits)
    with pytest.raises(ValueError, match="1-based"):
        backoff.delay(0)


def test_the_error_decides_whether_it_is_retried() -> None:
    assert retriable(RetriableServerError("503"))
    assert retriable(StorageError("reset"))
    assert retriable(TimeoutError()) and retriable(ConnectionResetError())
    assert retriable(KafkaConnectionError())  # aiokafka's own flag
    assert retriable(UnknownTopicOrPartitionError())  # aiokafka marks it retriable: metadata may lag
    assert not retriable(FatalRequestError("400"))
    assert not retriable(PermanentStorageError("denied"))
    assert not retriable(ConfigError("bad"))
    assert not retriable(ValueError("bug"))


async def test_retry_repeats_retriable_failures_until_success_and_reports_each() -> None:
    failures: list[tuple[str, int]] = []
    outcomes: list[Exception | str] = [StorageError("a"), TimeoutError(), "done"]

    async def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    result = await retry(
        "upload",
        call,
        backoff=Backoff(0.001, 0.002),
        log=log,
        on_failure=lambda exc, attempt, wait: failures.append((type(exc).__name__, attempt)),
    )
    assert result == "done"
    assert failures == [("StorageError", 1), ("TimeoutError", 2)]


async def test_retry_raises_the_first_error_that_retrying_cannot_fix() -> None:
    calls = 0

    async def call() -> None:
        nonlocal calls
        calls += 1
        raise StorageError("reset") if calls == 1 else PermanentStorageError("no such bucket")

    with pytest.raises(PermanentStorageError, match="no such bucket"):
        await retry("upload", call, backoff=Backoff(0.001, 0.002), log=None)
    assert calls == 2


def test_a_kafka_timeout_is_retriable_and_any_kafka_error_but_a_too_large_record_is_waited_out() -> None:
    from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, TopicAuthorizationFailedError

    from streams.retry import kafka_outage

    assert retriable(KafkaTimeoutError())  # aiokafka 0.14 says retriable = False
    assert kafka_outage(KafkaTimeoutError()) and kafka_outage(TopicAuthorizationFailedError())
    assert not kafka_outage(MessageSizeTooLargeError()) and not kafka_outage(TimeoutError())
