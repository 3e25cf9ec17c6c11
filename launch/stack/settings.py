"""The local stack's own settings: ``KAFKAGEN_STACK__*`` environment variables, read by the stack
alone (the run's settings, :class:`streams.config.Settings`, do not carry them). Addresses are
not set here: one Kafka node listens on each ``kafka.bootstrap_servers`` address, S3 on the port
of ``s3.endpoint_url`` and one llama-server on each loopback URL of ``servers``, so clients and
stack cannot disagree; its files live under the run settings' ``home`` (docs/local-stack.md).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from streams.config import ENV_PREFIX, load_settings

__all__ = ["StackSettings", "load_stack_settings"]


class StackSettings(BaseSettings):
    """How the local stack sizes its services and where it caches downloads."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX + "STACK__", frozen=True, extra="forbid")

    cache: str = Field(
        ".local/cache",
        description="downloaded Kafka jars; stacks with other homes share it (relative to cwd)",
    )
    kafka_heap: str = Field("768m", description="JVM -Xmx of the local broker (one-broker stack)")
    kafka_node_heap: str = Field(
        "512m",
        description="JVM -Xmx of each node of a local cluster (several kafka.bootstrap_servers): "
        "three JVMs share the machine, so each stays small",
    )
    llm_parallel: int = Field(4, gt=0, description="llama-server --parallel: slots per server")
    llm_context: int = Field(8192, gt=0, description="llama-server -c: tokens, shared by its slots")
    llm_threads: int = Field(1, gt=0, description="llama-server -t: CPU threads per server")
    llm_http_threads: int = Field(
        32,
        gt=0,
        description="llama-server --threads-http: its fixed pool of HTTP worker threads; every open "
        "request holds one, those waiting for a slot included, so a pool smaller than the requests "
        "sent at once (slots + a consumer's standing queue + probes) leaves /metrics and /health "
        "unanswered until one finishes",
    )
    ready_timeout_s: float = Field(120.0, gt=0, description="seconds to wait for each service")

    def pinned_to(self, root: Path) -> StackSettings:
        """A copy whose relative ``cache`` is taken from ``root`` instead of the working directory
        (tests and benchmarks share the repository's jars wherever they run)."""
        cache = Path(self.cache)
        return self if cache.is_absolute() else self.model_copy(update={"cache": str(root / cache)})


def load_stack_settings() -> StackSettings:
    """The stack's settings from the environment.

    Raises:
        ConfigError: a value is malformed, or a ``KAFKAGEN_STACK__`` variable names no setting.
    """
    return load_settings(StackSettings)
