"""Waiting a bounded time for a step that may wait for Kafka forever.

:func:`within` runs the step in a task of its own and cancels that task, never the caller, when
time is up. ``asyncio.timeout`` cancels the calling task instead and then waits for the step to
give up: a step that swallows its cancellation (closing a Kafka client can) keeps the caller
waiting, and a cancellation raised inside a library's own task (aiokafka's coordinator) reaches
the caller as if it were its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["within"]

T = TypeVar("T")


async def within(seconds: float, step: Awaitable[T]) -> tuple[bool, T | None]:
    """Await ``step`` for at most ``seconds``.

    Returns:
        ``(True, its result)`` when it finished; ``(False, None)`` when it did not (it is
        cancelled, the caller is not) or when it ended cancelled by someone else.

    Raises:
        whatever ``step`` raised, when it finished by raising.
    """
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        return False, None
    if task.cancelled():
        return False, None
    return True, task.result()
