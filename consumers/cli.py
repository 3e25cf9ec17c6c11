"""The generation consumer's command line: ``kafkagen generate`` (``python -m consumers.generate``)
``--server URL [--group G] [--instance-id ID] [--metrics-port P]`` plus any settings flag.

``--run-id RUN`` alone joins a run with its run record's generation settings
(:mod:`streams.runs.record`); a setting given to this consumer wins. Exit status
(:mod:`streams.cli`): 0 after a graceful stop, 1 on a fatal error, 2 on bad settings or a prompts
topic of another run, 3 when Kafka cannot be reached at start.

Design: docs/consumer.md, "Command line".
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence

import click
from aiokafka.errors import KafkaError

from consumers.generate import GenerationConsumer
from streams.cli import command_settings, flag_given, run_command, settings_options
from streams.config import GateSettings, GenerationSettings, check_server_url
from streams.errors import ConfigError
from streams.kafka import kafka_unavailable
from streams.metrics import serve_metrics
from streams.runs.record import (
    describe_join,
    gate_in_environment,
    generation_in_environment,
    join_settings,
    read_run_record,
)

__all__ = ["generate", "main"]

log = logging.getLogger("kafkagen.generate")


@click.command(
    "generate",
    help="Generation consumer: one per inference server (SGLang or OpenAI-compatible). --run-id RUN alone "
    "joins a run its main job started, with the run's generation settings. Every setting is a flag too, "
    "e.g. --generation.max-tokens 8192 (--settings-help), and wins over the run's.",
)
@click.option("--server", required=True, help="the inference server's base URL, e.g. http://127.0.0.1:30000")
@click.option("--group", help="consumer group id (default: <consumer.group>.<run id>)")
@click.option("--instance-id", help="static membership id (default: <hostname>-<server host>-<port>)")
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    help="serve Prometheus metrics on 127.0.0.1:PORT (docs/metrics.md)",
)
@settings_options("run_id", "replay_of")
@click.pass_context
def generate(
    ctx: click.Context, server: str, group: str | None, instance_id: str | None, metrics_port: int | None
) -> None:
    settings = command_settings(ctx)
    try:
        check_server_url(server)
    except ValueError as exc:
        raise ConfigError(f"--server {exc}") from None
    # A run started by the main job has a run record: take its generation settings and parent.
    try:
        record = asyncio.run(read_run_record(settings))
    except (KafkaError, TimeoutError) as exc:
        raise kafka_unavailable(settings.kafka, exc) from None
    if record is not None:
        flags = {name for name in GenerationSettings.model_fields if flag_given(ctx, "generation", name)}
        gate_flags = {name for name in GateSettings.model_fields if flag_given(ctx, "gate", name)}
        settings = join_settings(
            settings,
            record,
            given=flags | generation_in_environment(),
            given_gate=gate_flags | gate_in_environment(),
        )
        log.info("%s", describe_join(record, settings))
    worker = GenerationConsumer(settings, server, group=group, instance_id=instance_id)
    if metrics_port:
        serve_metrics(metrics_port, worker.metrics.registry)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        await worker.run()

    try:
        asyncio.run(run())
    except (KafkaError, TimeoutError) as exc:  # unreachable or silent at start; later outages are retried
        raise kafka_unavailable(settings.kafka, exc) from None


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m consumers.generate") -> int:
    """Run one generation consumer until SIGTERM/SIGINT; returns the exit status (docs/consumer.md)."""
    return run_command(generate, argv, prog=prog)
