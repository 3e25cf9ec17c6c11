"""Apache Kafka for the local stack: KRaft with one node or a cluster of combined broker +
controller nodes (one per ``kafka.bootstrap_servers`` address, all of them quorum voters).

The jars come from Maven Central (``pom.xml`` beside this file, :data:`KAFKA_VERSION`), cached
under ``<cache>/kafka-<version>/libs``; each node's log dir is formatted once and survives
restarts. Listeners are on 127.0.0.1 only; topics are never auto-created (:mod:`streams.topics`
creates them). docs/local-stack.md, "Kafka".
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import logging
import re
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from launch.stack.process import ServiceSpec, which_or_raise
from streams.errors import ConfigError, StackError

__all__ = [
    "KAFKA_VERSION",
    "POM",
    "KafkaNode",
    "cluster_id_of",
    "ensure_jars",
    "java_executable",
    "kafka_broker_ids",
    "kafka_nodes",
    "kafka_ready",
    "kafka_spec",
    "node_dir",
    "server_properties",
]

KAFKA_VERSION = "4.1.1"
"""Pinned Apache Kafka version; must equal ``kafka.version`` in ``pom.xml``."""

POM = Path(__file__).with_name("pom.xml")

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
"""


def java_executable() -> str:
    """Path of a Java 17+ ``java``.

    Raises:
        StackError: no ``java`` on PATH, or it is older than 17 (Kafka 4.x brokers need 17+).
    """
    java = which_or_raise(
        ["java"], "Java 17+", "install a JDK 17 or newer (e.g. apt-get install openjdk-17-jre-headless)"
    )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):
        major = int(match.group(2))
    if major < 17:
        raise StackError(
            f"Java 17+ not found: {java} is version {major or 'unknown'}; Kafka {KAFKA_VERSION} needs 17+"
        )
    return java


def ensure_jars(cache: Path) -> Path:
    """Resolve the pinned Kafka jars from Maven Central (once) and return their folder.

    Raises:
        StackError: ``mvn`` missing, or Maven could not resolve ``org.apache.kafka:kafka_2.13``
            (its output's last lines are included).
    """
    libs = cache / f"kafka-{KAFKA_VERSION}" / "libs"
    marker = libs / ".complete"
    if marker.exists():
        return libs
    mvn = which_or_raise(["mvn"], "mvn (Apache Maven)", "install Maven 3.8+ (e.g. apt-get install maven)")
    libs.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={libs}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise StackError(
            f"mvn could not resolve org.apache.kafka:kafka_2.13:{KAFKA_VERSION} from {POM}:\n{tail}\n"
            "Check that Maven Central is reachable (or ~/.m2 has the jars) and retry."
        )
    marker.write_text(KAFKA_VERSION)
    return libs


@dataclass(frozen=True)
class KafkaNode:
    """One combined broker + controller node of the local Kafka.

    Attributes:
        name: service name: ``kafka`` for a single broker, ``kafka-<node_id>`` in a cluster.
        node_id: Kafka ``node.id`` (1..N, in the order of ``kafka.bootstrap_servers``).
        port: its client (PLAINTEXT) listener on 127.0.0.1.
        controller_port: its KRaft controller listener, ``port + 1``.
    """

    name: str
    node_id: int
    port: int
    controller_port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def kafka_nodes(ports: Sequence[int]) -> list[KafkaNode]:
    """The nodes serving broker ports ``ports``: one port is the single broker ``kafka``, several
    are a cluster ``kafka-1`` .. ``kafka-N`` in the given order; each controller is on port + 1.

    Raises:
        ConfigError: a port is listed twice, or a controller port (port + 1) is another node's
            broker port or above 65535.
    """
    if len(set(ports)) != len(ports):
        raise ConfigError(
            f"kafka.bootstrap_servers lists a port twice ({', '.join(map(str, ports))}); "
            "give each local broker its own port"
        )
    taken = set(ports)
    for port in ports:
        if port + 1 in taken or port + 1 > 65535:
            raise ConfigError(
                f"the local Kafka node on port {port} needs port {port + 1} for its controller, but that is "
                f"{'another broker' if port + 1 in taken else 'not a valid port'}; space the brokers of "
                "kafka.bootstrap_servers two ports apart (e.g. 127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096)"
            )
    if len(ports) == 1:
        return [KafkaNode("kafka", 1, ports[0], ports[0] + 1)]
    return [KafkaNode(f"kafka-{i}", i, port, port + 1) for i, port in enumerate(ports, 1)]


