"""The local 3-broker Kafka cluster: one quorum of three combined nodes, each its own service
that can be SIGKILLed and started again; internal and kafkagen topics replicated 3 times with
``min.insync.replicas`` 2, so acks=all writes, group commits and transactions go on while one
broker is dead, and the broker rejoins. Runs on the session's cluster (``kafka_cluster_stack``)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import psutil
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from launch.stack import LocalStack, cluster_beside
from launch.stack.__main__ import main as stack_main
from launch.stack.kafka import cluster_id_of, kafka_nodes, server_properties
from producers.reading.limits import topic_max_message_bytes
from streams.config import Settings
from streams.errors import ConfigError
from streams.kafka import client_kwargs, consumer_kwargs, producer_kwargs, topic_partitions
from streams.topics import ensure_topics, topic_specs
from tests.helpers import broker_shapes, with_kafka_at

pytestmark = pytest.mark.kafka


# --- addresses and configs (no JVM) --------------------------------------------------------------


def test_three_addresses_are_three_nodes_and_one_address_is_the_single_broker(
    base_settings: Settings,
) -> None:
    three = LocalStack(with_kafka_at(base_settings, "127.0.0.1:9094,localhost:9096,127.0.0.1:9098"))
    assert three.names(["kafka"]) == ["kafka-1", "kafka-2", "kafka-3"]
    assert three.address("kafka") == "127.0.0.1:9094,127.0.0.1:9096,127.0.0.1:9098"
    assert three.address("kafka-2") == "127.0.0.1:9096"
    assert [(n.node_id, n.port, n.controller_port) for n in three.kafka_nodes] == [
        (1, 9094, 9095),
        (2, 9096, 9097),
        (3, 9098, 9099),
    ]
    one = LocalStack(with_kafka_at(base_settings, "127.0.0.1:9092"))
    assert one.names(["kafka"]) == ["kafka"]
    assert one.address("kafka") == "127.0.0.1:9092"
    with pytest.raises(ConfigError, match="unknown service kafka-2"):
        one.names(["kafka-2"])
    with pytest.raises(ConfigError, match="kill takes one service name"):
        three.kill("kafka")


def test_a_single_broker_keeps_its_configuration() -> None:
    """The one-broker stack is what it was before clusters existed: same name, folder and config."""
    [node] = kafka_nodes([9092])
    assert (node.name, node.node_id, node.controller_port) == ("kafka", 1, 9093)
    props = server_properties(Path("/d"), node, [node])
    assert props.splitlines() == [
        "process.roles=broker,controller",
        "node.id=1",
        "controller.quorum.voters=1@127.0.0.1:9093",
        "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "advertised.listeners=PLAINTEXT://127.0.0.1:9092",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name=PLAINTEXT",
        "log.dirs=/d",
        "auto.create.topics.enable=false",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=7",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "group.initial.rebalance.delay.ms=0",
        "offsets.retention.minutes=43200",
    ]


def test_cluster_node_config_names_the_three_voters_and_replicates_internal_topics() -> None:
    nodes = kafka_nodes([9094, 9096, 9098])
    props = dict(
        line.split("=", 1) for line in server_properties(Path("/d"), nodes[1], nodes).splitlines() if line
    )
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9095,2@127.0.0.1:9097,3@127.0.0.1:9099"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9096,CONTROLLER://127.0.0.1:9097"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["min.insync.replicas"] == "2"


@pytest.mark.parametrize(
    ("bootstrap", "error"),
    [
        ("127.0.0.1:9094,127.0.0.1:9095", "needs port 9095 for its controller"),
        ("127.0.0.1:9094,127.0.0.1:9094", "lists a port twice"),
        ("127.0.0.1:9094,10.0.0.7:9096", "loopback only"),
    ],
)
def test_bad_cluster_addresses_are_refused(base_settings: Settings, bootstrap: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        _ = LocalStack(with_kafka_at(base_settings, bootstrap)).kafka_nodes


def test_the_cluster_beside_the_stack_never_shares_its_ports_or_home(base_settings: Settings) -> None:
    single = with_kafka_at(base_settings, "127.0.0.1:9092")
    beside = cluster_beside(single)
    assert beside.kafka.bootstrap_servers == "127.0.0.1:9094,127.0.0.1:9096,127.0.0.1:9098"
    assert Path(beside.home) == Path(single.home) / "cluster3"
    assert beside.s3 == single.s3
    # Beside a configured cluster, it starts above that cluster's last controller.
    assert cluster_beside(
        with_kafka_at(base_settings, "127.0.0.1:9094,127.0.0.1:9096")
    ).kafka.bootstrap_servers == ("127.0.0.1:9098,127.0.0.1:9100,127.0.0.1:9102")
    with pytest.raises(ConfigError, match="no room above port 65530"):
        cluster_beside(with_kafka_at(base_settings, "127.0.0.1:65530"))


def test_cli_cluster3_holds_kafka_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert stack_main(["--cluster3", "up", "s3"]) == 2
    assert "--cluster3 holds Kafka only" in capsys.readouterr().err


# --- the running cluster ---------------------------------------------------------------------------


async def _admin(settings: Settings) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="test-admin"))
    await admin.start()
    return admin


async def _replicas(settings: Settings, topic: str) -> dict[int, tuple[list[int], list[int], int]]:
    """partition → (replicas, in-sync replicas, leader) of ``topic``, once the broker asked knows
    the topic (just after its creation another broker's metadata may not have it yet: Kafka
    propagates metadata asynchronously, so the answer can be empty for a moment)."""
    admin = await _admin(settings)
    try:
        deadline = time.monotonic() + 15.0
        while True:
            [described] = await admin.describe_topics([topic])
            if (described.get("error_code") == 0 and described["partitions"]) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    return {p["partition"]: (p["replicas"], p["isr"], p["leader"]) for p in described["partitions"]}


async def _topic_config(settings: Settings, topic: str, key: str) -> str:
    admin = await _admin(settings)
    try:
        [resp] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {key: None})])
    finally:
        await admin.close()
    [(_, _, _, _, entries)] = resp.resources
    return str({e[0]: e[1] for e in entries}[key])


def test_the_cluster_has_three_brokers_with_one_cluster_id(kafka_cluster_stack: LocalStack) -> None:
    stack = kafka_cluster_stack
    states = stack.status(["kafka"])
    assert [s.name for s in states] == ["kafka-1", "kafka-2", "kafka-3"]
    assert all(s.ready for s in states)
    assert len({s.pid for s in states}) == 3, "one process per node"
    dirs = [stack.home / n / "data" for n in ("kafka-1", "kafka-2", "kafka-3")]
    ids = {cluster_id_of([d]) for d in dirs}
    assert len(ids) == 1 and None not in ids, "every node formatted with the same cluster id"
    assert len({s.log for s in states}) == 3


async def test_kafkagen_and_internal_topics_are_replicated_three_times(
    kafka_cluster_stack: LocalStack, settings: Settings, unique: str
) -> None:
    cluster = kafka_cluster_stack.settings.model_copy(update={"topics": settings.topics})
    specs = topic_specs(cluster)
    await ensure_topics(cluster, [specs["prompts"], specs["producer_progress"]])
    for topic in (cluster.topics.prompts, cluster.topics.producer_progress):
        parts = await _replicas(cluster, topic)
        assert {len(r) for r, _, _ in parts.values()} == {3}
        assert await _topic_config(cluster, topic, "min.insync.replicas") == "2"
    # A group commit and a transaction create the internal topics: RF 3, min ISR 2.
    consumer = AIOKafkaConsumer(**consumer_kwargs(cluster.kafka, group_id=f"g-{unique}"))
    await consumer.start()
    try:
        tp = TopicPartition(cluster.topics.prompts, 0)
        consumer.assign([tp])
        await consumer.commit({tp: 0})
    finally:
        await consumer.stop()
    producer = AIOKafkaProducer(**producer_kwargs(cluster.kafka), transactional_id=f"tx-{unique}")
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send(cluster.topics.prompts, b"v", key=b"k")
    finally:
        await producer.stop()
    for internal in ("__consumer_offsets", "__transaction_state"):
        parts = await _replicas(cluster, internal)
        assert {len(r) for r, _, _ in parts.values()} == {3}, internal
        assert await _topic_config(cluster, internal, "min.insync.replicas") == "2", internal


@broker_shapes()
async def test_topics_get_the_replication_of_their_cluster(settings: Settings, brokers: int) -> None:
    """Unset ``topics.replication_factor``: 3 replicas and min ISR 2 on the cluster, 1 and 1 alone."""
    specs = topic_specs(settings)
    assert specs["prompts"].replication_factor is None
    await ensure_topics(settings, [specs["prompts"], specs["errors"]])
    for topic in (settings.topics.prompts, settings.topics.errors):
        parts = await _replicas(settings, topic)
        assert len(parts) == settings.topics.partitions
        assert {len(r) for r, _, _ in parts.values()} == {3 if brokers == 3 else 1}
        assert await _topic_config(settings, topic, "min.insync.replicas") == ("2" if brokers == 3 else "1")


@broker_shapes()
async def test_an_explicit_replication_factor_wins_or_is_refused_clearly(
    settings: Settings, brokers: int
) -> None:
    one = settings.model_copy(update={"topics": settings.topics.model_copy(update={"replication_factor": 1})})
    spec = topic_specs(one)["completions"]
    await ensure_topics(one, [spec])
    assert {len(r) for r, _, _ in (await _replicas(one, spec.name)).values()} == {1}
    assert await _topic_config(one, spec.name, "min.insync.replicas") == "1"
    three = settings.model_copy(
        update={"topics": settings.topics.model_copy(update={"replication_factor": 3})}
    )
    spec = topic_specs(three)["errors"]
    if brokers == 3:
        await ensure_topics(three, [spec])
        assert await _topic_config(three, spec.name, "min.insync.replicas") == "2"
    else:
        with pytest.raises(
            ConfigError, match="replication_factor is 3 but the Kafka cluster has 1 live broker"
        ):
            await ensure_topics(three, [spec])


async def _wait(check: object, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert callable(check)
        if await check():
            return
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        await asyncio.sleep(0.5)


async def test_a_killed_broker_leaves_acks_all_working_and_rejoins_after_restart(
    kafka_cluster_stack: LocalStack, settings: Settings, unique: str
) -> None:
    """SIGKILL the leader of a partition: acks=all writes (min ISR 2), a group's reads and
    commits and a transaction go on with two brokers; started again, the broker is back in the
    metadata and in every ISR."""
    stack = kafka_cluster_stack
    cluster = stack.settings.model_copy(update={"topics": settings.topics})
    spec = topic_specs(cluster)["prompts"]
    await ensure_topics(cluster, [spec])
    [(_, _, leader)] = [v for p, v in (await _replicas(cluster, spec.name)).items() if p == 0]
    victim = f"kafka-{leader}"
    pid = next(s.pid for s in stack.status([victim]))
    assert stack.kill(victim)
    try:
        assert not stack.processes.status(victim).running
        assert pid is not None and not psutil.pid_exists(pid)
        producer = AIOKafkaProducer(**producer_kwargs(cluster.kafka), request_timeout_ms=60000)
        await producer.start()
        try:
            for i in range(50):
                await producer.send(spec.name, f"v{i}".encode(), key=b"k", partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        [(_, isr, new_leader)] = [v for p, v in (await _replicas(cluster, spec.name)).items() if p == 0]
        assert new_leader != leader and leader not in isr and len(isr) == 2
        consumer = AIOKafkaConsumer(**consumer_kwargs(cluster.kafka, group_id=f"g-{unique}"))
        await consumer.start()
        try:
            tp = TopicPartition(spec.name, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[bytes] = []
            async with asyncio.timeout(60):
                while len(got) < 50:
                    for records in (await consumer.getmany(tp, timeout_ms=500)).values():
                        got += [r.value or b"" for r in records]
            assert got == [f"v{i}".encode() for i in range(50)]
            await consumer.commit({tp: 50})
            assert await consumer.committed(tp) == 50
        finally:
            await consumer.stop()
        transactional = AIOKafkaProducer(**producer_kwargs(cluster.kafka), transactional_id=f"tx-{unique}")
        await transactional.start()
        try:
            async with transactional.transaction():
                await transactional.send(spec.name, b"in a transaction", key=b"k", partition=0)
        finally:
            await transactional.stop()
    finally:
        await asyncio.to_thread(stack.up, [victim])
    assert await asyncio.to_thread(stack.ready, victim)

    async def back_in_every_isr() -> bool:
        return all(leader in isr for _, isr, _ in (await _replicas(cluster, spec.name)).values())

    await _wait(back_in_every_isr, f"{victim} to rejoin the ISR of {spec.name}", timeout_s=90)


async def _brokers_listed(settings: Settings) -> set[int]:
    """The broker ids of the cluster's metadata, as a client that just started sees them."""
    admin = await _admin(settings)
    try:
        return {b.nodeId for b in admin._client.cluster.brokers()}
    finally:
        await admin.close()


