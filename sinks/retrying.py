"""The object store as the sink's event loop calls it: each call in a worker thread, transient
failures retried forever, S3's health kept in the sink's stats.

A :class:`~streams.errors.StorageError` is retried with capped exponential backoff
(``sink.retry_initial_s`` .. ``sink.retry_max_s`` seconds) on top of botocore's own attempts; a
permanent error is raised at once; once a stop was requested, a failure ends the operation
(``asyncio.CancelledError``). Failure counts and the ``S3 answers again`` line: docs/sink.md,
"S3 errors and retries".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sinks.layout import ObjectMeta
from sinks.metrics import SinkStats
from sinks.store import ObjectStore, PutOutcome
from streams.retry import Backoff, retry

__all__ = ["RetryingStore"]

log = logging.getLogger("kafkagen.sink")

T = TypeVar("T")


class RetryingStore:
    """Async, retrying calls of an :class:`~sinks.store.ObjectStore` (module docstring).

    Args:
        store: the blocking store.
        stats: where failures and S3's state are counted.
        initial_s, max_s: the first and the largest wait between attempts, seconds.
        stopping: set when the sink stops: a failure then ends the call instead of a retry.
    """

    def __init__(
        self,
        store: ObjectStore,
        stats: SinkStats,
        *,
        initial_s: float,
        max_s: float,
        stopping: asyncio.Event,
    ) -> None:
        self.store = store
        self.stats = stats
        self.backoff = Backoff(initial_s, max_s)
        self.stopping = stopping
        self._log_every_s = 10.0
        self._failure_logged = 0.0

    @property
    def bucket(self) -> str:
        """The store's bucket."""
        return self.store.bucket

    async def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run blocking ``fn`` in a thread until it succeeds, through :func:`streams.retry.retry`:
        failures :func:`streams.retry.retriable` accepts (a :class:`~streams.errors.StorageError`) are retried
        forever with capped exponential backoff and jitter (:class:`streams.retry.Backoff`).
        Cancellation stops the waiting, not a request already in flight. Failure lines are
        rate-limited: the first three of a call, then at most one every 10 s.

        Raises:
            PermanentStorageError, ConfigError: a failure retrying cannot fix, at once.
            asyncio.CancelledError: a failure once a stop was requested.
        """
        result = await retry(
            what,
            lambda: asyncio.to_thread(fn),
            backoff=self.backoff,
            log=None,
            on_failure=lambda exc, attempt, wait_s: self._failed(what, exc, attempt, wait_s),
        )
        if self.stats.s3_down_since is not None:
            log.info("S3 answers again after %.0f s", time.monotonic() - self.stats.s3_down_since)
            self.stats.s3_down_since = None
        return result

    def _failed(self, what: str, exc: BaseException, attempt: int, wait_s: float) -> None:
        """Count and log one retried failure; end the call instead once a stop was requested."""
        if self.stopping.is_set():
            log.warning("S3 %s failed while stopping: %s; left for the next start", what, exc)
            raise asyncio.CancelledError from exc
        now = time.monotonic()
        self.stats.s3_failures += 1
        if self.stats.s3_down_since is None:
            self.stats.s3_down_since = now
        if attempt <= 3 or self._failure_logged + self._log_every_s <= now:
            self._failure_logged = now
            log.warning(
                "S3 %s failed (attempt %d): %s; retrying in %.1f s (%d S3 failures so far)",
                what,
                attempt,
                exc,
                wait_s,
                self.stats.s3_failures,
            )

    async def check_bucket(self, endpoint_url: str | None) -> None:
        """:meth:`sinks.store.ObjectStore.check_bucket`, retried."""
        await self.call(f"HeadBucket {self.bucket}", lambda: self.store.check_bucket(endpoint_url))

    async def last_object(self, folder: str) -> tuple[str, ObjectMeta] | None:
        """:meth:`sinks.store.ObjectStore.last_object`, retried."""
        return await self.call(f"list {folder}", lambda: self.store.last_object(folder))

    async def abort_uploads(self, folder: str) -> int:
        """:meth:`sinks.store.ObjectStore.abort_uploads`, retried; how many were aborted."""
        return await self.call(f"abort uploads under {folder}", lambda: self.store.abort_uploads(folder))

    async def put_once(self, key: str, body: bytes, meta: ObjectMeta) -> PutOutcome:
        """:meth:`sinks.store.ObjectStore.put_once`, retried."""
        return await self.call(f"upload {key}", lambda: self.store.put_once(key, body, meta))
