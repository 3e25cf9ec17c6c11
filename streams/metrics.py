"""Serving a process's Prometheus metrics: the one place that opens the metrics port.

Each process kind owns its metrics in its own package (the consumer's in ``consumers/``, the
sink's in ``sinks/``), each on a registry of its own; this module only exposes a registry over
HTTP (prometheus_client's ``start_http_server``, https://prometheus.github.io/client_python/).
The series and their names: ``docs/metrics.md``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, disable_created_metrics, start_http_server

from streams.errors import ConfigError

__all__ = ["serve_metrics"]


def serve_metrics(port: int, registry: CollectorRegistry, *, host: str = "127.0.0.1") -> None:
    """Serve ``registry`` at ``http://<host>:<port>/metrics`` from a daemon thread.

    The ``*_created`` samples prometheus_client adds to every counter and histogram (the Unix time
    the series was created) are turned off for the process: they double the series and nothing
    here reads them (``docs/metrics.md`` lists what is served).

    Raises:
        ConfigError: the port cannot be bound (taken, or not a port); the message names it.
    """
    disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        start_http_server(port, addr=host, registry=registry)
    except (OSError, OverflowError) as exc:
        raise ConfigError(f"--metrics-port {port}: {exc}") from None
