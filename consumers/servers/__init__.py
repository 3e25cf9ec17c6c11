"""Inference servers behind one interface: a kind per server family, one client.

Public surface: :class:`ServerClient` (:mod:`.client`); :class:`ServerKind`, :class:`ServerInfo`,
:class:`ServerLoad` (:mod:`.base`); :class:`ChatResult` (:mod:`.answers`); :func:`request_id`
(:mod:`.requests`); the kinds :mod:`.sglang`, :mod:`.llamacpp`, :mod:`.openai`, listed in
:mod:`.registry`. docs/servers.md explains how a kind is recognised and what it provides.
"""

from typing import TYPE_CHECKING, Any

from consumers.servers.answers import ChatResult
from consumers.servers.base import ServerInfo, ServerKind, ServerLoad
from consumers.servers.requests import request_id

if TYPE_CHECKING:
    from consumers.servers.client import ServerClient


def __getattr__(name: str) -> Any:
    """:class:`ServerClient` loads its HTTP client (aiohttp) when first asked for: the modules that
    only build requests or read answers (the commands' ``--help`` among them) do without it."""
    if name == "ServerClient":
        from consumers.servers.client import ServerClient

        return ServerClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ChatResult", "ServerClient", "ServerInfo", "ServerKind", "ServerLoad", "request_id"]
