"""``kafkagen regenerate``'s Kafka side: read a run's results and prompts, re-publish a selection
exactly once (:mod:`launch.regenerate.select` decides what).

The prompts and the run's :class:`streams.control.RegenerateRecord` go in one Kafka transaction
by a producer whose ``transactional_id`` is the run's (:func:`regenerate_transactional_id`), which
fences any other regenerate of the run before the topics are read (KIP-98); the same transaction
starts a new quality-gate epoch unless the run is halted. Why this publishes once and never undoes
a halt: docs/runs.md, "Regenerating part of a run".
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time
from dataclasses import dataclass, replace

import msgspec
from aiokafka import AIOKafkaProducer
from aiokafka.errors import IllegalOperation, ProducerFenced

from launch.regenerate.select import (
    PromptHead,
    ResultHead,
    Selection,
    Selector,
    Where,
    command_digest,
    next_turn_prompt,
    regenerated,
)
from producers.transactions import failed_transaction, quiet_abandoned_kafka_futures
from streams.config import Settings
from streams.control import (
    ControlState,
    GateRecord,
    RegenerateRecord,
    encode_control,
    key_of_control,
    read_control,
)
from streams.errors import ConfigError, RegenerationFenced
from streams.kafka import producer_kwargs, read_to_end, topic_partitions
from streams.records import (
    CompletionRecord,
    GenerationParams,
    PromptRecord,
    RecordDecodeError,
    decode,
    encode,
    key_of,
)
from streams.topics import ensure_topics, topic_specs

__all__ = ["Plan", "plan_regeneration", "regenerate", "regenerate_transactional_id"]

_results = msgspec.json.Decoder(ResultHead)
_prompt_heads = msgspec.json.Decoder(PromptHead)


@dataclass(frozen=True)
class Plan:
    """One regenerate command, read and decided: its digest, its selection, and the earlier
    regeneration with the same digest when there is one (then nothing is published)."""

    digest: str
    where: Where
    overrides: GenerationParams
    selection: Selection
    results: int
    foreign: int
    done_before: RegenerateRecord | None
    gate: ControlState | None = None
    """the control topic's state when the plan was made (its gate epoch and halt); in the plan
    :func:`regenerate` returns after publishing, as re-read inside its transaction."""
    earlier: tuple[RegenerateRecord, ...] = ()
    """the run's earlier regenerations by the same command (conditions and overrides), oldest
    first: run again later, it publishes what matched since (:func:`command_digest`)."""


async def plan_regeneration(settings: Settings, where: Where, overrides: GenerationParams) -> Plan:
    """Read run ``settings.run_id``'s completions, dead letters and prompts (read_committed, to
    the end offsets at the start) and decide what the command would re-publish.

    Raises:
        ConfigError: the run has no prompts topic, or is a replay (its prompts belong to the run it
            replays: regenerate that run, or replay again).
        aiokafka.errors.KafkaError, TimeoutError: Kafka could not be read.
    """
    run = settings.run_id
    state = await _check_run(settings)
    selector = Selector(run, where)
    for kind, topic in (("completion", settings.topics.completions), ("error", settings.topics.errors)):
        async for records in read_to_end(settings.kafka, topic):
            for rec in records:
                try:
                    head = _results.decode(rec.value or b"")
                    after = None
                    if where.next_turn and kind == "completion":
                        after = next_turn_prompt(decode(rec.value or b"", CompletionRecord))
                except (msgspec.DecodeError, RecordDecodeError):
                    continue  # not a result record: the export reports it
                selector.see_result(kind, head, rec.partition, rec.offset, topic, next_prompt=after)
    async for records in read_to_end(settings.kafka, settings.topics.prompts):
        for rec in records:
            try:
                phead = _prompt_heads.decode(rec.value or b"")
                prompt = decode(rec.value or b"", PromptRecord) if selector.wants_prompt(phead) else None
            except (msgspec.DecodeError, RecordDecodeError):
                continue  # an undecodable prompt was dead-lettered: ids=... cannot name it
            selector.see_prompt(phead, rec.partition, prompt)
    selection = selector.selection()
    digest = command_digest(run, where, overrides, selection)
    return Plan(
        digest=digest,
        where=where,
        overrides=overrides,
        selection=selection,
        results=selector.results,
        foreign=selector.foreign,
        done_before=state.regenerations.get(digest),
        gate=state,
        earlier=_same_command(state, where, overrides),
    )


def _same_command(
    state: ControlState, where: Where, overrides: GenerationParams
) -> tuple[RegenerateRecord, ...]:
    """The run's regenerations by the same command (its conditions and overrides), oldest first."""
    encode_sorted = msgspec.json.Encoder(order="sorted").encode
    this = encode_sorted([where.describe(), overrides.as_request_fields()])
    same = [r for r in state.regenerations.values() if encode_sorted([r.where, r.overrides]) == this]
    return tuple(sorted(same, key=lambda r: r.at))


