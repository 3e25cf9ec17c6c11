"""Sibling samples answered by one request: records of one prompt's ``--samples`` that start in
the same event-loop turn are sent as one request with the server's ``n``, so the server prefills
the prompt once (docs/consumer.md, "Parallel samples"; SGLang's side: docs/sglang.md).

The consumer starts the records it has room for in one synchronous pass, so siblings fetched
together start in the same turn: each joins the open group of its request (the body without its
``rid`` and ``seed``), yields once, and the first to join sends for all. Siblings that start later
form a group of their own, and a group of one is no group: that record is sent alone.

Only prompts long beside their output budget share (:func:`worth_sharing`): SGLang answers a
request with ``n`` when its slowest copy is done, so copies of uneven length keep places the
consumer cannot refill at once, which costs more than the prefills saved unless the prompt is long
and the answers short (BENCHMARKS.md, "Samples with n").
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from aiokafka import ConsumerRecord

from consumers.servers.answers import ChatResult
from streams.errors import ServerError

__all__ = [
    "PROMPT_PER_OUTPUT",
    "SampleGroups",
    "SharedAnswer",
    "SharedRequest",
    "sample_family",
    "worth_sharing",
]

PROMPT_PER_OUTPUT: Final = 8
"""A prompt shares its samples' request when its estimated tokens are at least this many times
its ``max_tokens``: where the measured gain was (BENCHMARKS.md, "Samples with n")."""

_CHARS_PER_TOKEN: Final = 4
"""A prompt's length in tokens, estimated from its JSON text (no tokenizer here)."""


def worth_sharing(messages: Any, tools: Any, max_tokens: int) -> bool:
    """Whether a prompt of these ``messages`` and ``tools`` with this output budget (tokens)
    shares one request for its samples: its estimated length is :data:`PROMPT_PER_OUTPUT` times
    ``max_tokens`` or more."""
    chars = len(msgspec.json.encode(messages)) + (len(msgspec.json.encode(tools)) if tools else 0)
    return chars // _CHARS_PER_TOKEN >= PROMPT_PER_OUTPUT * max_tokens


class _SampleOf(msgspec.Struct):
    """The fields of a prompt record that say which prompt's sample it is, and how long."""

    id: str
    attempt: int = 0
    sample: int | None = None
    messages: msgspec.Raw = msgspec.Raw(b"[]")
    tools: msgspec.Raw | None = None
    params: dict[str, Any] = {}


_SAMPLE_OF = msgspec.json.Decoder(_SampleOf)


def sample_family(record: ConsumerRecord[bytes, bytes], default_max_tokens: int) -> tuple[str, int] | None:
    """The prompt id and attempt of a sample's record that may share a request with its siblings
    (:func:`worth_sharing`, its ``max_tokens`` else ``default_max_tokens``); None for any other
    record, or one that does not decode (its own task dead-letters it)."""
    try:
        of = _SAMPLE_OF.decode(record.value or b"")
    except msgspec.DecodeError:
        return None
    if of.sample is None:
        return None
    max_tokens = of.params.get("max_tokens") or default_max_tokens
    if not isinstance(max_tokens, int) or not worth_sharing(of.messages, of.tools, max_tokens):
        return None
    return of.id.rpartition("#")[0], of.attempt


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
