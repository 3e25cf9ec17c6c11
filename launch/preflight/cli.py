"""``kafkagen preflight``: the preflight (:mod:`launch.preflight.check`) as a command of its own, and
the preflight options ``kafkagen run`` and ``kafkagen serve`` share.

``kafkagen preflight [INPUT]... --server URL ...`` samples the inputs (default: the bundled demo
prompts) with the producer's mapping options, sends the sample to every server at the run's
``--max-tokens`` and thinking, prints the report (``--json``: the report as JSON on stdout) and
exits 0 when the gate passes, 2 when it refuses the settings (the fix and the recommended
``--max-tokens`` in the message), 3 when a server does not answer.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from launch.preflight.options import (
    DEFAULT_SAMPLE,
    DEFAULT_SEED,
    GATE_OFF,
    PREFLIGHT_TIMEOUT_S,
    PreflightOptions,
    run_preflight_for,
)
from streams.cli import command_settings, mapping_options, run_command, settings_options
from streams.config import check_server_url
from streams.errors import ConfigError, InputError
from streams.inputs import InputMapping

__all__ = [
    "budget_options",
    "main",
    "preflight_command",
    "preflight_options",
    "sample_options",
]

F = TypeVar("F", bound=Callable[..., Any])


_SAMPLE_OPTIONS: list[Callable[[F], F]] = [
    click.option(
        "--preflight-sample",
        "preflight_sample",
        type=click.IntRange(min=1),
        default=DEFAULT_SAMPLE,
        show_default=True,
        metavar="N",
        help="prompts of the input the preflight sends to every server",
    ),
    click.option(
        "--preflight-seed",
        "preflight_seed",
        type=int,
        default=DEFAULT_SEED,
        show_default=True,
        help="seed of the preflight's sample and of its requests' sampling (a seed the settings or a "
        "row set wins): the same input, settings and servers give the same requests",
    ),
    click.option(
        "--preflight-timeout",
        "preflight_timeout_s",
        type=click.FloatRange(min=0, min_open=True),
        default=PREFLIGHT_TIMEOUT_S,
        show_default=True,
        metavar="SECONDS",
        help="seconds one preflight request may take (the first after a server starts can be slow)",
    ),
]


def sample_options(command: F) -> F:
    """Decorator: ``--preflight-sample``, ``--preflight-seed`` and ``--preflight-timeout``, handed
    to the command as one ``preflight`` :class:`PreflightOptions` keyword argument."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        options = PreflightOptions(
            enabled=not kwargs.pop("no_preflight", False),
            enforce=not kwargs.pop("ignore_preflight", False),
            sample=kwargs.pop("preflight_sample"),
            seed=kwargs.pop("preflight_seed"),
            timeout_s=kwargs.pop("preflight_timeout_s"),
        )
        return command(*args, preflight=options, **kwargs)

    decorated: Any = wrapper
    for option in reversed(_SAMPLE_OPTIONS):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


def preflight_options(command: F) -> F:
    """Decorator: :func:`sample_options` plus ``--no-preflight`` and ``--ignore-preflight``, for
    the commands that go on to run something (``run``, ``serve up``)."""
    decorated: Any = sample_options(command)
    for option in reversed(
        [
            click.option(
                "--no-preflight",
                is_flag=True,
                help="skip the preflight: a sample of the input sent to every server at the run's "
                "settings and judged by the quality gate before anything is published",
            ),
            click.option(
                "--ignore-preflight",
                is_flag=True,
                help="run even when the preflight's sample trips the quality gate (the report is printed)",
            ),
        ]
    ):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


_BUDGET_OPTIONS: list[Callable[[F], F]] = [
    click.option(
        "--max-tokens",
        type=click.IntRange(min=1),
        help="the run's budget, tokens (default generation.max_tokens)",
    ),
    click.option(
        "--thinking/--no-thinking",
        default=None,
        help="with thinking on or off (default generation.chat_template_kwargs.enable_thinking)",
    ),
]


def budget_options(command: F) -> F:
    """Decorator: ``--max-tokens`` and ``--thinking/--no-thinking`` (the generation the preflight
    sends: :meth:`streams.config.GenerationSettings.with_budget`), as ``run`` has them."""
    for option in reversed(_BUDGET_OPTIONS):
        command = option(command)
    return command


@click.command(
    "preflight",
    help="Send a sample of the input (default: the bundled demo prompts) to every server with the run's "
    "generation settings, before anything is published; report finish reasons, quality classes, "
    "reasoning, the reasoning and answer tokens against max_tokens, and a recommended max_tokens. Exit 0: "
    "the quality gate passes; 2: it refuses the settings (the fix in the message), or the input has no "
    "prompt to send (standard input is not read); 3: a server does not answer. INPUT: what `kafkagen "
    "produce` reads (files, globs, s3://).",
)
@click.argument("inputs", nargs=-1, metavar="[INPUT]...")
@click.option(
    "--server",
    "servers",
    multiple=True,
    metavar="URL",
    help="inference server, once per server (default: the servers setting)",
)
@mapping_options
@budget_options
@sample_options
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON on stdout")
@settings_options("run_id", "generation.model", log_default="warning")
@click.pass_context
def preflight_command(
    ctx: click.Context,
    inputs: tuple[str, ...],
    servers: tuple[str, ...],
    mapping: InputMapping,
    max_tokens: int | None,
    thinking: bool | None,
    preflight: PreflightOptions,
    as_json: bool,
) -> int:
    settings = command_settings(ctx)
    for url in servers:
        try:
            check_server_url(url)
        except ValueError as exc:
            raise ConfigError(f"--server {exc}") from None
    urls = list(servers) or settings.servers
    if not urls:
        raise ConfigError("no inference server: give --server URL (once per server)")
    generation = settings.generation.with_budget(max_tokens, thinking)
    from launch.preflight.check import check_preflight, run_preflight
    from launch.preflight.sample import read_sample

    sample = read_sample(inputs, mapping, settings, size=preflight.sample, seed=preflight.seed)
    if not sample.prompts:  # exit 0 would say the gate passes, and nothing was judged
        if sample.skipped and sample.source == "-":
            raise InputError(
                "kafkagen preflight does not read standard input (-): nothing was checked; "
                "give the input as a file (or s3:// URI)"
            )
        raise InputError(sample.why_empty())
    if as_json:
        report = run_preflight(
            urls,
            generation,
            sample,
            gate=settings.gate,
            timeout_s=preflight.timeout_s,
            run_id=settings.run_id,
            seed=preflight.seed,
        )
        print(json.dumps(report.to_json(), indent=2))
        for line in report.lines():
            print(line, file=sys.stderr)
        if settings.gate.enabled or report.unreachable:
            check_preflight(report)
        elif report.failed:
            print(f"preflight: the gate refuses these settings, running anyway ({GATE_OFF})", file=sys.stderr)
        return 0
    run_preflight_for(urls, generation, settings, preflight, sample=sample)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``kafkagen preflight`` on ``argv``; returns the exit status."""
    return run_command(preflight_command, argv, prog="kafkagen preflight")
