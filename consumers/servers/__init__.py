"""Inference servers behind one interface: a kind per server family, one client.

Public surface: :class:`ServerClient` (:mod:`.client`); :class:`ServerKind`, :class:`ServerInfo`,
:class:`ServerLoad` (:mod:`.base`); :class:`ChatResult` (:mod:`.answers`); :func:`request_id`
(:mod:`.requests`); the kinds :mod:`.sglang`, :mod:`.llamacpp`, :mod:`.openai`, listed in
:mod:`.registry`. docs/servers.md explains how a kind is recognised and what it provides.
"""

from consumers.servers.answers import ChatResult
from consumers.servers.base import ServerInfo, ServerKind, ServerLoad
from consumers.servers.client import ServerClient
from consumers.servers.requests import request_id

__all__ = ["ChatResult", "ServerClient", "ServerInfo", "ServerKind", "ServerLoad", "request_id"]
