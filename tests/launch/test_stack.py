"""The local stack command: idempotent ``up``, persistence across a restart, clean ``down``,
and clear errors. Uses its own stack (own home, ports 19092/28333) so the shared one is untouched."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from launch.stack import LocalStack
from launch.stack.__main__ import main as stack_main
from launch.stack.kafka import KAFKA_VERSION, POM
from launch.stack.process import wait_until
from launch.stack.settings import load_stack_settings
from streams.config import Settings
from streams.errors import ConfigError, StackError
from streams.kafka import consumer_kwargs, producer_kwargs
from streams.storage import s3_client
from streams.topics import TopicSpec, ensure_topics
from tests.helpers import with_kafka_at

# alone: it starts and stops whole stacks on fixed ports, and beside other tests a port of its own was
# found taken (twice in 2 parallel runs): it runs after the parallel tiers, one test at a time
pytestmark = pytest.mark.alone


@pytest.fixture
def own_stack(base_settings: Settings, tmp_path: Path) -> Iterator[LocalStack]:
    settings = base_settings.model_copy(
        update={
            "kafka": base_settings.kafka.model_copy(update={"bootstrap_servers": "127.0.0.1:19092"}),
            "s3": base_settings.s3.model_copy(update={"endpoint_url": "http://127.0.0.1:28333"}),
            "servers": [],
            "home": str(tmp_path / "stack"),
        }
    )
    stack = LocalStack(settings)
    yield stack
    stack.down()

    def left() -> list[psutil.Process]:
        home = stack.home.as_posix()
        return [p for p in psutil.process_iter(["cmdline"]) if home in " ".join(p.info["cmdline"] or [])]

    # the next test of this module binds the same fixed ports: wait until this one's processes are gone
    if not wait_until(lambda: not left(), timeout_s=30):
        for proc in left():
            proc.kill()


def _pids(stack: LocalStack) -> dict[str, int | None]:
    return {s.name: s.pid for s in stack.status()}


async def _produce_and_commit(settings: Settings, topic: str, n: int, commit: int) -> None:
    await ensure_topics(settings, [TopicSpec(topic, 3, 1)])
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        for i in range(n):
            await producer.send(topic, key=str(i).encode(), value=b"v", partition=0)
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id="g"))
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.commit({tp: commit})
    finally:
        await consumer.stop()


async def _read_back(settings: Settings, topic: str) -> tuple[int | None, int]:
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id="g"))
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        committed = await consumer.committed(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        return committed, end
    finally:
        await consumer.stop()


def test_up_is_idempotent_data_survives_restart_and_down_leaves_nothing(own_stack: LocalStack) -> None:
    own_stack.up()
    first = _pids(own_stack)
    assert all(first.values())
    own_stack.up()  # second up: nothing new is started
    assert _pids(own_stack) == first
    assert all(s.ready for s in own_stack.status())

    settings = own_stack.settings
    asyncio.run(_produce_and_commit(settings, "survivor", n=50, commit=20))
    s3 = s3_client(settings.s3)
    s3.put_object(Bucket=settings.s3.bucket, Key="survivor/object", Body=b"kept")

    own_stack.down()
    assert not any(psutil.pid_exists(p) for p in first.values() if p)
    own_stack.up()
    assert _pids(own_stack) != first

    assert asyncio.run(_read_back(settings, "survivor")) == (20, 50)
    assert s3.get_object(Bucket=settings.s3.bucket, Key="survivor/object")["Body"].read() == b"kept"

    own_stack.down()
    for state in own_stack.status():
        assert not state.running
    leftover = [
        p
        for p in psutil.process_iter(["cmdline"])
        if own_stack.home.as_posix() in " ".join(p.info["cmdline"] or [])
    ]
    assert leftover == []
    for port in (19092, 19093, 28333):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))  # nothing listens any more


def test_a_taken_port_is_named_with_its_owner(own_stack: LocalStack) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 28333))
        sock.listen()
        with pytest.raises(StackError, match=rf"port 28333 .* taken by pid {os.getpid()}"):
            own_stack.up(["s3"])


def test_non_loopback_addresses_are_refused(base_settings: Settings) -> None:
    settings = with_kafka_at(base_settings, "10.0.0.5:9092")
    with pytest.raises(ConfigError, match="loopback"):
        _ = LocalStack(settings).kafka_port


def test_cli_rejects_unknown_service(capsys: pytest.CaptureFixture[str]) -> None:
    assert stack_main(["up", "zookeeper"]) == 2
    assert "unknown service zookeeper" in capsys.readouterr().err


def test_pom_pins_the_same_kafka_version() -> None:
    assert f"<kafka.version>{KAFKA_VERSION}</kafka.version>" in POM.read_text()


def test_a_running_service_on_other_ports_is_not_taken_for_the_configured_one(own_stack: LocalStack) -> None:
    own_stack.up(["s3"])
    moved = own_stack.settings.model_copy(
        update={"s3": own_stack.settings.s3.model_copy(update={"endpoint_url": "http://127.0.0.1:28433"})}
    )
    with pytest.raises(StackError, match=r"s3 is already running .* on port\(s\) 28333"):
        LocalStack(moved).up(["s3"])


def test_the_stack_reads_its_own_variables_and_refuses_unknown_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKAGEN_STACK__LLM_PARALLEL", "8")
    assert load_stack_settings().llm_parallel == 8
    monkeypatch.setenv("KAFKAGEN_STACK__HOME", "/tmp/x")  # the state folder is KAFKAGEN_HOME
    refused = r"KAFKAGEN_STACK__HOME: no such setting, KAFKAGEN_STACK__\* are: cache, kafka_heap"
    with pytest.raises(ConfigError, match=refused):
        load_stack_settings()
