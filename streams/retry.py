"""The one retry policy of kafkagen: capped exponential backoff, keyed on ``.retriable``.

Whether an error is worth retrying is said by the error itself: every kafkagen error carries
``retriable`` on its class (:mod:`streams.errors`), as aiokafka's ``KafkaError`` does
(``aiokafka/errors.py``, aiokafka 0.14). :func:`retriable` reads that attribute; timeouts and
dropped connections count as retriable too. :func:`retry` repeats a call until it succeeds or
fails in a way retrying cannot fix; :class:`Backoff` gives the waits, for loops that retry on
their own schedule (the consumer's per-prompt retries).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from aiokafka.errors import KafkaError, KafkaTimeoutError, MessageSizeTooLargeError

__all__ = ["Backoff", "kafka_outage", "retriable", "retry", "retry_sync"]

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter ("full jitter" halved: uniform in [d/2, d]), in seconds.

    ``delay(1)`` is the wait after the first failure: ``initial_s``; each further attempt doubles
    it up to ``max_s``. Jitter spreads the retries of many callers so a recovering server is not
    hit by all of them at once (AWS Architecture Blog, "Exponential Backoff and Jitter").
    """

    initial_s: float = 1.0
    max_s: float = 60.0

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the ``attempt``-th failure (1-based).

        Raises:
            ValueError: ``attempt`` < 1.
        """
        if attempt < 1:
            raise ValueError(f"attempt is 1-based, got {attempt}")
        ceiling = min(self.max_s, self.initial_s * 2.0 ** min(attempt - 1, 64))
        return (rng or random).uniform(ceiling / 2, ceiling)


def retriable(exc: BaseException) -> bool:
    """Whether doing the same thing again may succeed: ``exc.retriable`` when the error says
    (kafkagen and aiokafka errors), else ``True`` only for timeouts and dropped connections.

    A timeout is always retriable, aiokafka's ``KafkaTimeoutError`` included, although aiokafka
    0.14 marks it ``retriable = False`` (``aiokafka/errors.py``): it is what a request raises while
    no broker answers, and the broker comes back."""
    if isinstance(exc, TimeoutError | ConnectionError | KafkaTimeoutError):
        return True
    flag = getattr(exc, "retriable", None)
    return flag if isinstance(flag, bool) else False


def kafka_outage(exc: BaseException) -> bool:
    """Whether a failed Kafka call is waited out rather than given up: any aiokafka error but a
    record too large (``MessageSizeTooLargeError`` never succeeds as it is).

    Wider than :func:`retriable` on purpose: a process that must not drop a record (the
    consumer's produce and commit, the sink's offset reads) waits out whatever Kafka answers,
    a misconfiguration included, and says so in its log and status line, rather than exit.
    """
    return isinstance(exc, KafkaError) and not isinstance(exc, MessageSizeTooLargeError)


async def retry(
    what: str,
    call: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    log: logging.Logger | None,
    is_retriable: Callable[[BaseException], bool] = retriable,
    on_failure: Callable[[BaseException, int, float], None] | None = None,
    rng: random.Random | None = None,
) -> T:
    """Await ``call()`` until it returns, waiting ``backoff`` between failures; retries forever.

    Each retried failure is logged at WARNING with ``what``, the attempt number and the wait (unless
    ``log`` is ``None``: the caller logs in ``on_failure``), and passed to
    ``on_failure(exc, attempt, wait_s)`` before the wait (a failure counter, a throttled log; raising
    there stops the retries with that error). Cancellation stops the waiting at once.

    Raises:
        Exception: the first error ``is_retriable`` rejects, unchanged, or what ``on_failure`` raises.
    """
    attempt = 0
    while True:
        try:
            return await call()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not is_retriable(exc):
                raise
            attempt += 1
            wait = backoff.delay(attempt, rng)
            if on_failure is not None:
                on_failure(exc, attempt, wait)
            if log is not None:
                log.warning("%s failed (attempt %d): %r; retrying in %.1f s", what, attempt, exc, wait)
            await asyncio.sleep(wait)


def retry_sync(
    what: str,
    call: Callable[[], T],
    *,
    backoff: Backoff,
    attempts: int,
    log: logging.Logger,
    is_retriable: Callable[[BaseException], bool] = retriable,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """:func:`retry` for blocking code that must give up: call ``call()`` at most ``attempts``
    times, waiting ``backoff`` between retriable failures (each logged at WARNING with ``what``).

    Raises:
        Exception: the first error ``is_retriable`` rejects, or the last one after ``attempts``
            calls, unchanged.
        ValueError: ``attempts`` < 1.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            attempt += 1
            if attempt >= attempts or not is_retriable(exc):
                raise
            wait = backoff.delay(attempt)
            log.warning(
                "%s failed (attempt %d of %d): %r; retrying in %.1f s", what, attempt, attempts, exc, wait
            )
            sleep(wait)
