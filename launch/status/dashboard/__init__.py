"""The web dashboard of a run (``kafkagen status --serve``): live charts of throughput, lag and
ETA, quality classes and per-server occupancy, with the prompt counts and the gate state.

The page and its chart library (uPlot, MIT: ``static/NOTICE.md``) are bundled with the package,
so the dashboard works on a host without internet access. The server (:mod:`.server`) collects
the run's status (:func:`launch.status.collect.collect`, the ``kafkagen status --json`` shape) every few
seconds into a ring buffer (:mod:`.history`), so a page opened late shows the last half hour,
after the run's past read back from its topics' record timestamps (:mod:`.backfill`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka.errors import KafkaError

from launch.status.collect import Collector, quiet_kafka_logs
from launch.status.dashboard.backfill import topic_history
from launch.status.dashboard.history import History, sample_of
from launch.status.dashboard.server import STATIC, Dashboard, StatusSource, run_dashboard
from launch.status.shape import DASHBOARD_PORT
from streams.config import Settings
from streams.errors import ConfigError
from streams.kafka import kafka_unavailable

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

DEFAULT_PORT = DASHBOARD_PORT
"""The dashboard's port when ``--port`` is not given (it binds 127.0.0.1 unless ``--host`` says)."""


def serve_dashboard(
    settings: Settings,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    source: StatusSource | None = None,
    servers: Sequence[str] = (),
    interval_s: float = 5.0,
    history_s: float = 1800.0,
) -> None:
    """Serve the dashboard of ``settings.run_id`` on ``http://host:port/`` until SIGINT or SIGTERM
    (blocking; prints the URL once it listens). The status comes from one
    :class:`launch.status.collect.Collector` kept open (``servers``: URLs to show besides the members'
    own, as ``kafkagen status --server``), or from ``source`` when given; ``interval_s`` is the
    seconds between collections, ``history_s`` the seconds of history kept.

    Raises:
        ConfigError: the address cannot be bound, or ``interval_s``/``history_s`` is not positive.
    """
    if not (interval_s > 0 and history_s > 0):
        raise ConfigError(f"the dashboard needs --interval > 0 (got {interval_s:g} s)")
    asyncio.run(_serve(settings, host, port, source, servers, interval_s, history_s))


async def _serve(
    settings: Settings,
    host: str,
    port: int,
    source: StatusSource | None,
    servers: Sequence[str],
    interval_s: float,
    history_s: float,
) -> None:
    quiet_kafka_logs()
    collector = Collector(settings, servers=servers)

    async def collect() -> dict[str, Any]:
        try:
            return (await collector.collect()).to_dict()
        except (KafkaError, TimeoutError, OSError) as exc:
            await collector.stop()  # connect again at the next collection
            raise kafka_unavailable(settings.kafka, exc) from exc
        except BaseException:
            await collector.stop()
            raise

    try:

        async def past() -> list[dict[str, Any]]:
            try:
                return await topic_history(settings)
            except (KafkaError, TimeoutError, OSError) as exc:
                raise kafka_unavailable(settings.kafka, exc) from exc

        dashboard = Dashboard(
            source or collect,
            interval_s=interval_s,
            history_s=history_s,
            past=None if source is not None else past,
        )
        await run_dashboard(dashboard, host, port)
    finally:
        await collector.stop()
