"""The sink's command line: ``python -m sinks.s3 [--loglevel L] [--metrics-port P] [settings flags]``.

Parses the flags, loads the settings, creates the sink topics when missing, serves the metrics
and runs the faust worker (:mod:`sinks.app`) until SIGTERM/SIGINT. :mod:`sinks.s3` is the
``python -m`` entry that calls :func:`main`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from aiokafka.errors import KafkaError
from prometheus_client import start_http_server

from sinks.app import SinkWorker, create_app
from sinks.topics import ensure_sink_topics
from streams.config import Settings, load_settings
from streams.errors import KafkagenError
from streams.kafka import unreachable_message

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sinks.s3 [settings flags]``: run the sink until SIGTERM/SIGINT.

    Any setting is a flag or ``KAFKAGEN_*`` variable (``--run-id``, ``--topics.completions``,
    ``--s3.prefix``, ``--sink.flush-records``...). Exit status: 0 after a graceful stop, 1 on a
    fatal error (a permanent S3 error: one ``sink stopped: ...`` line says what to do), 2 on bad
    settings or ``--metrics-port``, 3 when Kafka is unreachable at start (later outages are
    waited out).
    """
    parser = argparse.ArgumentParser(
        prog="python -m sinks.s3",
        description="S3 sink: the completions and dead-letter topics to S3 as zstd JSON Lines, exactly once.",
        epilog="Any setting can also be given as a flag, e.g. --sink.flush-records 5000 "
        "(see `python -m sinks.s3 --settings-help`).",
    )
    parser.add_argument("--loglevel", default="info", help="faust worker log level (default info)")
    parser.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics on 127.0.0.1:PORT (see SinkMetrics)"
    )
    parser.add_argument("--settings-help", action="store_true", help="list every settings flag")
    args, rest = parser.parse_known_args(argv)
    try:
        settings = load_settings(Settings, ["--help"] if args.settings_help else rest, prog=parser.prog)
        app, service = create_app(settings)
    except KafkagenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:  # Kafka unreachable (or silent) at start: one clear line, not a faust crash report
        asyncio.run(ensure_sink_topics(settings))
    except (KafkaError, TimeoutError) as exc:
        print(unreachable_message(settings.kafka, exc), file=sys.stderr)
        return 3
    if args.metrics_port is not None:
        try:
            start_http_server(args.metrics_port, addr="127.0.0.1", registry=service.runner.metrics.registry)
        except (OSError, OverflowError) as exc:
            print(f"error: --metrics-port {args.metrics_port}: {exc}", file=sys.stderr)
            return 2
    worker = SinkWorker(app, service, loglevel=args.loglevel, quiet=True)
    worker.execute_from_commandline()  # exits the process: 0 graceful, 1 crash
    return 0  # pragma: no cover
