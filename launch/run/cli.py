"""``kafkagen run`` (also ``python -m launch.run``): the main job's command line (the job itself:
:mod:`launch.run.job`). A module of its own, so that the ``kafkagen`` group (:mod:`launch.cli`) loads
it, and the producer's option declarations it shares (:func:`producers.cli.mapping_options`),
only when ``run`` is the command."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from launch.preflight.cli import preflight_options
from launch.preflight.options import PreflightOptions
from launch.serve.cli import fleet_options, spec_from_options
from streams.cli import command_settings, flag_given, mapping_options, run_command, settings_options
from streams.config import Settings
from streams.errors import ConfigError
from streams.inputs import InputMapping
from streams.runs import naming

__all__ = ["run_command_", "run_main"]


@click.command(
    "run",
    help="The main job end to end: start the local stack, one generation consumer per server and "
    "the S3 sink under supervisord, publish the prompts, show progress, export the dataset. Servers "
    "given with --server (or the servers setting) are used as they are, whatever their address; "
    "without them the job starts two local llama.cpp servers. The same --run-id resumes; settings "
    "flags (see --settings-help) apply to every process of the run. Progress counts prompts, each "
    "plain line after its time: 'generated' is result records written of the prompts published "
    "(what is left is kafkagen status's 'remaining'), 'in S3' the results the sink committed; no "
    "Kafka lag is shown (lag counts offsets: kafkagen status --help). The ETA is an interval.",
)
@click.option(
    "--prompts",
    "prompts",
    multiple=True,
    metavar="FILE",
    help="prompt file(s), any format and input `kafkagen produce` reads: a file, a glob, '-', "
    "s3://bucket/key (default: the bundled demo prompts)",
)
@mapping_options
@click.option(
    "--server",
    "servers",
    multiple=True,
    metavar="URL",
    help="inference server already running, once per server, used as it is (default: the servers "
    "setting, else two local llama.cpp servers the job starts)",
)
@click.option(
    "--local-llm",
    is_flag=True,
    help="start llama.cpp (Gemma-3-270M on CPU) on the loopback ports of the servers instead of using "
    "servers already running there",
)
@click.option(
    "--serve",
    "serve_model",
    metavar="MODEL_PATH",
    help="launch a fleet of SGLang servers first, one per GPU (--gpus N; kafkagen serve up's options, "
    "docs/serve.md), and run on it; it keeps running afterwards (kafkagen serve down)",
)
@fleet_options
@preflight_options
@click.option(
    "--server-timeout",
    "server_timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="wait this long for servers already running to answer, then exit 3 "
    "(default: consumer.startup_timeout_s, 900)",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    help="tokens per completion (default: 128 on the local llama.cpp servers, else generation.max_tokens)",
)
@click.option(
    "--thinking/--no-thinking",
    default=None,
    help="ask for reasoning (chat_template_kwargs.enable_thinking); default off on the local llama.cpp "
    "servers, else generation.chat_template_kwargs (on)",
)
@click.option(
    "--max-output-tokens",
    type=click.IntRange(min=1),
    metavar="N",
    help="halt the run (resumable) once its completions hold N output tokens in all; re-run with a "
    "larger N to go on (gate.max_output_tokens, docs/budgets.md)",
)
@click.option(
    "--deadline",
    metavar="WHEN",
    help="halt the run (resumable) when its projected finish passes WHEN: a time with its zone "
    "(2026-12-08T06:00:00Z) or a duration from now (2h, 1h30m, PT2H) (gate.deadline, docs/budgets.md)",
)
@click.option(
    "--to",
    help="dataset destination: a folder or s3://bucket/prefix (default <home>/datasets/<run id>, the home "
    "setting being KAFKAGEN_HOME, .local)",
)
@click.option(
    "--export-format",
    "export_formats",
    multiple=True,
    metavar="FORMAT",
    help="dataset format of the export: jsonl (default), parquet, openai_batch, chat; repeatable or "
    "comma-separated (kafkagen export --output-format; docs/export.md)",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    help="give up after this many seconds",
)
@click.option("--keep-running", is_flag=True, help="leave the consumers and the sink running")
@click.option("--no-progress", is_flag=True, help="no progress bars")
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    metavar="BASE",
    help="serve Prometheus metrics on 127.0.0.1 (docs/metrics.md): the producer on BASE, the sink on "
    "BASE+1, consumer i on BASE+2+i (default: off)",
)
@settings_options("run_id", "replay_of", log_default="warning")
@click.pass_context
def run_command_(
    ctx: click.Context,
    prompts: tuple[str, ...],
    mapping: InputMapping,
    servers: tuple[str, ...],
    serve_model: str | None,
    fleet: dict[str, Any],
    preflight: PreflightOptions,
    local_llm: bool,
    server_timeout_s: float | None,
    max_tokens: int | None,
    thinking: bool | None,
    max_output_tokens: int | None,
    deadline: str | None,
    to: str | None,
    export_formats: tuple[str, ...],
    timeout_s: float | None,
    keep_running: bool,
    no_progress: bool,
    metrics_port: int | None,
) -> int:
    from launch.run.job import RunOptions, plan_run, run
    from sinks.export.formats import parse_formats

    try:  # before anything runs: the export is the job's last step
        export_formats = parse_formats(export_formats) if export_formats else ()
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--export-format") from None
    settings = _with_budgets(command_settings(ctx), max_output_tokens, deadline)
    run_id = settings.run_id if flag_given(ctx, "run_id") or settings.run_id != "default" else "demo"
    try:
        settings = naming.for_run(settings, run_id)
    except ValueError as exc:
        raise ConfigError(f"--run-id: {exc}") from None
    serve = spec_from_options(serve_model, fleet) if serve_model else None
    if serve is None and fleet["gpus"]:
        raise click.UsageError("--gpus goes with --serve MODEL_PATH (launch a fleet), or use --server URL")
    options = RunOptions(
        prompts=prompts,
        servers=servers,
        local_llm=local_llm,
        server_timeout_s=server_timeout_s,
        mapping=mapping,
        max_tokens=max_tokens,
        thinking=thinking,
        to=to,
        timeout_s=timeout_s,
        keep_running=keep_running,
        progress=not no_progress,
        serve=serve,
        preflight=preflight,
        metrics_port=metrics_port,
        export_formats=export_formats,
    )
    return run(plan_run(settings, options), options)


def _with_budgets(settings: Settings, max_output_tokens: int | None, deadline: str | None) -> Settings:
    """``settings`` with ``--max-output-tokens`` and ``--deadline`` in ``gate`` (docs/budgets.md)."""
    from consumers.quality.budget import parse_deadline

    update: dict[str, object] = {}
    if max_output_tokens is not None:
        update["max_output_tokens"] = max_output_tokens
    if deadline is not None:
        try:
            update["deadline"] = parse_deadline(deadline)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--deadline") from None
    return (
        settings.model_copy(update={"gate": settings.gate.model_copy(update=update)}) if update else settings
    )


def run_main(argv: Sequence[str] | None = None, *, prog: str = "python -m launch.run") -> int:
    """``kafkagen run`` on ``argv``; returns the exit status."""
    return run_command(run_command_, argv, prog=prog)
