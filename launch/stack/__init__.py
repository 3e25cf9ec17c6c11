"""The local stack: Kafka (KRaft), S3 (SeaweedFS) and llama.cpp LLM servers on 127.0.0.1.

``python -m launch.stack up|down|status|logs`` (see :mod:`launch.stack.__main__`). Every service
binds to loopback, starts detached and is recorded in a pid file; addresses come from the client
settings, one Kafka node per ``kafka.bootstrap_servers`` address (several: a KRaft cluster whose
brokers :meth:`LocalStack.kill` and :meth:`LocalStack.up` one by one). :func:`cluster_beside`
derives the tests' 3-broker cluster. docs/local-stack.md, "Services and addresses".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from launch.stack.kafka import KafkaNode, kafka_broker_ids, kafka_nodes, kafka_spec
from launch.stack.llm import LOOPBACK_HOSTS, llm_spec, local_port
from launch.stack.process import ProcessManager, ServiceSpec, wait_until
from launch.stack.s3 import s3_ready, s3_spec
from launch.stack.settings import StackSettings, load_stack_settings
from streams.config import Settings
from streams.errors import ConfigError, ServiceNotReadyError

__all__ = ["SERVICES", "LocalStack", "ServiceState", "StackSettings", "cluster_beside"]

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

    def __init__(self, settings: Settings, stack: StackSettings | None = None) -> None:
        """``stack``: the stack's own settings; ``None`` reads them from the environment.

        Raises:
            ConfigError: a ``KAFKAGEN_STACK__`` variable is malformed or names no setting.
        """
        self.settings = settings
        self.stack_settings = stack or load_stack_settings()
        self.home = Path(settings.home).resolve()
        self.processes = ProcessManager(self.home)

    # -- addresses ---------------------------------------------------------------------------
    @property
    def kafka_ports(self) -> list[int]:
        """Broker ports of ``kafka.bootstrap_servers``, in order (one node each).

        Raises:
            ConfigError: an entry is not ``127.0.0.1:<port>`` (or ``localhost``).
        """
        ports = []
        for entry in self.settings.kafka.bootstrap_servers.split(","):
            host, _, port = entry.strip().rpartition(":")
            if host not in LOOPBACK_HOSTS or not port.isdigit():
                raise ConfigError(
                    f"the local stack serves Kafka on loopback only, but kafka.bootstrap_servers has "
                    f"{entry.strip()!r}; use 127.0.0.1:<port>[,127.0.0.1:<port>...] "
                    "(KAFKAGEN_KAFKA__BOOTSTRAP_SERVERS)"
                )
            ports.append(int(port))
        return ports

    @property
    def kafka_port(self) -> int:
        """Port of the first broker."""
        return self.kafka_ports[0]

    @property
    def kafka_nodes(self) -> list[KafkaNode]:
        """The Kafka nodes: ``kafka`` alone, or ``kafka-1`` .. ``kafka-N`` for N addresses."""
        return kafka_nodes(self.kafka_ports)

    def kafka_node(self, name: str) -> KafkaNode | None:
        return next((n for n in self.kafka_nodes if n.name == name), None)

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
        """Process names of the selected services, in start order.

        ``kinds`` holds service kinds (``kafka`` is every Kafka node, ``llm`` every llama-server)
        and/or single service names (``kafka-2``, ``llm-30000``, ``s3``).

        Raises:
            ConfigError: a name is neither a kind nor one of this stack's services.
        """
        wanted = list(kinds)
        # Kafka's addresses are checked only when Kafka is asked for: `up s3` works beside a remote Kafka.
        kafka = [n.name for n in self.kafka_nodes] if any(k.startswith("kafka") for k in wanted) else []
        every = [*kafka, "s3", *(f"llm-{p}" for p in self.llm_ports)]
        unknown = [k for k in wanted if k not in SERVICES and k not in every]
        if unknown:
            raise ConfigError(
                f"unknown service {', '.join(unknown)}: choose from {', '.join([*SERVICES, *every])}"
            )
        out: list[str] = []
        for name in every:
            kind = "llm" if name.startswith("llm-") else "kafka" if name.startswith("kafka") else name
            if kind in wanted or name in wanted:
                out.append(name)
        return out

    def address(self, name: str) -> str:
        """``kafka``: the whole bootstrap list; ``kafka-<i>``: that node; S3 and llm: their URL."""
        if name == "kafka":
            return ",".join(n.address for n in self.kafka_nodes)
        node = self.kafka_node(name)
        if node is not None:
            return node.address
        if name == "s3":
            return f"http://127.0.0.1:{self.s3_port}"
        return f"http://127.0.0.1:{name.removeprefix('llm-')}"

    # -- lifecycle ---------------------------------------------------------------------------
    def spec(self, name: str) -> ServiceSpec:
        node = self.kafka_node(name)
        if node is not None:
            nodes = self.kafka_nodes
            st = self.stack_settings
            cache = Path(st.cache).resolve()
            heap = st.kafka_heap if len(nodes) == 1 else st.kafka_node_heap
            return kafka_spec(self.home, cache, node, nodes, heap)
        if name == "s3":
            return s3_spec(self.home, self.s3_port, self.settings.s3)
        return llm_spec(int(name.removeprefix("llm-")), self.stack_settings)

    def ready(self, name: str) -> bool:
        """True when the service answers: a Kafka node when it answers a metadata request
        that lists every node of the stack whose process runs (so a restarted broker counts
        as ready once it is back in the cluster, not merely listening), S3 ``HeadBucket`` on
        the configured bucket with every stored volume registered (:func:`s3_ready`), a
        llama-server ``GET /health`` with 200 (503 while loading)."""
        node = self.kafka_node(name)
        if node is not None:
            live = kafka_broker_ids(node.address)
            running = {n.node_id for n in self.kafka_nodes if self.processes.process(n.name) is not None}
            return live is not None and (running | {node.node_id}) <= live
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
            ServiceNotReadyError: a service did not become ready within ``KAFKAGEN_STACK__READY_TIMEOUT_S``;
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

        timeout_s = self.stack_settings.ready_timeout_s
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

    def kill(self, name: str) -> bool:
        """SIGKILL one service at once, e.g. a broker ``kafka-2`` in a crash test; its data stays.
        Start it again with ``up([name])``.

        Returns:
            True when it was running, False when it was not.

        Raises:
            ConfigError: ``name`` is not one of this stack's services.
        """
        if name not in self.names():
            raise ConfigError(
                f"kill takes one service name, not {name!r}: choose from {', '.join(self.names())}"
            )
        return self.processes.kill(name)

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


def cluster_beside(settings: Settings, brokers: int = 3) -> Settings:
    """``settings`` pointed at a local ``brokers``-node Kafka cluster that runs beside the
    configured stack without touching it (the tests' 3-broker cluster): node ``i`` on ``P + 2i``
    (``P`` the configured Kafka's highest port), home ``<home>/cluster<brokers>``. Use
    ``LocalStack(cluster_beside(s)).up(["kafka"])``, never its other kinds (docs/local-stack.md).

    Raises:
        ConfigError: the configured Kafka is not on loopback, or the derived ports pass 65535.
    """
    if brokers < 1:
        raise ConfigError(f"a cluster needs at least one broker, not {brokers}")
    top = max(LocalStack(settings).kafka_ports)
    ports = [top + 2 * i for i in range(1, brokers + 1)]
    if ports[-1] + 1 > 65535:
        raise ConfigError(
            f"no room above port {top} for a {brokers}-broker cluster (needs up to {ports[-1] + 1}); "
            "configure a lower kafka.bootstrap_servers port"
        )
    home = Path(settings.home) / f"cluster{brokers}"
    kafka = settings.kafka.model_copy(update={"bootstrap_servers": ",".join(f"127.0.0.1:{p}" for p in ports)})
    return settings.model_copy(update={"kafka": kafka, "home": str(home)})
