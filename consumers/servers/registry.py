"""The server kinds discovery knows, in the order their probe paths are tried.

Adding a kind: its module, one entry in :data:`KINDS`.
"""

from __future__ import annotations

from consumers.servers.base import LoadSeries, ServerKind
from consumers.servers.llamacpp import LlamaCpp
from consumers.servers.openai import OpenAICompatible
from consumers.servers.sglang import SGLang
from consumers.servers.vllm import VLLM

__all__ = ["FALLBACK", "KINDS", "LOAD_SERIES", "kind_named"]

KINDS: tuple[ServerKind, ...] = (SGLang(), LlamaCpp(), VLLM())
"""kinds recognised by a probe path, tried in this order."""

FALLBACK: ServerKind = OpenAICompatible()
"""the kind of a server no probe path recognised."""

LOAD_SERIES: tuple[LoadSeries, ...] = tuple(k.load_series for k in KINDS if k.load_series)
"""every kind's load series, for a ``/metrics`` body whose server kind is not known yet."""


def kind_named(name: str) -> ServerKind:
    """The kind whose :attr:`ServerKind.name` is ``name``.

    Raises:
        KeyError: no such kind (the message lists the known names).
    """
    for kind in (*KINDS, FALLBACK):
        if kind.name == name:
            return kind
    raise KeyError(f"unknown server kind {name!r}; known: {', '.join(k.name for k in (*KINDS, FALLBACK))}")
