"""The sink's command line: ``kafkagen sink`` (``python -m sinks.s3``) ``[--metrics-port P]``
plus any settings flag.

Loads the settings, creates the sink topics when missing, serves the metrics and runs the faust
worker (:mod:`sinks.app`) until SIGTERM/SIGINT. Exit status (:mod:`streams.cli`): 0 after a
graceful stop, 1 on a fatal error (a permanent S3 error: one ``sink stopped: ...`` line says what
to do), 2 on bad settings or ``--metrics-port``, 3 when Kafka is unreachable at start, or lost
before the sink's consumer started (later outages are waited out).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import click
from aiokafka.errors import KafkaError

from sinks.app import SinkWorker, create_app
from sinks.topics import ensure_sink_topics
from streams.cli import command_settings, log_level, port, run_command, settings_options
from streams.kafka import kafka_unavailable
from streams.metrics import serve_metrics

__all__ = ["main", "sink"]


@click.command(
    "sink",
    help="S3 sink: the completions and dead-letter topics to S3 as zstd JSON Lines, exactly once "
    "(upload, then commit). Every setting is a flag too, e.g. --sink.flush-records 5000 (--settings-help).",
)
@click.option("--metrics-port", type=int, help="serve Prometheus metrics on 127.0.0.1:PORT (docs/metrics.md)")
@settings_options("run_id", "replay_of")
@click.pass_context
def sink(ctx: click.Context, metrics_port: int | None) -> int:
    settings = command_settings(ctx)
    app, service = create_app(settings)
    try:  # Kafka unreachable (or silent) at start: one clear line, not a faust crash report
        asyncio.run(ensure_sink_topics(settings))
    except (KafkaError, TimeoutError) as exc:
        raise kafka_unavailable(settings.kafka, exc) from None
    if metrics_port is not None:
        serve_metrics(port(metrics_port), service.runner.metrics.registry)
    worker = SinkWorker(app, service, loglevel=log_level(ctx), quiet=True)
    worker.execute_from_commandline()  # exits the process: 0 graceful, 1 crash
    return 0  # pragma: no cover


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m sinks.s3") -> int:
    """Run the sink until SIGTERM/SIGINT; returns the exit status (the module docstring)."""
    return run_command(sink, argv, prog=prog)
