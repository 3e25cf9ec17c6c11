"""The web dashboard of a run (``kafkagen status --serve``): live charts of throughput, lag and
ETA, quality classes and per-server occupancy, with the prompt counts and the gate state.

The page and its chart library (uPlot, MIT: ``static/NOTICE.md``) are bundled with the package,
so the dashboard works on a host without internet access. The server (:mod:`.server`) collects
the run's status (:func:`launch.status.collect`, the ``kafkagen status --json`` shape) every few
seconds into a ring buffer (:mod:`.history`), so a page opened late shows the last half hour.
"""

from __future__ import annotations

import asyncio
from typing import Any

from launch.dashboard.history import History, sample_of
from launch.dashboard.server import STATIC, Dashboard, StatusSource, run_dashboard
from streams.config import Settings
from streams.errors import ConfigError

__all__ = [
    "DEFAULT_PORT",
    "STATIC",
    "Dashboard",
    "History",
    "StatusSource",
    "run_dashboard",
    "sample_of",
    "serve_dashboard",
]

DEFAULT_PORT = 8765
"""The dashboard's port when ``--port`` is not given (it binds 127.0.0.1 unless ``--host`` says)."""


def _collector(settings: Settings) -> StatusSource:
    # imported when used: the status module loads the Kafka clients (until branch status lands here)
    from launch.status import collect  # type: ignore[import-not-found, unused-ignore]

    async def source() -> dict[str, Any]:
        status = await collect(settings)
        data: dict[str, Any] = status.to_dict()
        return data

    return source


def serve_dashboard(
    settings: Settings,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    source: StatusSource | None = None,
    interval_s: float = 5.0,
    history_s: float = 1800.0,
) -> None:
    """Serve the dashboard of ``settings.run_id`` on ``http://host:port/`` until SIGINT or SIGTERM
    (blocking; prints the URL once it listens). ``source`` replaces the status collection
    (default: :func:`launch.status.collect` on ``settings``); ``interval_s`` is the seconds between
    collections, ``history_s`` the seconds of history kept.

    Raises:
        ConfigError: the address cannot be bound, or ``interval_s``/``history_s`` is not positive.
    """
    if not (interval_s > 0 and history_s > 0):
        raise ConfigError(f"the dashboard needs --interval > 0 (got {interval_s:g} s)")
    dashboard = Dashboard(source or _collector(settings), interval_s=interval_s, history_s=history_s)
    asyncio.run(run_dashboard(dashboard, host, port))
