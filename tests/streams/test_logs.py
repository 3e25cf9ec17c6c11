from __future__ import annotations

import logging

import pytest
from aiokafka.errors import GroupAuthorizationFailedError, GroupCoordinatorNotAvailableError

from streams.logs import RepeatFilter, RetriedCoordinatorLookupAsInfo


def _record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("aiokafka", logging.ERROR, __file__, 1, msg, None, None)


def test_repeats_are_held_back_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("streams.logs.time.monotonic", lambda: now[0])
    f = RepeatFilter(interval_s=10)
    assert f.filter(_record("Unable connect to %s"))
    assert not f.filter(_record("Unable connect to %s"))
    assert not f.filter(_record("Unable connect to %s"))
    assert f.filter(_record("another message"))
    now[0] = 110.0
    again = _record("Unable connect to %s")
    assert f.filter(again)
    assert "and 2 more like it" in str(again.msg)


def test_other_loggers_are_never_held_back() -> None:
    f = RepeatFilter(interval_s=10)
    for parts in ("[0, 1]", "[2]", "[2]"):
        record = logging.LogRecord(
            "kafkagen.generate", logging.INFO, __file__, 1, "assigned %s", (parts,), None
        )
        assert f.filter(record)


def test_a_retried_coordinator_lookup_is_info_a_fatal_one_stays_error() -> None:
    f = RetriedCoordinatorLookupAsInfo()
    for error, level in (
        (GroupCoordinatorNotAvailableError(), logging.INFO),
        (GroupAuthorizationFailedError("g"), logging.ERROR),
    ):
        record = logging.LogRecord(
            f.LOGGER, logging.ERROR, __file__, 1, "Group Coordinator Request failed: %s", (error,), None
        )
        assert f.filter(record)
        assert (record.levelno, record.levelname) == (level, logging.getLevelName(level))
