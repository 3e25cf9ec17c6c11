"""The vLLM command line of one fleet server (``kafkagen serve --engine vllm``).

:func:`vllm_args` is pure: the same spec gives the same arguments, each a flag the OpenAI-compatible
server of vLLM 0.11.0 accepts (``tests/launch/test_serve_args.py`` checks them against the flags read
from vLLM's source: ``tests/fixtures/vllm/0.11.0/server_flags.json``; docs/vllm.md, "Serving").
"""

from __future__ import annotations

from launch.serve.spec import FleetSpec
from streams.errors import ConfigError

__all__ = ["VLLM_HEALTH_PATH", "VLLM_SERVER_COMMAND", "vllm_args"]

VLLM_SERVER_COMMAND = "{python} -m vllm.entrypoints.openai.api_server {args}"
"""the default command template of a vLLM fleet (``api_server.py``'s ``__main__``)."""

VLLM_HEALTH_PATH = "/health"
"""vLLM's readiness path: 200 once the engine runs (``api_server.py`` ``health``)."""


def vllm_args(spec: FleetSpec, gpu: int, port: int) -> list[str]:
    """The vLLM 0.11.0 server arguments of the server on ``gpu`` at ``port``.

    Order: model, served name, host, port, reasoning parser, tool calling, metrics, cache report,
    context length, memory fraction, then :attr:`FleetSpec.server_args` verbatim. The GPU is not an
    argument (``CUDA_VISIBLE_DEVICES``, :mod:`launch.serve.fleet`).

    Flag names, vLLM 0.11.0: ``engine/arg_utils.py`` ``EngineArgs.add_cli_args`` (``--model``,
    ``--served-model-name``, ``--reasoning-parser``, ``--max-model-len``,
    ``--gpu-memory-utilization``, ``--disable-log-stats``); ``entrypoints/openai/cli_args.py``
    ``FrontendArgs`` (``--host``, ``--port``, ``--enable-auto-tool-choice``, ``--tool-call-parser``,
    ``--enable-prompt-tokens-details``). vLLM serves ``/metrics`` always; without ``metrics`` its
    stat logger is off (``--disable-log-stats``) and the load gauges are gone.

    Raises:
        ConfigError: speculative decoding flags, which vLLM takes as one ``--speculative-config``
            JSON object (pass it with ``--server-arg``).
    """
    del gpu
    spec_ = spec.speculative
    if any(v is not None for v in vars(spec_).values()):
        raise ConfigError(
            "--engine vllm takes no --speculative-* options: give vLLM's own JSON, e.g. "
            '--server-arg=--speculative-config --server-arg=\'{"method": "eagle3", "model": "...", '
            '"num_speculative_tokens": 3}\''
        )
    args = ["--model", spec.model_path]
    if spec.served_model_name:
        args += ["--served-model-name", spec.served_model_name]
    args += ["--host", spec.host, "--port", str(port)]
    if spec.reasoning_parser:
        args += ["--reasoning-parser", spec.reasoning_parser]
    if spec.tool_call_parser:
        # kafkagen sends tools without tool_choice: vLLM's "auto" needs both flags (docs/vllm.md)
        args += ["--enable-auto-tool-choice", "--tool-call-parser", spec.tool_call_parser]
    if not spec.metrics:
        args.append("--disable-log-stats")
    if spec.cache_report:
        args.append("--enable-prompt-tokens-details")
    if spec.context_length is not None:
        args += ["--max-model-len", str(spec.context_length)]
    if spec.mem_fraction_static is not None:
        args += ["--gpu-memory-utilization", repr(spec.mem_fraction_static)]
    return [*args, *spec.server_args]
