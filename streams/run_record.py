"""A run's identity on its control topic: the :class:`streams.control.RunRecord` (key ``run``).

The main job (``kafkagen run``, a replay) writes it right after it set up the run's topics
(:func:`publish_run_record`): what the run is (``parent``: the run it replays), its prompts topic
and partition count, its generation settings and the servers it was started with. Whoever joins
the run later reads it (:func:`read_run_record`): a generation consumer started on another host
with only ``--run-id`` and ``--server`` takes the run's generation settings and ``replay_of``
from it (:func:`join_settings`), so it generates exactly as the main job's consumers do.

Precedence in :func:`join_settings`: a setting the user gave that consumer (a flag, or a
``KAFKAGEN_*`` variable) wins over the record; everything else comes from the record (the
caller names the generation fields given by flags: ``given``). A run
without a record (started before records existed, or by hand without the main job) leaves the
settings as they are.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import msgspec

from streams import naming
from streams.config import ENV_PREFIX, GenerationSettings, Settings
from streams.control import ControlLog, RunRecord, read_control
from streams.errors import ConfigError
from streams.kafka import topic_partitions
from streams.topics import ensure_topics, topic_specs

__all__ = [
    "describe_join",
    "generation_in_environment",
    "join_settings",
    "note_partitions",
    "publish_run_record",
    "read_run_record",
    "run_generation",
]

TIMEOUT_S = 30.0
"""Seconds Kafka gets for each step (topic set-up, reading the control topic, the write)."""


def run_generation(settings: Settings) -> dict[str, object]:
    """``settings.generation`` as a RunRecord carries it: the
    :class:`streams.config.GenerationSettings` fields, JSON types (``max_tokens`` in tokens)."""
    data: dict[str, object] = settings.generation.model_dump(mode="json")
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
    env = {k.upper() for k in (os.environ if environ is None else environ)}
    prefix = f"{ENV_PREFIX}GENERATION"
    if prefix in env:
        return set(GenerationSettings.model_fields)
    return {name for name in GenerationSettings.model_fields if f"{prefix}__{name.upper()}" in env}


def join_settings(settings: Settings, record: RunRecord, *, given: Collection[str] | None = None) -> Settings:
    """``settings`` of a process joining the run ``record`` describes (a generation consumer
    started with ``--run-id`` and ``--server`` only): the record's generation settings and its
    ``parent`` as ``replay_of`` (with the topic names re-derived: :func:`streams.naming.for_run`),
    except what the user set, which wins: ``replay_of`` when set (a flag or ``KAFKAGEN_REPLAY_OF``:
    pydantic's ``model_fields_set``), and the generation fields named in ``given`` (the command
    line's flags and the environment's variables; default: the environment's,
    :func:`generation_in_environment`). pydantic cannot tell those apart itself: a nested group
    given in part is filled up with the defaults (``nested_model_default_partial_update``). A
    prompts topic left to its derived name takes the record's ``prompts_topic``.

    Raises:
        ConfigError: ``record`` is of another run than ``settings.run_id``, or its generation
            settings do not validate (an incompatible writer).
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
    gen = settings.generation
    own = {name: getattr(gen, name) for name in sorted(names) if name in GenerationSettings.model_fields}
    try:
        generation = GenerationSettings.model_validate({**record.generation, **own})
    except ValueError as exc:
        raise ConfigError(
            f"run {record.run_id}'s record has generation settings that do not fit: {exc}"
        ) from None
    update: dict[str, Any] = {"generation": generation}
    if derived_prompts and record.prompts_topic and not given_replay:
        update["topics"] = joined.topics.model_copy(update={"prompts": record.prompts_topic})
    return joined.model_copy(update=update)


def describe_join(record: RunRecord, settings: Settings) -> str:
    """One line on what a consumer took from ``record`` (its settings now: ``settings``)."""
    gen = settings.generation
    thinking = gen.chat_template_kwargs.get("enable_thinking")
    replay = f", a replay of run {settings.replay_of}" if settings.replay_of else ""
    return (
        f"joined run {record.run_id}{replay} by its run record (written by {record.by}): prompts "
        f"{settings.topics.prompts}, model {gen.model}, max_tokens {gen.max_tokens}, thinking "
        f"{'on' if thinking else 'off'}, temperature {gen.temperature:g}, top_p {gen.top_p:g}"
    )
