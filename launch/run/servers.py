"""The main job's inference servers: which ones it starts itself, and waiting for the others.

The rule (``kafkagen run``, docs/main-job.md "Servers"): the main job starts llama.cpp servers only for
the **embedded default** (no ``--server`` and the ``servers`` setting not set by the user, neither
``KAFKAGEN_SERVERS`` nor ``--servers``) or when asked with ``--local-llm``. Every other server, any
address (loopback included), is used as it is: :func:`wait_for_servers` waits until each one can
generate (:meth:`consumers.servers.client.ServerClient.discover`) and says what it found.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from consumers.servers import ServerClient, ServerInfo
from streams.config import GenerationSettings, Settings
from streams.errors import RetriableServerError, UnavailableError

__all__ = ["describe_server", "embedded_llm", "servers_set_by_user", "wait_for_servers"]


def servers_set_by_user(settings: Settings) -> bool:
    """Whether the ``servers`` setting was given (``KAFKAGEN_SERVERS`` or ``--servers``) rather than
    left at its default, the embedded llama.cpp servers: ``"servers" in model_fields_set`` (pydantic),
    so ask before the main job replaces ``servers`` (:func:`launch.run.job.plan_run` does). A value
    equal to the default still counts as set. Why this works: docs/main-job.md "Servers".
    """
    return "servers" in settings.model_fields_set


def embedded_llm(settings: Settings, servers: Sequence[str], *, local_llm: bool) -> bool:
    """Whether the main job starts llama.cpp servers itself: asked (``local_llm``, ``--local-llm``),
    or the embedded default (no ``--server`` URLs in ``servers`` and the setting not set by the
    user, :func:`servers_set_by_user`)."""
    return local_llm or (not servers and not servers_set_by_user(settings))


def describe_server(info: ServerInfo) -> str:
    """One line on what discovery found: kind, model, slots (requests run at once), context
    (tokens per request); ``?`` where the server does not say."""

    def known(value: int | None) -> str:
        return "?" if value is None else str(value)

    version = f" {info.version}" if info.version else ""
    return (
        f"server {info.url}: {info.kind}{version}, model {info.model}, "
        f"{known(info.max_running_requests)} slots, context {known(info.context_length)} tokens"
    )


async def wait_for_servers(
    urls: Sequence[str], generation: GenerationSettings, *, timeout_s: float, hint: str
) -> list[ServerInfo]:
    """Wait until every server in ``urls`` can generate (at most ``timeout_s`` seconds, all at
    once), then return what each is (:meth:`consumers.servers.client.ServerClient.discover`: SGLang
    ``/health_generate``, elsewhere a 1-token chat completion; docs/sglang.md "Discovery").

    Raises:
        UnavailableError: a server did not answer within ``timeout_s``; the message names every
            such URL, then ``hint`` (what to do).
    """
    clients = [ServerClient(url, generation, pool_size=1) for url in urls]
    try:
        # discover() checks its deadline between tries; one try may take longer (a hung socket):
        # the outer bound keeps the promise of ``timeout_s``.
        results = await asyncio.gather(
            *(asyncio.wait_for(c.discover(wait_s=timeout_s), timeout_s + 5.0) for c in clients),
            return_exceptions=True,
        )
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    infos: list[ServerInfo] = []
    down: list[str] = []
    for url, result in zip(urls, results, strict=True):
        if isinstance(result, RetriableServerError | TimeoutError):
            down.append(url)
        elif isinstance(result, BaseException):
            raise result
        else:
            infos.append(result)
    if down:
        which = "server " + down[0] if len(down) == 1 else "servers " + ", ".join(down)
        raise UnavailableError(f"inference {which} did not answer within {timeout_s:.0f} s ({hint})")
    return infos
