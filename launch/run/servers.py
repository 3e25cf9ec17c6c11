"""The main job's inference servers: which ones it starts itself, and waiting for the others.

The rule (``kafkagen run``, docs/main-job.md "Servers"): the main job starts llama.cpp servers only for
the **embedded default** (no ``--server`` and the ``servers`` setting not set by the user, neither
``KAFKAGEN_SERVERS`` nor ``--servers``) or when asked with ``--local-llm``. Every other server, any
address (loopback included), is used as it is: :func:`wait_for_servers` waits until each one can
generate (:meth:`consumers.servers.client.ServerClient.discover`) and says what it found.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

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
    urls: Sequence[str],
    generation: GenerationSettings,
    *,
    timeout_s: float,
    hint: str,
    busy: Callable[[str], None] | None = None,
) -> list[ServerInfo]:
    """Wait until every server in ``urls`` can generate (at most ``timeout_s`` seconds, all at
    once), then return what each is (:meth:`consumers.servers.client.ServerClient.discover`: SGLang
    ``/health_generate``, elsewhere a 1-token chat completion; docs/sglang.md "Discovery").

    With ``busy``, a server whose generation probe did not finish in time but which answers its
    discovery endpoints (:meth:`~consumers.servers.client.ServerClient.describe`) is busy, not
    down (generating for another run, say): ``busy`` gets a line saying so, with its load from
    ``/metrics`` when it has one, and it is returned with the others (its requests will queue
    behind the ones it has).

    Raises:
        UnavailableError: a server did not answer within ``timeout_s``; the message names every
            such URL, then ``hint`` (what to do).
    """
    clients = [ServerClient(url, generation, pool_size=1) for url in urls]
    infos: list[ServerInfo] = []
    down: list[str] = []
    try:
        # discover() checks its deadline between tries; one try may take longer (a hung socket):
        # the outer bound keeps the promise of ``timeout_s``.
        results = await asyncio.gather(
            *(asyncio.wait_for(c.discover(wait_s=timeout_s), timeout_s + 5.0) for c in clients),
            return_exceptions=True,
        )
        for client, result in zip(clients, results, strict=True):
            if isinstance(result, RetriableServerError | TimeoutError):
                described = await _busy(client, timeout_s) if busy is not None else None
                if described is None:
                    down.append(client.base_url)
                    continue
                info, line = described
                assert busy is not None
                busy(line)
                infos.append(info)
            elif isinstance(result, BaseException):
                raise result
            else:
                infos.append(result)
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    if down:
        which = "server " + down[0] if len(down) == 1 else "servers " + ", ".join(down)
        raise UnavailableError(f"inference {which} did not answer within {timeout_s:.0f} s ({hint})")
    return infos


async def _busy(client: ServerClient, timeout_s: float) -> tuple[ServerInfo, str] | None:
    """What a server whose generation probe timed out is, and the line saying it is busy; None
    when it does not answer its discovery endpoints either (it is down)."""
    try:
        info = await client.describe(wait_s=10.0)
    except RetriableServerError:
        return None
    load = await client.load()
    queue = "" if load is None else f"; its /metrics: {load.running} running, {load.queued} queued"
    line = (
        f"server {info.url} is busy, not down: it answers as {info.kind}, but a 1-token generation "
        f"did not finish within {timeout_s:.0f} s{queue}. This run's requests queue behind the ones it "
        "has; its consumers wait for it (consumer.startup_timeout_s)"
    )
    return info, line
