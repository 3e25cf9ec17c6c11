"""A run's identity on its control topic: the :class:`streams.control.RunRecord` (key ``run``).

The main job (``kafkagen run``, a replay) writes it right after it set up the run's topics
(:func:`publish_run_record`); whoever joins the run later reads it (:func:`read_run_record`). A
generation consumer started with only ``--run-id`` and ``--server`` takes the run's generation and
gate settings and ``replay_of`` from it, except what the user gave that consumer (a flag or a
``KAFKAGEN_*`` variable), which wins (:func:`join_settings`). Why: ``docs/runs.md``, "Consumers on
other hosts".
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeVar

import msgspec
from pydantic import BaseModel

from streams.config import ENV_PREFIX, GateSettings, GenerationSettings, Settings
from streams.control import ControlLog, RunRecord, read_control
from streams.errors import ConfigError
from streams.kafka import topic_partitions
from streams.runs import naming
from streams.topics import ensure_topics, topic_specs

__all__ = [
    "describe_join",
    "gate_in_environment",
    "generation_in_environment",
    "join_settings",
    "note_partitions",
    "publish_run_record",
    "read_run_record",
    "run_gate",
    "run_generation",
]

TIMEOUT_S = 30.0
"""Seconds Kafka gets for each step (topic set-up, reading the control topic, the write)."""

M = TypeVar("M", bound=BaseModel)


def run_generation(settings: Settings) -> dict[str, object]:
    """``settings.generation`` as a RunRecord carries it: the
    :class:`streams.config.GenerationSettings` fields, JSON types (``max_tokens`` in tokens)."""
    data: dict[str, object] = settings.generation.model_dump(mode="json")
    return data


def run_gate(settings: Settings) -> dict[str, object]:
    """``settings.gate`` as a RunRecord carries it: the :class:`streams.config.GateSettings`
    fields, JSON types (shares 0..1, ``warmup`` and ``window`` in results, seconds)."""
    data: dict[str, object] = settings.gate.model_dump(mode="json")
    return data


async def publish_run_record(
    settings: Settings,
    *,
    parent: str | None,
    servers: Sequence[str],
    by: str,
    timeout_s: float = TIMEOUT_S,
) -> RunRecord:
    """Write run ``settings.run_id``'s :class:`RunRecord` and return it: ``parent`` (the run it
    replays, or None), ``servers`` (URLs it was started with), ``by`` (``<command>@<host>``), its
    generation settings (:func:`run_generation`), its prompts topic with the partition count the
    cluster reports now (``topics.partitions`` when the topic does not exist yet). An existing
    record's ``created_at`` is kept; ``updated_at`` is now (Unix seconds). Creates the control
    topic when missing.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` seconds
            (per step).
    """
    await ensure_topics(settings, [topic_specs(settings)["control"]], timeout_s=timeout_s)
    prompts = settings.topics.prompts
    partitions = len(await topic_partitions(settings.kafka, prompts, timeout_s=timeout_s))
    control = ControlLog(settings)
    try:
        state = await control.start(timeout_s=timeout_s)
        now = time.time()
        record = RunRecord(
            run_id=settings.run_id,
            parent=parent,
            created_at=state.run.created_at if state.run is not None else now,
            updated_at=now,
            by=by,
            prompts_topic=prompts,
            partitions=partitions or settings.topics.partitions,
            generation=run_generation(settings),
            gate=run_gate(settings),
            servers=list(servers),
        )
        async with asyncio.timeout(timeout_s):
            await control.publish(record)
        return record
    finally:
        await control.stop()


async def note_partitions(
    settings: Settings, partitions: int, *, by: str, timeout_s: float = TIMEOUT_S
) -> None:
    """Record in run ``settings.run_id``'s :class:`RunRecord` that its prompts topic now has
    ``partitions`` partitions (``updated_at`` now, ``by`` the writer); nothing when it has no record.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` seconds.
    """
    control = ControlLog(settings)
    try:
        state = await control.start(timeout_s=timeout_s)
        if state.run is None:
            return
        record = msgspec.structs.replace(state.run, partitions=partitions, updated_at=time.time(), by=by)
        async with asyncio.timeout(timeout_s):
            await control.publish(record)
    finally:
        await control.stop()


async def read_run_record(settings: Settings, *, timeout_s: float = TIMEOUT_S) -> RunRecord | None:
    """Run ``settings.run_id``'s :class:`RunRecord` (the latest), or None when its control topic
    does not exist or holds none.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` seconds.
    """
    return (await read_control(settings, timeout_s=timeout_s)).run


def generation_in_environment(environ: Mapping[str, str] | None = None) -> set[str]:
    """The :class:`~streams.config.GenerationSettings` fields a ``KAFKAGEN_*`` variable of
    ``environ`` (default ``os.environ``) sets: ``KAFKAGEN_GENERATION__<FIELD>`` (any case), or every
    field for ``KAFKAGEN_GENERATION`` (a JSON object)."""
    return _in_environment("generation", GenerationSettings, environ)


def gate_in_environment(environ: Mapping[str, str] | None = None) -> set[str]:
    """The :class:`~streams.config.GateSettings` fields a ``KAFKAGEN_GATE__<FIELD>`` (or
    ``KAFKAGEN_GATE``) variable of ``environ`` sets, as :func:`generation_in_environment`."""
    return _in_environment("gate", GateSettings, environ)


def _in_environment(group: str, model: type[BaseModel], environ: Mapping[str, str] | None) -> set[str]:
    env = {k.upper() for k in (os.environ if environ is None else environ)}
    prefix = f"{ENV_PREFIX}{group.upper()}"
    if prefix in env:
        return set(model.model_fields)
    return {name for name in model.model_fields if f"{prefix}__{name.upper()}" in env}


def join_settings(
    settings: Settings,
    record: RunRecord,
    *,
    given: Collection[str] | None = None,
    given_gate: Collection[str] | None = None,
) -> Settings:
    """``settings`` of a process joining the run ``record`` describes (a generation consumer
    started with ``--run-id`` and ``--server`` only): the record's generation settings and its
    ``parent`` as ``replay_of`` (with the topic names re-derived: :func:`streams.runs.naming.for_run`),
    except what the user set, which wins: ``replay_of`` when set (a flag or ``KAFKAGEN_REPLAY_OF``:
    pydantic's ``model_fields_set``), the generation fields named in ``given`` and the gate
    fields named in ``given_gate`` (the command line's flags and the environment's variables;
    default: the environment's, :func:`generation_in_environment`, :func:`gate_in_environment`).
    pydantic cannot tell those apart itself: a nested group given in part is filled up with the
    defaults (``nested_model_default_partial_update``). A record without gate settings (written
    before records held them) leaves ``settings.gate`` as it is. A prompts topic left to its
    derived name takes the record's ``prompts_topic``.

    Raises:
        ConfigError: ``record`` is of another run than ``settings.run_id``, or its generation or
            gate settings do not validate (an incompatible writer).
    """
    if record.run_id != settings.run_id:
        raise ConfigError(
            f"the run record is of run {record.run_id!r}, not {settings.run_id!r}: not joining it"
        )
    given_replay = "replay_of" in settings.model_fields_set
    replay_of = settings.replay_of if given_replay else record.parent
    derived_prompts = settings.topics.prompts == naming.prompts_topic(settings.run_id, settings.replay_of)
    try:
        joined = naming.for_run(settings, settings.run_id, replay_of=replay_of)
    except ValueError as exc:
        raise ConfigError(f"run {record.run_id}'s record: {exc}") from None
    names = generation_in_environment() if given is None else set(given)
    gate_names = gate_in_environment() if given_gate is None else set(given_gate)
    update: dict[str, Any] = {
        "generation": _joined(record, "generation", record.generation, settings.generation, names),
        "gate": _joined(record, "gate", record.gate, settings.gate, gate_names)
        if record.gate
        else settings.gate,
    }
    if derived_prompts and record.prompts_topic and not given_replay:
        update["topics"] = joined.topics.model_copy(update={"prompts": record.prompts_topic})
    return joined.model_copy(update=update)


def _joined(record: RunRecord, what: str, recorded: Mapping[str, object], own: M, names: set[str]) -> M:
    """``recorded`` (a record's settings group) with the fields ``names`` of ``own`` over it."""
    given = {name: getattr(own, name) for name in sorted(names) if name in type(own).model_fields}
    try:
        return type(own).model_validate({**recorded, **given})
    except ValueError as exc:
        raise ConfigError(
            f"run {record.run_id}'s record has {what} settings that do not fit: {exc}"
        ) from None


def describe_join(record: RunRecord, settings: Settings) -> str:
    """One line on what a consumer took from ``record`` (its settings now: ``settings``)."""
    gen, gate = settings.generation, settings.gate
    thinking = gen.chat_template_kwargs.get("enable_thinking")
    replay = f", a replay of run {settings.replay_of}" if settings.replay_of else ""
    return (
        f"joined run {record.run_id}{replay} by its run record (written by {record.by}): prompts "
        f"{settings.topics.prompts}, model {gen.model}, max_tokens {gen.max_tokens}, thinking "
        f"{'on' if thinking else 'off'}, temperature {gen.temperature:g}, top_p {gen.top_p:g}, "
        + (
            f"quality gate on (warm-up {gate.warmup}, window {gate.window})"
            if gate.enabled
            else "quality gate off"
        )
    )
