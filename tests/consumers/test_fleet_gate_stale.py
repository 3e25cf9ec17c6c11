"""A consumer's trip found before it read what the others wrote must not undo a resume: its halt
of a past epoch would halt the fixed run again with the old cause (docs/gate.md, epochs)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition

from consumers.quality.fleet_gate import FleetGate
from streams.config import Settings
from streams.control import GATE_KEY, ControlLog, GateRecord, MemberLoad, decode_control, read_control
from streams.kafka import KafkaOutage, consumer_kwargs
from streams.topics import ensure_topics, topic_specs
from tests.helpers import wait_for


def _record(settings: Settings, state: str, epoch: int) -> GateRecord:
    return GateRecord(
        run_id=settings.run_id,
        state="halted" if state == "halted" else "resumed",
        epoch=epoch,
        at=time.time(),
        by="operator",
        reason=f"{state} {epoch}",
    )


async def gate_records(settings: Settings) -> list[GateRecord]:
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    await consumer.start()
    try:
        tp = TopicPartition(settings.topics.control, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        found: list[GateRecord] = []
        while await consumer.position(tp) < end:
            for message in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                record = decode_control(message.value or b"")
                if message.key == GATE_KEY and isinstance(record, GateRecord):
                    found.append(record)
        return found
    finally:
        await consumer.stop()


async def test_a_trip_of_a_past_epoch_is_not_written_after_the_resume(kafka: str, settings: Settings) -> None:
    await ensure_topics(settings, [topic_specs(settings)["control"]])
    log = logging.getLogger("test")
    gate = FleetGate(
        settings, instance_id="b", server_url="http://s", kafka=KafkaOutage("k", log), load=MemberLoad
    )
    await gate.start()
    for _ in range(60):  # 60 empty answers of 60: b trips at once, in epoch 0
        gate.count(["empty_content", "reasoning_ate_budget"])
    assert gate.halted and gate.trip is not None and gate.epoch == 0

    # Before b's loop ran (its writes failed for a while, say), another consumer halted the run
    # and the operator resumed it with the fix.
    other = ControlLog(settings)
    await other.start()
    try:
        await other.publish(_record(settings, "halted", 0))
        await other.publish(_record(settings, "resumed", 1))
    finally:
        await other.stop()

    loop = asyncio.create_task(gate.run())
    try:

        async def b_reported() -> bool:  # b's loop ran: it read the control topic and reported
            member = (await read_control(settings)).members.get("b")
            return member is not None and member.epoch == 1

        await wait_for(b_reported, timeout_s=60, what="b to report at epoch 1")
        state = await read_control(settings)
        assert not state.halted and state.epoch == 1, state.gate
        assert state.members["b"].epoch == 1 and state.members["b"].state == "running"
        assert not gate.halted and gate.epoch == 1
        # nothing stale on the topic either: compaction keeps the last record of the key
        assert [(g.state, g.epoch) for g in await gate_records(settings)] == [("halted", 0), ("resumed", 1)]
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
        await gate.stop()


async def test_a_halt_names_the_budget_its_results_were_asked_not_the_consumer_s(
    kafka: str, settings: Settings
) -> None:
    """After ``regenerate --max-tokens 8192`` the attempts carry their own budget; a consumer
    started at 4096 that halts on them must name 8192 ("raise --max-tokens" past 4096 would
    be the wrong fix)."""
    settings = settings.model_copy(update={"generation": settings.generation.with_budget(max_tokens=4096)})
    await ensure_topics(settings, [topic_specs(settings)["control"]])
    gate = FleetGate(
        settings,
        instance_id="c",
        server_url="http://s",
        kafka=KafkaOutage("k", logging.getLogger("test")),
        load=MemberLoad,
    )
    await gate.start()
    asked = {"max_tokens": 8192, "chat_template_kwargs": {"enable_thinking": True}}
    for _ in range(60):
        gate.count(["empty_content", "reasoning_ate_budget"], None, asked)
    assert gate.halted
    loop = asyncio.create_task(gate.run())
    try:

        async def halted() -> bool:
            return (await read_control(settings)).halted

        await wait_for(halted, timeout_s=60, what="the halt record")
        record = (await read_control(settings)).gate
        assert record is not None and record.params["max_tokens"] == 8192, record
        assert "at max_tokens 8192, thinking on" in record.reason, record.reason
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
        await gate.stop()
