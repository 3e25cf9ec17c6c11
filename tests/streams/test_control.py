"""The run's control topic (streams/control.py): its records, its state, and reading and writing
it on the real broker (compacted, one partition; the latest record of a key wins)."""

from __future__ import annotations

import time
from typing import Literal

import msgspec
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from streams.config import Settings
from streams.control import (
    ClassCounts,
    ControlLog,
    ControlRecord,
    ControlState,
    ExportReport,
    GateRecord,
    MemberReport,
    decode_control,
    encode_control,
    key_of_control,
    read_control,
)
from streams.kafka import client_kwargs, producer_kwargs
from streams.topics import ensure_topics, topic_specs
from tests.helpers import unused_port, wait_for, with_kafka_at


def member(
    instance: str, *, epoch: int = 0, results: int = 0, flagged: int = 0, run: str = "r"
) -> MemberReport:
    gate = ClassCounts(results=results, classes={"empty_content": flagged} if flagged else {})
    return MemberReport(
        run_id=run,
        instance=instance,
        incarnation="i",
        host="h",
        pid=1,
        server="http://s",
        epoch=epoch,
        gate=gate,
    )


def gate_record(state: Literal["halted", "resumed"], epoch: int, run: str = "r") -> GateRecord:
    return GateRecord(
        run_id=run, state=state, epoch=epoch, at=time.time(), by="test", reason="why", fix="what"
    )


def test_records_round_trip_under_their_keys() -> None:
    export = ExportReport(
        run_id="r",
        at=1.0,
        ids=3,
        completions=2,
        errors=1,
        missing=0,
        duplicates_dropped=0,
        destination="d",
        host="h",
    )
    cases: list[tuple[ControlRecord, bytes]] = [
        (member("gen-0"), b"member:gen-0"),
        (gate_record("halted", 2), b"gate"),
        (export, b"export"),
    ]
    for record, key in cases:
        assert decode_control(encode_control(record)) == record
        assert key_of_control(record) == key
    assert b'"kind":"gate"' in encode_control(gate_record("resumed", 1))
    with pytest.raises(msgspec.DecodeError):
        decode_control(b'{"kind": "something else"}')


def test_state_keeps_the_latest_per_key_and_sums_the_current_epoch() -> None:
    state = ControlState()
    assert (state.halted, state.epoch) == (False, 0)
    state.apply(member("a", results=10, flagged=4))
    state.apply(member("a", results=20, flagged=9))  # a's newer report replaces its older one
    state.apply(member("b", results=5, flagged=1))
    assert state.fleet_gate_counts() == ClassCounts(results=25, classes={"empty_content": 10})
    state.apply(gate_record("halted", 0))
    assert (state.halted, state.epoch) == (True, 0)
    state.apply(gate_record("resumed", 1))
    assert (state.halted, state.epoch) == (False, 1)
    assert state.fleet_gate_counts() == ClassCounts()  # every report is of epoch 0
    state.apply(member("b", epoch=1, results=3))
    assert state.fleet_gate_counts().results == 3


async def test_the_control_topic_is_compacted_with_one_partition(kafka: str, settings: Settings) -> None:
    spec = topic_specs(settings)["control"]
    assert spec.name == settings.topics.control
    assert await ensure_topics(settings, [spec]) == {spec.name: 1}
    admin = AIOKafkaAdminClient(**client_kwargs(settings.kafka, role="test-admin"))
    await admin.start()
    try:
        [described] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, spec.name)])
    finally:
        await admin.close()
    [(_, _, _, _, entries)] = described.resources
    configs = {e[0]: e[1] for e in entries}
    assert configs["cleanup.policy"] == "compact"


async def test_a_log_reads_the_topic_to_its_end_and_then_new_records_within_seconds(
    kafka: str, settings: Settings
) -> None:
    await ensure_topics(settings, [topic_specs(settings)["control"]])
    writer = ControlLog(settings)
    await writer.start()
    try:
        await writer.publish(member("a", results=10, flagged=2))
        await writer.publish(member("b", results=7))
        await writer.publish(member("a", results=30, flagged=12))
        await writer.publish(gate_record("halted", 0))
        # something that is not a control record, and a tombstone: skipped, never fatal
        raw = AIOKafkaProducer(**producer_kwargs(settings.kafka))
        await raw.start()
        try:
            await raw.send_and_wait(settings.topics.control, b"not json", key=b"junk")
            await raw.send_and_wait(settings.topics.control, None, key=b"member:gone")
        finally:
            await raw.stop()

        reader = ControlLog(settings, write=False)
        state = await reader.start(timeout_s=30)
        try:
            assert state.offset == 6
            assert set(state.members) == {"a", "b"}
            assert state.members["a"].gate.results == 30
            assert state.halted and state.gate is not None and state.gate.reason == "why"
            assert state.fleet_gate_counts() == ClassCounts(results=37, classes={"empty_content": 12})

            await writer.publish(gate_record("resumed", 1))
            seen: list[object] = []

            async def resumed() -> bool:
                seen.extend(await reader.poll(timeout_ms=200))
                return not reader.state.halted

            started = time.monotonic()
            await wait_for(resumed, timeout_s=10, what="the reader to see the resume")
            assert time.monotonic() - started < 5
            assert reader.state.epoch == 1
            assert [type(r) for r in seen] == [GateRecord]
        finally:
            await reader.stop()
    finally:
        await writer.stop()

    again = await read_control(settings)
    assert (again.halted, again.epoch, sorted(again.members)) == (False, 1, ["a", "b"])


async def test_read_control_of_a_run_without_a_control_topic_is_empty(kafka: str, settings: Settings) -> None:
    state = await read_control(settings)
    assert state == ControlState()


async def test_read_control_raises_when_kafka_does_not_answer(settings: Settings) -> None:
    nowhere = with_kafka_at(settings, f"127.0.0.1:{unused_port()}")
    started = time.monotonic()
    with pytest.raises((KafkaError, TimeoutError)):
        await read_control(nowhere, timeout_s=3)
    assert time.monotonic() - started < 30


def test_a_gate_record_older_than_the_current_one_is_ignored() -> None:
    """A halt of epoch 0 read after the resume to epoch 1 (written late), or a resume to 1 read
    after the halt of 1, is stale: the gate stays where the newest says."""
    state = ControlState()
    state.apply(gate_record("halted", 0))
    state.apply(gate_record("resumed", 1))
    state.apply(gate_record("halted", 0))
    assert (state.halted, state.epoch) == (False, 1)
    state.apply(gate_record("halted", 1))
    state.apply(gate_record("resumed", 1))
    assert (state.halted, state.epoch) == (True, 1)
    state.apply(gate_record("halted", 1))  # a second consumer's halt of the same epoch
    assert (state.halted, state.epoch) == (True, 1)
    state.apply(gate_record("resumed", 2))
    assert (state.halted, state.epoch) == (False, 2)