async def _check_run(settings: Settings) -> ControlState:
    """The run's control state, once the run is known to be one that can be regenerated.

    Raises:
        ConfigError: the run is a replay, or has no prompts topic (a mistyped run id).
    """
    run = settings.run_id
    state = await read_control(settings)
    parent = settings.replay_of or (state.run.parent if state.run is not None else None)
    if parent is not None:
        raise ConfigError(
            f"run {run} replays run {parent}: its prompts are {parent}'s. Regenerate {parent} "
            f"(kafkagen regenerate {parent} ...), or replay it again under a new run id "
            f"(kafkagen replay {parent} --as NEW ...)"
        )
    if not await topic_partitions(settings.kafka, settings.topics.prompts):
        raise ConfigError(
            f"run {run} has no prompts topic {settings.topics.prompts}: is the run id right? "
            "(kafkagen runs lists the runs)"
        )
    return state


TRANSACTION_TIMEOUT_MS = 900_000
"""How long the broker lets a regeneration's transaction stay open before it aborts it: Kafka's
default ceiling (``transaction.max.timeout.ms``, 15 min), not aiokafka's 60 s, so a large selection
is not cut off while it is sent (a SIGKILLed one is aborted at once by the next one's fence)."""


def regenerate_transactional_id(run_id: str) -> str:
    """The ``transactional_id`` of run ``run_id``'s regenerations (stable: a regenerate fences any
    other of the same run)."""
    key = msgspec.json.encode(["regenerate", run_id])
    return "kafkagen-regenerate-" + hashlib.blake2b(key, digest_size=12).hexdigest()


async def regenerate(
    settings: Settings,
    where: Where,
    overrides: GenerationParams,
    *,
    dry_run: bool = False,
    by: str | None = None,
) -> tuple[Plan, RegenerateRecord | None]:
    """Plan the regeneration of run ``settings.run_id`` and, unless ``dry_run``, the same command
    was published before, or nothing matches, publish it: the selection re-published as new
    attempts with ``overrides``, and its regenerate record, in one transaction (docs/runs.md).

    Returns:
        the plan, and the record published (None: nothing was).

    Raises:
        ConfigError: as :func:`plan_regeneration`.
        RegenerationFenced: another regenerate of the run took over; nothing was published.
        aiokafka.errors.KafkaError, TimeoutError: Kafka failed (run the same command again: what
            a commit that did reach the broker published is pending, and is not published twice).
    """
    if dry_run:
        return await plan_regeneration(settings, where, overrides), None
    await _check_run(settings)  # before creating the control topic of a mistyped run
    await ensure_topics(settings, [topic_specs(settings)["control"]])
    producer = AIOKafkaProducer(
        **producer_kwargs(settings.kafka),
        transactional_id=regenerate_transactional_id(settings.run_id),
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
    )
    asyncio.get_running_loop().set_exception_handler(quiet_abandoned_kafka_futures)
    await producer.start()  # InitProducerId: fences any other regenerate of this run
    try:
        plan = await plan_regeneration(settings, where, overrides)
        plan_gate = plan.gate
        if plan.done_before is not None or not plan.selection.prompts:
            return plan, None
        attempts = plan.selection.attempts()
        record = RegenerateRecord(
            run_id=settings.run_id,
            digest=plan.digest,
            where=plan.where.describe(),
            overrides=plan.overrides.as_request_fields(),
            ids=len(plan.selection.prompts),
            attempts={str(a): n for a, n in sorted(attempts.items())},
            at=time.time(),
            by=by or f"kafkagen regenerate@{socket.gethostname()}",
        )
        try:
            async with producer.transaction():
                for partition, prompt in plan.selection.prompts:
                    again = regenerated(prompt, prompt.attempt + 1, plan.overrides)
                    await producer.send(
                        settings.topics.prompts, encode(again), key=key_of(again.id), partition=partition
                    )
                # the gate as it is now, not as the plan read it minutes ago: a halt written
                # meanwhile (by a consumer's gate or by hand) must stand (issue 25 item 5). Read
                # before this transaction writes to the control topic: from that send on, the
                # open transaction holds the topic's last stable offset, and a read_committed
                # read would no longer see a halt written after it
                gate = await read_control(settings)
                plan = replace(plan, gate=gate)
                moved = plan_gate is not None and gate.gate != plan_gate.gate
                await producer.send(
                    settings.topics.control, encode_control(record), key=key_of_control(record)
                )
                if not gate.halted and not moved:
                    # the new attempts run with other parameters: the gate judges them from zero,
                    # not on the counts of the results they replace (a halted run resumes instead
                    # when its main job is run again with the fix)
                    fresh = GateRecord(
                        run_id=settings.run_id,
                        state="resumed",
                        epoch=gate.epoch + 1,
                        at=record.at,
                        by=record.by,
                        reason=f"kafkagen regenerate {plan.digest}: {record.ids} prompts re-published",
                        counts=gate.fleet_gate_counts(),
                        regeneration=plan.digest,
                    )
                    await producer.send(
                        settings.topics.control, encode_control(fresh), key=key_of_control(fresh)
                    )
        except (ProducerFenced, AssertionError, IllegalOperation) as exc:
            cause = failed_transaction(producer) or exc
            if not isinstance(cause, ProducerFenced):
                raise cause from None
            raise RegenerationFenced(
                f"another kafkagen regenerate of run {settings.run_id} started meanwhile and took over "
                f"(or this one's transaction stayed open past {TRANSACTION_TIMEOUT_MS // 1000} s): "
                "nothing of this one was published; run it again once that one has ended"
            ) from None
        return plan, record
    finally:
        await producer.stop()
