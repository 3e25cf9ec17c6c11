"""``kafkagen serve up|status|down|logs|probe``: a fleet of SGLang (or, ``--engine vllm``, vLLM)
servers, one per GPU (docs/serve.md).

``up MODEL_PATH --gpus N`` starts the servers detached under supervisord, waits until each answers
its health path, then runs the preflight (:mod:`launch.preflight.check`); ``status``, ``down``,
``logs`` and ``probe`` read the fleet record and need no options but ``--fleet``. The spec options
are one decorator, :func:`fleet_options`, so ``kafkagen run --serve MODEL --gpus N`` builds the same
:class:`~launch.serve.spec.FleetSpec` with :func:`spec_from_options`. Exit statuses: docs/serve.md.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from launch.serve.fleet import Fleet

from launch.preflight.cli import budget_options, preflight_options, sample_options
from launch.preflight.options import PreflightOptions, run_preflight_for
from launch.serve.spec import (
    DEFAULT_HEALTH_PATH,
    DEFAULT_PORT,
    DEFAULT_READY_TIMEOUT_S,
    DEFAULT_SERVER_COMMAND,
    ENGINES,
    FleetSpec,
    Speculative,
    parse_gpus,
)
from launch.serve.vllm_args import VLLM_HEALTH_PATH, VLLM_SERVER_COMMAND
from streams.cli import SummaryGroup, command_settings, run_command, settings_options
from streams.errors import ConfigError, ExitCode

__all__ = [
    "fleet_options",
    "main",
    "serve",
    "spec_from_options",
]

F = TypeVar("F", bound=Callable[..., Any])

_FLEET_OPTIONS: list[Callable[[F], F]] = [
    click.option("--gpus", help="a count (7 = GPUs 0..6) or indices (0,2,5); one server per GPU"),
    click.option(
        "--engine",
        type=click.Choice(ENGINES),
        default="sglang",
        show_default=True,
        help="the inference server: SGLang, or vLLM 0.11 (docs/vllm.md, 'Serving')",
    ),
    click.option(
        "--port",
        type=click.IntRange(1, 65535),
        default=DEFAULT_PORT,
        show_default=True,
        help="port of the first GPU's server; the k-th GPU listed gets port + k",
    ),
    click.option(
        "--host",
        default="127.0.0.1",
        show_default=True,
        help="address the servers bind (0.0.0.0: reachable from other hosts)",
    ),
    click.option("--served-model-name", help="model name in the API (default: the model path)"),
    click.option("--reasoning-parser", help="SGLang reasoning parser, e.g. qwen3, deepseek-r1"),
    click.option("--tool-call-parser", help="SGLang tool-call parser, e.g. qwen25, llama3"),
    click.option(
        "--metrics/--no-metrics",
        default=True,
        show_default=True,
        help="--enable-metrics (the consumers read /metrics)",
    ),
    click.option(
        "--cache-report/--no-cache-report",
        default=True,
        show_default=True,
        help="--enable-cache-report (cached prompt tokens in each answer's usage)",
    ),
    click.option("--context-length", type=click.IntRange(min=1), help="tokens (default: the model's)"),
    click.option(
        "--mem-fraction-static",
        type=click.FloatRange(0, 1, min_open=True, max_open=True),
        help="GPU memory fraction for weights and KV cache (default: SGLang's)",
    ),
    click.option("--speculative-algorithm", help="e.g. EAGLE, EAGLE3, NEXTN"),
    click.option("--speculative-draft-model-path", help="the draft model"),
    click.option("--speculative-num-steps", type=click.IntRange(min=1)),
    click.option("--speculative-eagle-topk", type=click.IntRange(min=1)),
    click.option("--speculative-num-draft-tokens", type=click.IntRange(min=1)),
    click.option(
        "--server-arg",
        "server_args",
        multiple=True,
        metavar="ARG",
        help="a raw SGLang argument, passed verbatim; repeat it: --server-arg=--tp-size --server-arg=1",
    ),
    click.option(
        "--health-path",
        help=f"readiness path; 200 = ready (default: {DEFAULT_HEALTH_PATH}, vLLM's {VLLM_HEALTH_PATH})",
    ),
    click.option(
        "--ready-timeout",
        "ready_timeout_s",
        type=click.FloatRange(min=0, min_open=True),
        default=DEFAULT_READY_TIMEOUT_S,
        show_default=True,
        help="seconds to wait for every server (model load + CUDA graph capture take minutes)",
    ),
    click.option(
        "--server-command",
        help=f"command template (default: '{DEFAULT_SERVER_COMMAND}', vLLM's "
        f"'{VLLM_SERVER_COMMAND}'); placeholders {{python}} {{model}} {{port}} {{host}} {{gpu}} {{name}}; "
        "the word {args} is the engine's arguments",
    ),
    click.option(
        "--copy-model-to",
        metavar="DIR",
        help="copy the model folder once to DIR/<folder name> (a RAM disk, e.g. /dev/shm/models) "
        "and serve the copy",
    ),
]

_fleet_name = click.option(
    "--fleet",
    "fleet_name",
    default="fleet",
    show_default=True,
    help="the fleet's name: its folder <home>/serve/<fleet>",
)


def fleet_options(command: F) -> F:
    """Decorator: the fleet spec options (``--gpus``, ``--port``, ... ``--copy-model-to``, and
    ``--fleet``); the command receives them as one ``fleet: dict[str, Any]`` keyword argument,
    for :func:`spec_from_options`."""
    names = ["fleet_name", "gpus", "engine", "port", "host", "served_model_name", "reasoning_parser",
             "tool_call_parser", "metrics", "cache_report", "context_length", "mem_fraction_static",
             "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
             "speculative_eagle_topk", "speculative_num_draft_tokens", "server_args", "health_path",
             "ready_timeout_s", "server_command", "copy_model_to"]  # fmt: skip

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        fleet = {name: kwargs.pop(name) for name in names}
        return command(*args, fleet=fleet, **kwargs)

    decorated: Any = wrapper
    for option in reversed([*_FLEET_OPTIONS, _fleet_name]):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


def spec_from_options(model_path: str, fleet: dict[str, Any]) -> FleetSpec:
    """The :class:`FleetSpec` of ``model_path`` and the :func:`fleet_options` values.

    Raises:
        ConfigError: ``--gpus`` missing or malformed, or another value the spec rejects.
    """
    if not fleet["gpus"]:
        raise ConfigError("--gpus is required: a count (--gpus 7 = GPUs 0..6) or indices (--gpus 0,2,5)")
    vllm = fleet["engine"] == "vllm"
    health_path = fleet["health_path"] or (VLLM_HEALTH_PATH if vllm else DEFAULT_HEALTH_PATH)
    server_command = fleet["server_command"] or (VLLM_SERVER_COMMAND if vllm else DEFAULT_SERVER_COMMAND)
    return FleetSpec(
        model_path=model_path,
        gpus=parse_gpus(fleet["gpus"]),
        port=fleet["port"],
        host=fleet["host"],
        served_model_name=fleet["served_model_name"],
        reasoning_parser=fleet["reasoning_parser"],
        tool_call_parser=fleet["tool_call_parser"],
        metrics=fleet["metrics"],
        cache_report=fleet["cache_report"],
        context_length=fleet["context_length"],
        mem_fraction_static=fleet["mem_fraction_static"],
        speculative=Speculative(
            algorithm=fleet["speculative_algorithm"],
            draft_model_path=fleet["speculative_draft_model_path"],
            num_steps=fleet["speculative_num_steps"],
            eagle_topk=fleet["speculative_eagle_topk"],
            num_draft_tokens=fleet["speculative_num_draft_tokens"],
        ),
        server_args=tuple(fleet["server_args"]),
        health_path=health_path,
        ready_timeout_s=fleet["ready_timeout_s"],
        server_command=server_command,
        copy_model_to=fleet["copy_model_to"],
        name=fleet["fleet_name"],
        engine=fleet["engine"],
    )


def _preflight(
    ctx: click.Context,
    servers: dict[str, str],
    max_tokens: int | None,
    thinking: bool | None,
    options: PreflightOptions,
    *,
    skippable: bool = True,
) -> None:
    """The preflight of the fleet's (or the given) servers on the bundled demo prompts, at the run's
    generation settings with ``--max-tokens`` / ``--thinking`` applied."""
    settings = command_settings(ctx)
    run_preflight_for(
        servers,
        settings.generation.with_budget(max_tokens, thinking),
        settings,
        options,
        skip_hint="up --no-preflight skips this check, --ignore-preflight runs anyway; the servers keep "
        "running"
        if skippable
        else None,
    )


def _fleet(ctx: click.Context, name: str) -> Fleet:
    from launch.serve.fleet import Fleet

    return Fleet(command_settings(ctx).home, name)


@click.group(cls=SummaryGroup, help="A fleet of SGLang servers, one per GPU, detached under supervisord.")
@settings_options(log_default="warning")
def serve() -> None:
    pass


@serve.command(
    help="Start one server per GPU (CUDA_VISIBLE_DEVICES=<gpu>, ports --port, --port+1, ...) and wait "
    "until each answers --health-path. Idempotent: the same spec already running is reported, not "
    "restarted."
)
@click.argument("model_path")
@fleet_options
@budget_options
@preflight_options
@settings_options("home", "generation.model", log_default="warning")
@click.pass_context
def up(
    ctx: click.Context,
    model_path: str,
    fleet: dict[str, Any],
    max_tokens: int | None,
    thinking: bool | None,
    preflight: PreflightOptions,
) -> None:
    spec = spec_from_options(model_path, fleet)
    launched = _fleet(ctx, spec.name)

    def preflight_fleet(_urls: list[str]) -> None:  # the same as spec.urls
        _preflight(ctx, spec.servers, max_tokens, thinking, preflight)

    after_ready = preflight_fleet if preflight.enabled else None
    urls = launched.up(spec, echo=lambda line: print(line, flush=True), after_ready=after_ready)
    print(f"fleet {spec.name!r} ready: {len(urls)} servers; logs in {launched.supervisor.log_dir}")
    print(f"consumers: KAFKAGEN_SERVERS='{json.dumps(urls)}'; stop: kafkagen serve down --fleet {spec.name}")


@serve.command(help="Each server: URL, pid, supervisord state, health answer. Exit 1 when one is not ready.")
@_fleet_name
@settings_options("home", log_default="warning")
@click.pass_context
def status(ctx: click.Context, fleet_name: str) -> int:
    states = _fleet(ctx, fleet_name).status()
    for s in states:
        verdict = "ready" if s.ready else "NOT READY"
        pid = s.pid or "-"
        print(f"{s.program:<7} {s.url:<24} pid {pid:<8} {s.state:<9} health {s.health:<14} {verdict}", end="")
        print(f"  log {s.log}")
    if any(s.state == "DOWN" and s.health == "200" for s in states):
        print(
            f"supervisord of fleet {fleet_name!r} is not running but servers still answer (it was killed?): "
            f"`kafkagen serve down --fleet {fleet_name}` stops them, then `serve up` again"
        )
    return ExitCode.OK if all(s.ready for s in states) else ExitCode.FAILED


@serve.command(help="Stop every server gracefully and supervisord; waits until the ports are free.")
@_fleet_name
@settings_options("home", log_default="warning")
@click.pass_context
def down(ctx: click.Context, fleet_name: str) -> None:
    _fleet(ctx, fleet_name).down(echo=print)


@serve.command(
    short_help="The preflight of each server of the fleet (or of each --server), judged by the quality gate.",
    help="The preflight of each server of the fleet (or of each --server): a sample of the bundled demo "
    "prompts at the run's generation settings, judged by the quality gate; fails with the fix and a "
    "recommended --max-tokens when the answers are unusable (the budget eaten by reasoning, empty "
    "content, no reasoning_content with thinking on). Exit 2 when it refuses, 3 when a server does not "
    "answer.",
)
@click.option("--server", "servers", multiple=True, metavar="URL", help="this server instead (repeat)")
@budget_options
@sample_options
@_fleet_name
@settings_options("home", "generation.model", log_default="warning")
@click.pass_context
def probe(
    ctx: click.Context,
    servers: tuple[str, ...],
    max_tokens: int | None,
    thinking: bool | None,
    preflight: PreflightOptions,
    fleet_name: str,
) -> None:
    if servers:
        named = {url: url for url in servers}
    else:
        launched = _fleet(ctx, fleet_name)
        spec = launched.spec()
        if spec is None:
            raise ConfigError(
                f"no fleet {fleet_name!r} in {launched.home}: start one with `kafkagen serve up`, or name "
                "the servers with --server URL"
            )
        named = spec.servers
    _preflight(ctx, named, max_tokens, thinking, preflight, skippable=False)


@serve.command(
    help="Print the end of each server's log; GPU: an index (3) or a program (gpu-3); default all."
)
@click.argument("gpus", nargs=-1, metavar="[GPU]...")
@click.option(
    "-n", "--lines", type=click.IntRange(min=1), default=30, show_default=True, help="lines per server"
)
@_fleet_name
@settings_options("home", log_default="warning")
@click.pass_context
def logs(ctx: click.Context, gpus: tuple[str, ...], lines: int, fleet_name: str) -> None:
    launched = _fleet(ctx, fleet_name)
    programs = launched.programs()
    if not programs:
        raise ConfigError(f"no fleet {fleet_name!r} in {launched.home}: start one with `kafkagen serve up`")
    wanted = [g if g.startswith("gpu-") else f"gpu-{g}" for g in gpus] or programs
    unknown = [w for w in wanted if w not in programs]
    if unknown:
        raise click.UsageError(
            f"not in fleet {fleet_name!r}: {', '.join(unknown)} (it has {', '.join(programs)})"
        )
    for program in wanted:
        print(f"==> {launched.supervisor.log_path(program)} <==")
        print(launched.tail(program, lines))


def main(argv: Sequence[str] | None = None, *, prog: str = "kafkagen serve") -> int:
    """Run ``serve`` on ``argv`` (``None``: the process arguments); returns the exit status."""
    return run_command(serve, argv, prog=prog)
