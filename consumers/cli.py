"""The generation consumer's command line: ``python -m consumers.generate --server URL [--group G]
[--instance-id ID] [--metrics-port P]`` plus any settings flag (:func:`main`)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

from aiokafka.errors import KafkaError
from prometheus_client import start_http_server

from consumers.generate import GenerationConsumer
from streams import logs
from streams.config import Settings, check_server_url, load_settings
from streams.errors import ForeignRunError, KafkagenError
from streams.kafka import unreachable_message

__all__ = ["main", "tcp_port"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m consumers.generate --server URL [--group G] [--instance-id ID] [--metrics-port P]``
    plus any settings flag (``--generation.max-tokens 8192``, ``--kafka.bootstrap-servers ...``).
    Returns the exit status: 0 after a graceful stop, 1 on a fatal error, 2 on bad settings or a
    prompts topic of another run (``docs/runs.md``), 3 when Kafka cannot be reached at start."""
    parser = argparse.ArgumentParser(
        prog="python -m consumers.generate",
        description="Generation consumer: one per inference server (SGLang or OpenAI-compatible).",
        epilog="Any setting can also be given as a flag, e.g. --generation.max-tokens 8192 "
        "(see `python -m consumers.generate --settings-help`).",
    )
    parser.add_argument(
        "--server", required=True, help="the inference server's base URL, e.g. http://127.0.0.1:30000"
    )
    parser.add_argument("--group", help="consumer group id (default: <consumer.group>.<run id>)")
    parser.add_argument(
        "--instance-id", help="static membership id (default: <hostname>-<server host>-<port>)"
    )
    parser.add_argument(
        "--metrics-port", type=tcp_port, help="serve Prometheus metrics on 127.0.0.1:PORT (1-65535)"
    )
    parser.add_argument("--settings-help", action="store_true", help="list every settings flag")
    args, rest = parser.parse_known_args(argv)
    logs.configure()
    try:
        settings = load_settings(Settings, ["--help"] if args.settings_help else rest, prog=parser.prog)
    except KafkagenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        check_server_url(args.server)
    except ValueError as exc:
        print(f"error: --server {exc}", file=sys.stderr)
        return 2
    worker = GenerationConsumer(settings, args.server, group=args.group, instance_id=args.instance_id)
    if args.metrics_port:
        try:
            start_http_server(args.metrics_port, addr="127.0.0.1", registry=worker.metrics.registry)
        except OSError as exc:
            print(f"error: --metrics-port {args.metrics_port}: {exc}", file=sys.stderr)
            return 2

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        await worker.run()

    try:
        asyncio.run(run())
    except ForeignRunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KafkagenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (KafkaError, TimeoutError) as exc:  # unreachable or silent at start; later outages are retried
        print(unreachable_message(settings.kafka, exc), file=sys.stderr)
        return 3
    return 0


def tcp_port(text: str) -> int:
    """argparse type: a TCP port number (1-65535).

    Raises:
        argparse.ArgumentTypeError: ``text`` is not an integer in 1..65535.
    """
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return port
