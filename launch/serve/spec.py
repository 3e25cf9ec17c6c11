"""The fleet spec: what ``kafkagen serve up`` starts, one SGLang (or vLLM) server per GPU.

A :class:`FleetSpec` is frozen and JSON-round-trippable (:meth:`FleetSpec.to_json`,
:meth:`FleetSpec.from_json`): the fleet record (``fleet.json``) holds it, so ``serve status``,
``down``, ``logs`` and the main job read it back without options, and ``serve up`` compares a new
spec with the running one to stay idempotent.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from streams.errors import ConfigError

__all__ = [
    "DEFAULT_HEALTH_PATH",
    "DEFAULT_PORT",
    "DEFAULT_READY_TIMEOUT_S",
    "DEFAULT_SERVER_COMMAND",
    "ENGINES",
    "FleetSpec",
    "Speculative",
    "parse_gpus",
]

DEFAULT_PORT = 30000
DEFAULT_HEALTH_PATH = "/health_generate"
# Loading the weights and capturing CUDA graphs takes minutes per server (docker-compose.yml's
# healthcheck allows start_period 20m); 30 minutes leaves room for a slow first load.
DEFAULT_READY_TIMEOUT_S = 1800.0
DEFAULT_SERVER_COMMAND = "{python} -m sglang.launch_server {args}"
ENGINES = ("sglang", "vllm")
"""the inference servers a fleet can run (:attr:`FleetSpec.engine`)."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")


