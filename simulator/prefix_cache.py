"""The simulated prefix cache: which leading messages of a request an earlier request also
began with (a message-granular stand-in for SGLang's radix cache, ``mem_cache/radix_cache.py``),
so ``usage.prompt_tokens_details.cached_tokens`` and the cache hit rate look plausible."""

from __future__ import annotations

from typing import Any

from simulator.output import estimate_prompt_tokens

__all__ = ["PREFIX_CACHE_ENTRIES", "PrefixCache"]

PREFIX_CACHE_ENTRIES = 100_000
"""Message prefixes remembered by the simulated prefix cache (oldest forgotten first)."""


class PrefixCache:
    """Message prefixes seen, oldest first, at most ``entries`` of them."""

    def __init__(self, entries: int = PREFIX_CACHE_ENTRIES) -> None:
        self.entries = entries
        self._seen: dict[int, None] = {}

    def clear(self) -> None:
        """Forget every prefix (a restarted server's cache is empty)."""
        self._seen.clear()

    def cached_tokens(self, messages: list[Any], prompt_tokens: int) -> int:
        """Tokens of the longest leading run of ``messages`` an earlier request also began
        with, at most ``prompt_tokens - 1``; remembers this request's prefixes."""
        cached = 0
        for end in range(1, len(messages) + 1):
            key = hash(repr(messages[:end]))
            if key in self._seen:
                cached = estimate_prompt_tokens(messages[:end], ())
            self._seen[key] = None
        while len(self._seen) > self.entries:
            del self._seen[next(iter(self._seen))]
        return max(0, min(cached, prompt_tokens - 1))
