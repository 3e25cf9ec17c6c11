"""Logging set-up shared by kafkagen's processes.

aiokafka logs every failed metadata or connection attempt, about 700 lines a second while a
broker restarts; :class:`RepeatFilter` lets one copy of a repeated message through per interval
and says how many it held back, so a Kafka outage does not bury the rest of a log.
"""

from __future__ import annotations

import logging
import time

__all__ = ["FORMAT", "RepeatFilter", "RetriedCoordinatorLookupAsInfo", "configure"]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RepeatFilter(logging.Filter):
    """Pass a given (logger, message template) of loggers under ``prefix`` at most once per
    ``interval_s`` seconds; other loggers pass untouched (kafkagen's own lines, such as partition
    assignments, share a template but differ in content and must all be kept)."""

    def __init__(self, interval_s: float = 10.0, prefix: str = "aiokafka") -> None:
        super().__init__()
        self.interval_s = interval_s
        self.prefix = prefix
        self._last: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.prefix):
            return True
        key = (record.name, str(record.msg))
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            record.msg = f"{record.msg} (and {held} more like it in the last {self.interval_s:.0f} s)"
        return True


class RetriedCoordinatorLookupAsInfo(logging.Filter):
    """Log aiokafka's "Group Coordinator Request failed: <error>" at INFO when the error is
    retriable: aiokafka logs it at ERROR and then retries (``GroupCoordinator.
    ensure_coordinator_known``, aiokafka 0.14), and a fresh broker answers
    ``GroupCoordinatorNotAvailableError`` until its ``__consumer_offsets`` topic exists, so every
    healthy first start would show an ERROR. Non-retriable errors keep their level."""

    LOGGER = "aiokafka.consumer.group_coordinator"

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.name == self.LOGGER
            and str(record.msg).startswith("Group Coordinator Request failed")
            and isinstance(record.args, tuple)
            and record.args
            and getattr(record.args[0], "retriable", False)
        ):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def configure(level: int = logging.INFO) -> None:
    """Log to stderr with timestamps at ``level``; quiet httpx's per-request lines; de-duplicate
    aiokafka's; retried coordinator lookups at INFO (:class:`RetriedCoordinatorLookupAsInfo`).
    Idempotent: a second call only changes the level."""
    logging.basicConfig(level=level, format=FORMAT)
    root = logging.getLogger()
    root.setLevel(level)  # basicConfig does nothing once a handler exists: a second call sets the level
    logging.getLogger("httpx").setLevel(logging.WARNING)
    for handler in root.handlers:
        kinds = {type(f) for f in handler.filters}
        for kind in (RetriedCoordinatorLookupAsInfo, RepeatFilter):
            if kind not in kinds:
                handler.addFilter(kind())
