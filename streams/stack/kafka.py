"""Apache Kafka for the local stack: single-node KRaft (combined broker + controller).

The broker's jars come from Maven Central through ``mvn`` and ``pom.xml`` beside this file
(pinned to :data:`KAFKA_VERSION`), cached under ``<cache>/kafka-<version>/libs``. The log dir
``<home>/kafka/data`` is formatted once with Kafka's storage tool and survives restarts.
Listeners are on 127.0.0.1 only; topics are never auto-created (the producer creates them
with the configured partitions and retention, see :mod:`streams.topics`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
import subprocess
import uuid
from pathlib import Path

from streams.errors import StackError
from streams.stack.process import ServiceSpec, which_or_raise

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


def server_properties(data_dir: Path, port: int, controller_port: int) -> str:
    """The broker's ``server.properties`` (KRaft combined mode, loopback only, one replica)."""
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={data_dir}",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=7",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "group.initial.rebalance.delay.ms=0",
            # Committed offsets must outlive a long pause of a run (default 7 days).
            "offsets.retention.minutes=43200",
            "",
        ]
    )


def kafka_spec(home: Path, cache: Path, port: int, heap: str) -> ServiceSpec:
    """Prepare config, format storage on first use, and describe the broker process.

    Raises:
        StackError: Java, Maven or the storage format step failed.
    """
    java = java_executable()
    libs = ensure_jars(cache)
    base = home / "kafka"
    data = base / "data"
    base.mkdir(parents=True, exist_ok=True)
    controller_port = port + 1
    props = base / "server.properties"
    props.write_text(server_properties(data, port, controller_port))
    log4j = base / "log4j2.properties"
    log4j.write_text(_LOG4J2)
    classpath = f"{libs}/*"
    jvm = [java, f"-Xmx{heap}", "-Xms128m", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
    if not (data / "meta.properties").exists():
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        proc = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise StackError(f"kafka storage format failed for {data}:\n{proc.stdout}{proc.stderr}")
    return ServiceSpec(name="kafka", argv=(*jvm, "kafka.Kafka", str(props)), ports=(port, controller_port))


def kafka_ready(bootstrap: str, timeout_s: float = 5.0) -> bool:
    """True when a metadata request to ``bootstrap`` succeeds within ``timeout_s`` seconds."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def probe() -> bool:
        # aiokafka logs every refused connection at ERROR: expected while the broker starts.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
        try:
            await asyncio.wait_for(admin.start(), timeout_s)
            await asyncio.wait_for(admin.describe_cluster(), timeout_s)
            return True
        except Exception:
            return False
        finally:
            # A half-started client may fail to close; readiness is still False.
            with contextlib.suppress(Exception):
                await admin.close()

    level = logging.getLogger("aiokafka").level
    try:
        return asyncio.run(probe())
    finally:
        logging.getLogger("aiokafka").setLevel(level)
