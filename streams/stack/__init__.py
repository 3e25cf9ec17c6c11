"""The local stack: Kafka (KRaft), S3 (SeaweedFS) and llama.cpp LLM servers on 127.0.0.1.

``python -m streams.stack up|down|status|logs`` (see :mod:`streams.stack.__main__`). Every
service binds to loopback, starts detached, and is recorded in a pid file under
``settings.stack.home``; ``up`` is idempotent and waits for readiness with a timeout;
``down`` stops only what ``up`` started.

Addresses come from the client settings, so clients and stack always agree: Kafka on the
port of the first ``kafka.bootstrap_servers`` entry (controller on port + 1), S3 on the port
of ``s3.endpoint_url``, one llama-server per loopback URL in ``servers``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from streams.config import Settings
from streams.errors import ConfigError, ServiceNotReadyError
from streams.stack.kafka import kafka_ready, kafka_spec
from streams.stack.llm import LOOPBACK_HOSTS, llm_spec, local_port
from streams.stack.process import ProcessManager, ServiceSpec, wait_until
from streams.stack.s3 import s3_ready, s3_spec

__all__ = ["SERVICES", "LocalStack", "ServiceState"]

SERVICES = ("kafka", "s3", "llm")
"""Service kinds, in start order."""

log = logging.getLogger("kafkagen.stack")


@dataclass(frozen=True)
class ServiceState:
    """One service as ``status`` reports it."""

    name: str
    address: str
    pid: int | None
    running: bool
    ready: bool
    log: Path


class LocalStack:
    """Starts, stops and inspects the local services described by ``settings``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = Path(settings.stack.home).resolve()
        self.processes = ProcessManager(self.home)

    # -- addresses ---------------------------------------------------------------------------
    @property
    def kafka_port(self) -> int:
        first = self.settings.kafka.bootstrap_servers.split(",")[0].strip()
        host, _, port = first.rpartition(":")
        if host not in LOOPBACK_HOSTS or not port.isdigit():
            raise ConfigError(
                f"the local stack serves Kafka on loopback only, but kafka.bootstrap_servers is {first!r}; "
                "use 127.0.0.1:<port> (KAFKAGEN_KAFKA__BOOTSTRAP_SERVERS)"
            )
        return int(port)

    @property
    def s3_port(self) -> int:
        url = self.settings.s3.endpoint_url or ""
        parts = urlsplit(url)
        if parts.hostname not in LOOPBACK_HOSTS or parts.port is None:
            raise ConfigError(
                f"the local stack serves S3 on loopback only, but s3.endpoint_url is {url!r}; "
                "use http://127.0.0.1:<port> (KAFKAGEN_S3__ENDPOINT_URL)"
            )
        return parts.port

    @property
    def llm_ports(self) -> list[int]:
        return [p for p in (local_port(u) for u in self.settings.servers) if p is not None]

    def names(self, kinds: Iterable[str] = SERVICES) -> list[str]:
        """Process names of the selected service kinds (``kafka``, ``s3``, ``llm-<port>``...)."""
        kinds = set(kinds)
        out: list[str] = [k for k in ("kafka", "s3") if k in kinds]
        if "llm" in kinds:
            out += [f"llm-{p}" for p in self.llm_ports]
        return out

    def address(self, name: str) -> str:
        if name == "kafka":
            return f"127.0.0.1:{self.kafka_port}"
        if name == "s3":
            return f"http://127.0.0.1:{self.s3_port}"
        return f"http://127.0.0.1:{name.removeprefix('llm-')}"

    # -- lifecycle ---------------------------------------------------------------------------
    def spec(self, name: str) -> ServiceSpec:
        if name == "kafka":
            cache = Path(self.settings.stack.cache).resolve()
            return kafka_spec(self.home, cache, self.kafka_port, self.settings.stack.kafka_heap)
        if name == "s3":
            return s3_spec(self.home, self.s3_port, self.settings.s3)
        return llm_spec(int(name.removeprefix("llm-")), self.settings.stack)

    def ready(self, name: str) -> bool:
        """True when the service answers: Kafka a metadata request, S3 ``HeadBucket`` on the
        configured bucket with every stored volume registered (:func:`s3_ready`), a
        llama-server ``GET /health`` with 200 (503 while loading)."""
        if name == "kafka":
            return kafka_ready(self.address(name))
        if name == "s3":
            return s3_ready(self.home, self.s3_port, self.settings.s3)
        try:
            return httpx.get(f"{self.address(name)}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def up(self, kinds: Iterable[str] = SERVICES, echo: Callable[[str], None] = log.info) -> None:
        """Start the selected services (those not already running) and wait until each is ready.

        Raises:
            StackError: a service could not be installed or started (port taken, Java missing...).
            ServiceNotReadyError: a service did not become ready within ``stack.ready_timeout_s``;
                the message holds the end of its log.
        """
        names = self.names(kinds)
        for name in names:
            pid, started = self.processes.start(self.spec(name))
            echo(f"{name}: {'started' if started else 'already running'} (pid {pid}) at {self.address(name)}")
        for name in names:
            self.wait_ready(name)
            echo(f"{name}: ready")

    def wait_ready(self, name: str) -> None:
        """Block until ``name`` is ready.

        Raises:
            ServiceNotReadyError: it exited or did not become ready in time.
        """

        def check() -> bool:
            if self.processes.process(name) is None:
                raise ServiceNotReadyError(
                    f"{name} exited during start-up; end of {self.processes.log_path(name)}:\n"
                    f"{self.processes.tail(name)}"
                )
            return self.ready(name)

        timeout_s = self.settings.stack.ready_timeout_s
        if not wait_until(check, timeout_s=timeout_s, interval_s=0.5):
            raise ServiceNotReadyError(
                f"{name} not ready after {timeout_s:.0f} s at {self.address(name)}; "
                f"end of {self.processes.log_path(name)}:\n{self.processes.tail(name)}"
            )

    def down(self, kinds: Iterable[str] = SERVICES, echo: Callable[[str], None] = log.info) -> None:
        """Stop the selected services that this stack started (reverse start order)."""
        for name in reversed(self.names(kinds)):
            stopped = self.processes.stop(name)
            echo(f"{name}: {'stopped' if stopped else 'not running'}")

    def status(self, kinds: Iterable[str] = SERVICES) -> list[ServiceState]:
        """Each selected service: address, pid, whether it runs and answers."""
        states = []
        for name in self.names(kinds):
            st = self.processes.status(name)
            states.append(
                ServiceState(
                    name, self.address(name), st.pid, st.running, st.running and self.ready(name), st.log
                )
            )
        return states
