"""The dashboard's HTTP server (aiohttp): one page, its bundled assets and two JSON endpoints
(``/api/status``, ``/api/history``).

One sampler task collects the status every ``interval_s`` seconds, whether or not a page is open;
a failed collection is logged once, shown on the page as ``error`` and tried again, and the last
good status stays. The endpoints and what they answer: docs/dashboard.md, "Endpoints".
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from launch.status.dashboard.backfill import align_published
from launch.status.dashboard.history import History, sample_of
from streams.errors import ConfigError

__all__ = ["STATIC", "Dashboard", "PastSource", "StatusSource", "run_dashboard"]

log = logging.getLogger("kafkagen.dashboard")

STATIC = Path(__file__).with_name("static")
"""The bundled assets (package data: ``pyproject.toml``, ``[tool.setuptools.package-data]``)."""

StatusSource = Callable[[], Awaitable[dict[str, Any]]]
"""An async callable returning one status dict (``launch.status.collect.collect(settings)`` as a dict)."""

PastSource = Callable[[], Awaitable[list[dict[str, Any]]]]
"""An async callable returning the run's past as samples, oldest first (``backfill.topic_history``)."""


class Dashboard:
    """The sampler and the web application over one status source.

    Args:
        source: returns the current status dict; called every ``interval_s`` seconds.
        interval_s: seconds between collections (and the page's refresh).
        history_s: seconds of samples kept for ``/api/history``.
        past: the run's past (read once, after the first collection that worked, and after
            each one until it works too), put before the collected samples (:meth:`History.seed`).

    Raises:
        ValueError: ``interval_s`` or ``history_s`` not positive.
    """

    def __init__(
        self,
        source: StatusSource,
        *,
        interval_s: float = 5.0,
        history_s: float = 1800.0,
        past: PastSource | None = None,
    ) -> None:
        self.source = source
        self.past = past
        self._past_error: str | None = None
        self.interval_s = interval_s
        self.history = History(history_s=history_s, interval_s=interval_s)
        self.latest: dict[str, Any] | None = None
        self.error: str | None = None
        self._first = asyncio.Event()

    async def sample_once(self) -> None:
        """Collect one status: keep it as the latest and add its sample to the history; a failure
        sets :attr:`error` (logged when it changes) and keeps the last good status."""
        try:
            status = await self.source()
            sample = sample_of(status)
        except Exception as exc:  # any failure of one collection: shown, retried at the next tick
            text = str(exc) or type(exc).__name__
            if text != self.error:
                log.warning(
                    "dashboard: collecting the status failed: %s (retried every %g s)", text, self.interval_s
                )
            self.error = text
        else:
            if self.error is not None:
                log.warning("collecting the status works again")
            self.latest, self.error = status, None
            self.history.add(sample)
        finally:
            self._first.set()

    async def read_past(self) -> None:
        """Seed the history with :attr:`past` (once it worked, never again); a failure is logged
        when it changes and tried again at the next collection."""
        assert self.past is not None
        try:
            samples = await self.past()
        except Exception as exc:  # the charts start at the dashboard's start until it works
            text = str(exc) or type(exc).__name__
            if text != self._past_error:
                log.warning("dashboard: reading the run's past from its topics failed: %s", text)
            self._past_error = text
        else:
            prompts = (self.latest or {}).get("prompts") or {}
            if prompts.get("published_exact") and isinstance(prompts.get("published"), int):
                samples = align_published(samples, prompts["published"])
            self.history.seed(samples)
            self.past = None

    async def run_sampler(self) -> None:
        """Collect every ``interval_s`` seconds until cancelled (a slow collection is followed by the
        next one at once, never by a burst)."""
        while True:
            started = time.monotonic()
            await self.sample_once()
            if self.past is not None and self.error is None:
                await self.read_past()
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    async def _index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def _status(self, request: web.Request) -> web.Response:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(10.0, 2 * self.interval_s)):
                await self._first.wait()
        if self.latest is None:
            reason = self.error or "no status collected yet"
            return web.json_response({"error": reason}, status=503)
        return web.json_response(self.latest, headers={"Cache-Control": "no-store"})

    async def _history(self, request: web.Request) -> web.Response:
        since_text = request.query.get("since")
        try:
            since = float(since_text) if since_text else None
        except ValueError:
            return web.json_response({"error": f"since={since_text!r} is not a Unix time"}, status=400)
        body = {
            "interval_s": self.interval_s,
            "history_s": self.history.history_s,
            "error": self.error,
            "seeded": self.history.seeded,
            "samples": self.history.since(since),
        }
        return web.json_response(body, headers={"Cache-Control": "no-store"})

    def app(self) -> web.Application:
        """The aiohttp application (routes: docs/dashboard.md); it runs the sampler while it
        is started."""
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/api/status", self._status)
        app.router.add_get("/api/history", self._history)
        app.router.add_static("/static/", STATIC, follow_symlinks=False)

        async def sampler(app: web.Application) -> Any:
            task = asyncio.create_task(self.run_sampler(), name="dashboard-sampler")
            yield
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        app.cleanup_ctx.append(sampler)
        return app


async def run_dashboard(
    dashboard: Dashboard,
    host: str,
    port: int,
    *,
    echo: Callable[[str], None] = print,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve ``dashboard`` on ``host``:``port`` until SIGINT or SIGTERM (or ``stop`` is set), then
    stop gracefully. ``echo`` gets one line with the page's URL once it listens.

    Raises:
        ConfigError: the address cannot be bound (in use, or not this host's); the message names it.
    """
    runner = web.AppRunner(dashboard.app(), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror or exc})"
            raise ConfigError(
                f"dashboard address {host}:{port} {why}: choose another with --port (or --host)"
            ) from exc
        bound = runner.addresses[0][1] if runner.addresses else port  # port 0: the one the OS chose
        shown = f"[{host}]" if ":" in host else host
        echo(f"dashboard: http://{shown}:{bound}/ (refreshes every {dashboard.interval_s:g} s; Ctrl-C stops)")
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    finally:
        await runner.cleanup()