async def test_admin_calls_wait_out_a_broker_killed_a_moment_ago(
    kafka_cluster_stack: LocalStack, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """Just after a SIGKILL the metadata still lists the dead broker (until the controller fences
    it, ``broker.session.timeout.ms``: 6 s here), and aiokafka 0.14's admin client sends each
    request to a random node of it (``aiokafka/admin/client.py`` ``_send_request``):
    NodeNotReadyError one call in three (issue 25 item 4, fault audit seed 31337). Each admin call
    asks again, within its timeout, and answers."""
    stack = kafka_cluster_stack
    cluster = stack.settings.model_copy(update={"topics": settings.topics})
    spec = topic_specs(cluster)["prompts"]
    await ensure_topics(cluster, [spec])
    caplog.set_level(logging.INFO, logger="kafkagen.kafka")

    def asked_again() -> int:
        return sum("asking another broker" in r.getMessage() for r in caplog.records)

    assert stack.kill("kafka-2")
    try:
        calls = 0
        # a call that meets the dead broker is what this proves; calls that miss it take ~10 ms,
        # so the 6 s before the fence hold hundreds of picks
        while 2 in await _brokers_listed(cluster) and asked_again() < 3:
            assert await topic_partitions(cluster.kafka, spec.name) == list(range(spec.partitions))
            assert await topic_max_message_bytes(cluster, spec.name) is not None
            assert (await ensure_topics(cluster, [spec]))[spec.name] == spec.partitions
            calls += 3
        assert asked_again() >= 1, f"{calls} calls never met the dead broker: not proven"
    finally:
        await asyncio.to_thread(stack.up, ["kafka-2"])
    assert await asyncio.to_thread(stack.ready, "kafka-2")
