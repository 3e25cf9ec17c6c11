"""Sibling samples answered by one request: records of one prompt's ``--samples`` that start in
the same event-loop turn are sent as one request with the server's ``n``, so the server prefills
the prompt once (docs/consumer.md, "Parallel samples"; SGLang's side: docs/sglang.md).

The consumer starts the records it has room for in one synchronous pass, so siblings fetched
together start in the same turn: each joins the open group of its request (the body without its
``rid`` and ``seed``), yields once, and the first to join sends for all. Siblings that start later
form a group of their own, and a group of one is no group: that record is sent alone.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from consumers.servers.answers import ChatResult
from streams.errors import ServerError

__all__ = ["SampleGroups", "SharedAnswer", "SharedRequest"]

SharedAnswer = tuple[dict[str, Any], list[ChatResult], float]
"""What a shared request got: the body sent (with ``n``), its ``n`` results in order, and the Unix
time it was sent."""


@dataclass(eq=False)
class SharedRequest:
    """One group of siblings: ``size`` members, the first of which sends; ``answer`` resolves to
    the :data:`SharedAnswer`, the error the request failed with, or None when the sender was
    cancelled (each member then goes on alone)."""

    key: bytes
    answer: asyncio.Future[SharedAnswer | ServerError | None]
    size: int = 0

    def settle(self, answer: SharedAnswer | ServerError | None) -> None:
        """Resolve :attr:`answer` once (later calls do nothing)."""
        if not self.answer.done():
            self.answer.set_result(answer)


class SampleGroups:
    """The groups still open for joining, by request key (one consumer's)."""

    def __init__(self) -> None:
        self._open: dict[bytes, SharedRequest] = {}
        self.hidden = 0
        """copies of the shared requests in flight beyond one each: the most of them that may have
        finished on the server while their request waits for its slowest copy (SGLang answers an
        ``n`` request only when every copy is done), each still counted in the window."""

    def join(self, key: bytes) -> tuple[SharedRequest, int]:
        """The open group of ``key`` (a new one when none) and this member's 0-based place in it:
        place 0 sends for the group."""
        group = self._open.get(key)
        if group is None:
            group = self._open[key] = SharedRequest(key, asyncio.get_running_loop().create_future())
        place = group.size
        group.size += 1
        return group, place

    def close(self, group: SharedRequest) -> None:
        """No member joins ``group`` any more (its sender is about to send)."""
        if self._open.get(group.key) is group:
            del self._open[group.key]