def server_properties(data_dir: Path, node: KafkaNode, nodes: Sequence[KafkaNode]) -> str:
    """The node's ``server.properties``: KRaft combined mode, loopback only. One node: replication
    factor 1; three or more: internal topics at 3 with ``min.insync.replicas`` 2, a dead broker
    fenced after 6 s, a lagging follower out of the ISR after 10 s (Apache Kafka 4.1
    ``broker.session.timeout.ms``, ``replica.lag.time.max.ms``; docs/local-stack.md, "Kafka").
    """
    rf = min(3, len(nodes))
    min_isr = 2 if len(nodes) >= 3 else 1
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
    lines = [
        "process.roles=broker,controller",
        f"node.id={node.node_id}",
        f"controller.quorum.voters={voters}",
        f"listeners=PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{node.port}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name=PLAINTEXT",
        f"log.dirs={data_dir}",
        "auto.create.topics.enable=false",
        f"offsets.topic.replication.factor={rf}",
        "offsets.topic.num.partitions=7",
        f"transaction.state.log.replication.factor={rf}",
        f"transaction.state.log.min.isr={min_isr}",
        f"share.coordinator.state.topic.replication.factor={rf}",
        "group.initial.rebalance.delay.ms=0",
        # Committed offsets must outlive a long pause of a run (default 7 days).
        "offsets.retention.minutes=43200",
    ]
    if len(nodes) > 1:
        lines += [
            f"share.coordinator.state.topic.min.isr={min_isr}",
            f"min.insync.replicas={min_isr}",
            "broker.heartbeat.interval.ms=1000",
            "broker.session.timeout.ms=6000",
            "replica.lag.time.max.ms=10000",
            # Three JVMs share two cores: fewer request threads than the defaults (3 and 8).
            "num.network.threads=2",
            "num.io.threads=4",
        ]
    return "\n".join([*lines, ""])


def cluster_id_of(dirs: Sequence[Path]) -> str | None:
    """The ``cluster.id`` in the first formatted log dir among ``dirs`` (None: none formatted)."""
    for d in dirs:
        meta = d / "meta.properties"
        if meta.exists():
            for line in meta.read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "cluster.id" and value.strip():
                    return value.strip()
    return None


def node_dir(home: Path, node: KafkaNode) -> Path:
    """Config and data folder of ``node``: ``<home>/kafka`` (single broker) or ``<home>/kafka-<id>``."""
    return home / node.name


def new_cluster_id() -> str:
    """A fresh KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 characters),
    never starting with ``-``. ``kafka-storage format -t <id>`` would read such an id as an option
    and fail with "argument --cluster-id/-t: expected one argument" (1 id in 64); Kafka's own
    ``Uuid.randomUuid()`` (clients ``org/apache/kafka/common/Uuid.java``, Kafka 4.x) draws again
    for the same reason."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def kafka_spec(
    home: Path, cache: Path, node: KafkaNode, nodes: Sequence[KafkaNode], heap: str
) -> ServiceSpec:
    """Prepare config, format storage on first use, and describe the process of ``node``.

    Every node of a cluster is formatted with the same cluster id (taken from a node already
    formatted, else new), so a node whose folder was deleted joins its cluster again.

    Raises:
        StackError: Java, Maven or the storage format step failed.
    """
    java = java_executable()
    libs = ensure_jars(cache)
    base = node_dir(home, node)
    data = base / "data"
    base.mkdir(parents=True, exist_ok=True)
    props = base / "server.properties"
    props.write_text(server_properties(data, node, nodes))
    log4j = base / "log4j2.properties"
    log4j.write_text(_LOG4J2)
    classpath = f"{libs}/*"
    jvm = [java, f"-Xmx{heap}", "-Xms128m", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
    if not (data / "meta.properties").exists():
        cluster_id = cluster_id_of([node_dir(home, n) / "data" for n in nodes]) or new_cluster_id()
        proc = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise StackError(f"kafka storage format failed for {data}:\n{proc.stdout}{proc.stderr}")
    return ServiceSpec(
        name=node.name, argv=(*jvm, "kafka.Kafka", str(props)), ports=(node.port, node.controller_port)
    )


def kafka_broker_ids(bootstrap: str, timeout_s: float = 5.0) -> set[int] | None:
    """Node ids of the live (unfenced) brokers in the cluster metadata, asked through
    ``bootstrap``; None when no metadata came back within ``timeout_s`` seconds. Blocking; works
    inside a running event loop too (on a thread), but blocks that loop meanwhile."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def probe() -> set[int] | None:
        # aiokafka logs every refused connection at ERROR: expected while the broker starts.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
        try:
            await asyncio.wait_for(admin.start(), timeout_s)
            described = await asyncio.wait_for(admin.describe_cluster(), timeout_s)
            return {int(b["node_id"]) for b in described["brokers"]}
        except Exception:
            return None
        finally:
            # A half-started client may fail to close; readiness is still None.
            with contextlib.suppress(Exception):
                await admin.close()

    def run() -> set[int] | None:
        level = logging.getLogger("aiokafka").level
        try:
            return asyncio.run(probe())
        finally:
            logging.getLogger("aiokafka").setLevel(level)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    # Called from async code (a test, the fault audit): probe on a thread of its own. This still
    # blocks the caller's loop; async callers should use asyncio.to_thread(stack.up, ...).
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def kafka_ready(bootstrap: str, timeout_s: float = 5.0) -> bool:
    """True when a metadata request to ``bootstrap`` succeeds within ``timeout_s`` seconds."""
    return kafka_broker_ids(bootstrap, timeout_s) is not None
