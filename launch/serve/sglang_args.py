"""The SGLang command line of one fleet server, and the command template around it.

:func:`sglang_args` is pure: the same spec gives the same arguments, each a flag
``sglang.launch_server`` accepts in SGLang 0.5.20 and 0.5.23 (``tests/launch/test_serve_args.py``
checks it against the flags read from SGLang's source: tests/fixtures/sglang/README.md, "Server
arguments"). ``docker-compose.yml``'s ``x-sglang`` command is its output (``tests/test_compose.py``).
"""

from __future__ import annotations

import shlex
import string
import sys

from launch.serve.spec import FleetSpec
from launch.serve.vllm_args import vllm_args
from streams.errors import ConfigError

__all__ = ["PLACEHOLDERS", "server_argv", "sglang_args", "template_fields"]

PLACEHOLDERS = ("python", "model", "port", "host", "gpu", "name", "args")


def sglang_args(spec: FleetSpec, gpu: int, port: int) -> list[str]:
    """The ``sglang.launch_server`` arguments of the server on ``gpu`` at ``port``.

    Order: model path, served name, host, port, parsers, metrics, cache report, context length,
    memory fraction, speculative decoding flags, then :attr:`FleetSpec.server_args` verbatim. The
    GPU itself is not an argument: the server sees only its GPU through ``CUDA_VISIBLE_DEVICES``
    (:mod:`launch.serve.fleet`), so ``gpu`` is unused here and kept for templates and symmetry.

    Flag names: SGLang 0.5.20 / 0.5.23 ``arg_groups/fields/model.py`` (``--model-path``,
    ``--context-length``), ``serving.py`` (``--served-model-name``, ``--host``, ``--port``,
    ``--enable-cache-report``), ``observability.py`` (``--enable-metrics``), ``schedule.py``
    (``--mem-fraction-static``), ``spec.py`` (``--speculative-*``), ``server_args.py``
    (``--reasoning-parser``, ``--tool-call-parser``).
    """
    del gpu
    args = ["--model-path", spec.model_path]
    if spec.served_model_name:
        args += ["--served-model-name", spec.served_model_name]
    args += ["--host", spec.host, "--port", str(port)]
    if spec.reasoning_parser:
        args += ["--reasoning-parser", spec.reasoning_parser]
    if spec.tool_call_parser:
        args += ["--tool-call-parser", spec.tool_call_parser]
    if spec.metrics:
        args.append("--enable-metrics")
    if spec.cache_report:
        args.append("--enable-cache-report")
    if spec.context_length is not None:
        args += ["--context-length", str(spec.context_length)]
    if spec.mem_fraction_static is not None:
        args += ["--mem-fraction-static", repr(spec.mem_fraction_static)]
    spec_ = spec.speculative
    for flag, value in (
        ("--speculative-algorithm", spec_.algorithm),
        ("--speculative-draft-model-path", spec_.draft_model_path),
        ("--speculative-num-steps", spec_.num_steps),
        ("--speculative-eagle-topk", spec_.eagle_topk),
        ("--speculative-num-draft-tokens", spec_.num_draft_tokens),
    ):
        if value is not None:
            args += [flag, str(value)]
    return [*args, *spec.server_args]


def template_fields(template: str) -> list[str]:
    """The placeholder names in ``template`` (``{port}`` → ``port``), in order.

    Raises:
        ConfigError: the template does not parse (an unmatched ``{``) or is empty.
    """
    try:
        tokens = shlex.split(template)
        names = [f for token in tokens for _, f, _, _ in string.Formatter().parse(token) if f is not None]
    except ValueError as exc:
        raise ConfigError(f"--server-command {template!r}: {exc}") from None
    if not tokens:
        raise ConfigError("--server-command is empty: give a command such as the default")
    return names


def server_argv(spec: FleetSpec, index: int, *, python: str | None = None) -> list[str]:
    """The command line of the ``index``-th server: :attr:`FleetSpec.server_command` shlex-split,
    each token formatted with ``{python}`` (``python``, default ``sys.executable``), ``{model}``,
    ``{port}``, ``{host}``, ``{gpu}``, ``{name}`` (the program name ``gpu-<i>``); the token
    ``{args}`` alone expands to :func:`sglang_args` (:func:`launch.serve.vllm_args.vllm_args` for
    :attr:`FleetSpec.engine` "vllm"). A template without ``{args}`` gets none of them
    (how the tests run the simulator in place of SGLang).

    Raises:
        ConfigError: an unknown placeholder (named, with the known ones), ``{args}`` inside a
            longer token, or a template that does not parse.
    """
    names = template_fields(spec.server_command)
    unknown = sorted({n for n in names if n not in PLACEHOLDERS})
    if unknown:
        raise ConfigError(
            f"--server-command: unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)}; "
            f"known: {', '.join('{' + n + '}' for n in PLACEHOLDERS)} (write {{{{ for a literal brace)"
        )
    gpu, port = spec.gpus[index], spec.port_of(index)
    values = {
        "python": python or sys.executable,
        "model": spec.model_path,
        "port": str(port),
        "host": spec.host,
        "gpu": str(gpu),
        "name": spec.program_of(index),
    }
    argv: list[str] = []
    for token in shlex.split(spec.server_command):
        if token == "{args}":
            argv += (vllm_args if spec.engine == "vllm" else sglang_args)(spec, gpu, port)
        elif "{args}" in token:
            raise ConfigError("--server-command: {args} must be a word of its own (it expands to many)")
        else:
            argv.append(token.format(**values))
    return argv
