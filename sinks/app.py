"""The faust app that hosts the sink: worker lifecycle, logging, signals and exit codes.

faust's own Kafka consumer, producer, web server and tables are switched off (``BootStrategy``):
:class:`sinks.runner.SinkRunner` owns the sink's one ``AIOKafkaConsumer``, because faust-streaming
0.15.3's agent path cannot carry rules 3 and 4 of docs/sink.md without patching faust internals (the
four reasons: docs/sink.md, "Why the sink runs its own aiokafka consumer inside the faust app"). The
faust app id and the consumer group are both :func:`sinks.topics.group_id`: ``<sink.group>.<run_id>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from typing import Any

import faust
import mode
from faust.app.base import BootStrategy

from sinks.runner import SinkRunner
from sinks.topics import group_id
from streams.config import Settings
from streams.errors import ExitCode, KafkagenError, UnavailableError
from streams.logs import RepeatFilter, RetriedCoordinatorLookupAsInfo

__all__ = ["SinkApp", "SinkService", "SinkWorker", "create_app"]

log = logging.getLogger("kafkagen.sink")


class _HostOnly(BootStrategy):
    """faust starts no Kafka client, web server or sensors: the sink's own consumer owns Kafka."""

    enable_kafka = False
    enable_web = False
    enable_sensors = False


class SinkApp(faust.App):
    """The faust app hosting the sink (worker lifecycle, signals, logging; docs/sink.md)."""

    BootStrategy = _HostOnly

    def _create_directories(self) -> None:
        """No data directories: the sink keeps no local state (no tables); S3 and Kafka hold it all."""


class SinkService(mode.Service):
    """Runs a :class:`SinkRunner` for the app's worker: stopping the worker stops the runner
    gracefully. A non-retriable :class:`~streams.errors.KafkagenError` (a permanent S3 error, a
    missing bucket) or Kafka lost while the sink starts (:class:`~streams.errors.UnavailableError`)
    is logged as one error line and stops the worker as SIGTERM does, then :class:`SinkWorker`
    exits with status 1 (3 for Kafka, as at start: :mod:`sinks.cli`); any other error
    crashes the worker (status 1, with its traceback)."""

    def __init__(self, runner: SinkRunner, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runner = runner
        self.exit_status = 0

    @mode.Service.task
    async def _run(self) -> None:
        try:
            await self.runner.run()
        except KafkagenError as exc:
            if exc.retriable and not isinstance(exc, UnavailableError):
                raise
            log.error("sink stopped: %s", exc)
            self.exit_status = ExitCode.UNAVAILABLE if isinstance(exc, UnavailableError) else ExitCode.FAILED
            os.kill(os.getpid(), signal.SIGTERM)  # the worker's own graceful stop

    async def on_start(self) -> None:
        """Rate-limit aiokafka's repeated lines (about 100 a second while Kafka is unreachable) on
        the handlers faust's worker installed, as every kafkagen process does (:mod:`streams.logs`)."""
        for handler in logging.getLogger().handlers:
            handler.addFilter(RetriedCoordinatorLookupAsInfo())
            handler.addFilter(RepeatFilter())

    async def on_stop(self) -> None:
        self.runner.request_stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self.runner.done.wait(), self.runner.settings.sink.shutdown_deadline_s + 15
            )


class SinkWorker(faust.Worker):
    """faust's worker, exiting with :attr:`SinkService.exit_status` after a graceful stop."""

    def __init__(self, app: faust.App, service: SinkService, **kwargs: Any) -> None:
        super().__init__(app, service, **kwargs)
        self.sink_service = service

    def stop_and_shutdown(self) -> None:
        super().stop_and_shutdown()
        if self.sink_service.exit_status:
            raise SystemExit(self.sink_service.exit_status)  # not caught by mode's exiting()


def create_app(settings: Settings) -> tuple[faust.App, SinkService]:
    """The faust app (id :func:`group_id`) and the service to start with its worker.

    The broker timeouts mirror the sink consumer's (``sink.session_timeout_ms`` ...) so the app's
    configuration tells the truth about the group even though faust's own consumer is off.
    """
    sink = settings.sink
    app_id = group_id(settings)
    first = settings.kafka.bootstrap_servers.split(",")[0].strip()
    app = SinkApp(
        app_id,
        broker=f"kafka://{first}",
        web_enabled=False,
        autodiscover=False,
        broker_session_timeout=sink.session_timeout_ms / 1000,
        broker_rebalance_timeout=sink.rebalance_ms / 1000,
        broker_heartbeat_interval=sink.heartbeat_interval_ms / 1000,
        worker_redirect_stdouts=False,
    )
    return app, SinkService(SinkRunner(settings))