def parse_gpus(text: str) -> tuple[int, ...]:
    """``"7"`` → GPUs 0..6; ``"0,2,5"`` → those GPUs, in that order.

    A single number is a count, a comma-separated list the GPU indices (``"3,"`` is GPU 3 alone).

    Raises:
        ConfigError: not a count >= 1 or a list of distinct indices >= 0.
    """
    text = text.strip()
    try:
        if "," not in text:
            count = int(text)
            if count < 1:
                raise ValueError
            return tuple(range(count))
        gpus = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(
            f"--gpus {text!r}: give a count (--gpus 7 = GPUs 0..6) or indices (--gpus 0,2,5)"
        ) from None
    if not gpus or any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
        raise ConfigError(f"--gpus {text!r}: GPU indices must be distinct and >= 0 (e.g. --gpus 0,2,5)")
    return gpus


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding flags, passed to SGLang as written (``None``: not given).

    Names and meaning: SGLang ``python/sglang/srt/arg_groups/fields/spec.py`` (0.5.20, 0.5.23):
    ``--speculative-algorithm`` (e.g. ``EAGLE``, ``EAGLE3``, ``NEXTN``),
    ``--speculative-draft-model-path``, ``--speculative-num-steps``,
    ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``.
    """

    algorithm: str | None = None
    draft_model_path: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None


@dataclass(frozen=True)
class FleetSpec:
    """One SGLang server per GPU, on consecutive ports.

    Attributes:
        model_path: the model folder (or hub id) the servers load; after a model copy, the copy.
        gpus: GPU indices; ``gpus[k]`` serves on ``port + k`` with ``CUDA_VISIBLE_DEVICES=gpus[k]``.
        port: the first TCP port.
        host: the address the servers bind (``127.0.0.1``; ``0.0.0.0`` to serve other hosts).
        served_model_name: the model name in the API (``None``: SGLang uses the model path).
        reasoning_parser, tool_call_parser: SGLang parser names (``qwen3``, ``qwen25``...).
        metrics: ``--enable-metrics`` (the consumer reads ``/metrics``; docs/sglang.md).
        cache_report: ``--enable-cache-report`` (cached prompt tokens in each answer's usage, as
            docker-compose.yml).
        context_length: tokens (``None``: the model's own).
        mem_fraction_static: fraction of GPU memory for weights and KV cache (``None``: SGLang's).
        speculative: speculative decoding flags.
        server_args: raw SGLang arguments appended verbatim (``--server-arg``).
        health_path: the readiness path; 200 = ready.
        ready_timeout_s: seconds to wait for every server to be ready.
        server_command: the command template (:func:`launch.serve.sglang_args.server_argv`).
        copy_model_to: a folder (e.g. a RAM disk, ``/dev/shm/models``) to copy the model folder to
            once before starting (:func:`launch.serve.model_copy.copy_model`); the servers then
            load the copy, served under the original path's name unless ``served_model_name``.
        name: the fleet's name: its folder ``<home>/serve/<name>/``.
        engine: the server the ``{args}`` of :attr:`server_command` are for, one of
            :data:`ENGINES`: SGLang (:func:`launch.serve.sglang_args.sglang_args`) or vLLM 0.11.0
            (:func:`launch.serve.vllm_args.vllm_args`; docs/vllm.md, "Serving").
    """

    model_path: str
    gpus: tuple[int, ...]
    port: int = DEFAULT_PORT
    host: str = "127.0.0.1"
    served_model_name: str | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    metrics: bool = True
    cache_report: bool = True
    context_length: int | None = None
    mem_fraction_static: float | None = None
    speculative: Speculative = field(default_factory=Speculative)
    server_args: tuple[str, ...] = ()
    health_path: str = DEFAULT_HEALTH_PATH
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    server_command: str = DEFAULT_SERVER_COMMAND
    copy_model_to: str | None = None
    name: str = "fleet"
    engine: str = "sglang"

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"--engine {self.engine!r}: one of {', '.join(ENGINES)}")
        if not self.gpus:
            raise ConfigError("a fleet needs at least one GPU (--gpus)")
        if not _NAME.fullmatch(self.name):
            raise ConfigError(f"fleet name {self.name!r}: letters, digits, '-' and '_' only (--fleet)")
        if not 1 <= self.port <= 65535 - len(self.gpus) + 1:
            raise ConfigError(f"--port {self.port}: ports {self.port}..+{len(self.gpus) - 1} must be valid")
        if not self.health_path.startswith("/"):
            raise ConfigError(f"--health-path {self.health_path!r} must start with '/'")
        if self.mem_fraction_static is not None and not 0 < self.mem_fraction_static < 1:
            raise ConfigError(f"--mem-fraction-static {self.mem_fraction_static}: between 0 and 1")

    def port_of(self, index: int) -> int:
        """The port of the ``index``-th GPU of :attr:`gpus`."""
        return self.port + index

    def url_of(self, index: int) -> str:
        """``http://<host>:<port>`` of the ``index``-th GPU (``0.0.0.0`` reached as 127.0.0.1, ``::``
        as ``[::1]``; an IPv6 address in brackets)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        host = "::1" if host == "::" else host
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host  # an IPv6 literal
        return f"http://{host}:{self.port_of(index)}"

    def program_of(self, index: int) -> str:
        """``gpu-<i>``, the name of the ``index``-th GPU's server: its supervisord program, its log
        file's name and how every message names it."""
        return f"gpu-{self.gpus[index]}"

    @property
    def urls(self) -> list[str]:
        """The server URLs, in GPU order."""
        return [self.url_of(k) for k in range(len(self.gpus))]

    @property
    def servers(self) -> dict[str, str]:
        """Server name (:meth:`program_of`) → URL, in GPU order."""
        return {self.program_of(k): self.url_of(k) for k in range(len(self.gpus))}

    def runtime_key(self) -> dict[str, Any]:
        """What makes two specs the same running fleet (all but the readiness timeout)."""
        data = self.to_json()
        data.pop("ready_timeout_s")
        return data

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (lists for tuples)."""
        data = dataclasses.asdict(self)
        data["gpus"] = list(self.gpus)
        data["server_args"] = list(self.server_args)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FleetSpec:
        """The spec :meth:`to_json` wrote.

        Raises:
            ConfigError: ``data`` is not a spec (e.g. a fleet.json of another version).
        """
        try:
            values = dict(data)
            values["gpus"] = tuple(values["gpus"])
            values["server_args"] = tuple(values.get("server_args", ()))
            values["speculative"] = Speculative(**values.get("speculative", {}))
            return cls(**values)
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"not a fleet spec ({exc}); run `kafkagen serve down` and `up` again") from None
