"""Any other OpenAI-compatible server: the fallback kind, when no kind's probe path answers.

It reports no slots and no load metrics: the consumer's window adapts from latency and errors
alone. Everything it does is :class:`consumers.servers.base.ServerKind`'s default.
"""

from __future__ import annotations

from typing import ClassVar

from consumers.servers.base import ServerKind

__all__ = ["OpenAICompatible"]


class OpenAICompatible(ServerKind):
    """A server that only speaks ``/v1/models`` and ``/v1/chat/completions``."""

    name: ClassVar[str] = "openai"
