"""``kafkagen scale``'s writes: a new fleet record (:class:`streams.control.FleetRecord`) for a
running run, and more partitions for its prompts topic (docs/runs.md "Scaling a running run").

Both read the run first and refuse what cannot be right: a run that does not exist on this Kafka
(a mistyped ``--run-id``), a run without a fleet record (no main job ever started it: there is
nothing to follow the record; start ``kafkagen generate --run-id RUN --server URL`` on a host
instead), servers that do not answer, a fleet without servers, fewer partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from aiokafka.errors import InvalidPartitionsError, KafkaError

from launch.run.servers import describe_server, wait_for_servers
from launch.scale.policy import FleetStart, fleet_at_start, fleet_change, same_servers, scaled_servers
from launch.status.collect import quiet_kafka_logs
from streams.config import GenerationSettings, Settings
from streams.control import ControlLog, FleetRecord, RunRecord, read_control
from streams.errors import ConfigError
from streams.kafka import admin_call, topic_partitions
from streams.runs.record import note_partitions, publish_run_record

__all__ = [
    "TIMEOUT_S",
    "check_partitions",
    "check_run",
    "fleet_if_up",
    "publish_fleet",
    "raise_partitions",
    "scale_fleet",
    "settle_fleet",
]

TIMEOUT_S = 30.0
"""Seconds Kafka gets for each step."""


async def check_run(settings: Settings) -> tuple[RunRecord | None, FleetRecord]:
    """Run ``settings.run_id``'s run and fleet records.

    Raises:
        ConfigError: none of the run's topics exists on this Kafka (a mistyped ``--run-id``), or
            the run has no fleet record (no main job started it).
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within :data:`TIMEOUT_S` s.
    """
    t = settings.topics
    if not await topic_partitions(settings.kafka, t.control, timeout_s=TIMEOUT_S):
        found = [x for x in (t.prompts, t.completions) if await topic_partitions(settings.kafka, x)]
        if not found:
            raise ConfigError(
                f"run {settings.run_id!r} not found: Kafka at {settings.kafka.bootstrap_servers} has none of "
                f"{t.prompts}, {t.completions}, {t.control}; nothing was written. Check --run-id and the "
                "Kafka address (KAFKAGEN_KAFKA__BOOTSTRAP_SERVERS)"
            )
    state = await read_control(settings, timeout_s=TIMEOUT_S)  # empty without a control topic
    if state.fleet is None:
        raise ConfigError(
            f"run {settings.run_id} has no fleet record: no main job (kafkagen run) started it, so nothing "
            "would follow a change; start a consumer on the server's host instead: kafkagen generate "
            f"--run-id {settings.run_id} --server URL (docs/runs.md)"
        )
    return state.run, state.fleet


def fleet_if_up(
    settings: Settings, command: Sequence[str], *, by: str, echo: Callable[[str], None]
) -> FleetStart | None:
    """The main job's fleet at start (:func:`launch.scale.policy.fleet_at_start`) when Kafka answers
    within a few seconds (its note printed with ``echo``), else None: the stack is not up yet, and
    :func:`settle_fleet` decides once it is. aiokafka's own lines about the refused connection
    are kept out."""
    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        state = asyncio.run(read_control(settings, timeout_s=5.0))
    except (KafkaError, TimeoutError, OSError):
        return None
    finally:
        quiet.setLevel(level)
    start = fleet_at_start(settings.run_id, command, state.run, state.fleet, by=by, now=time.time())
    if start.note:
        echo(start.note)
    return start


async def settle_fleet(
    settings: Settings,
    command: Sequence[str],
    early: FleetStart | None,
    *,
    by: str,
    echo: Callable[[str], None],
) -> list[str]:
    """Once the run's topics exist: decide the main job's fleet again from the records now
    (:func:`launch.scale.policy.fleet_at_start`; a scale may have come in since ``early``, the decision
    :func:`fleet_if_up` made, if any), write the fleet record when the decision says so, then the
    run record (``servers``: the command's ``command``, ``parent``: ``replay_of``). Returns the
    servers to start consumers for. A change from ``early`` is printed with ``echo``.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within :data:`TIMEOUT_S` s.
    """
    quiet_kafka_logs()  # a control topic created a moment ago has no leader yet: aiokafka retries
    state = await read_control(settings, timeout_s=TIMEOUT_S)
    now = fleet_at_start(settings.run_id, command, state.run, state.fleet, by=by, now=time.time())
    if (early is None or not same_servers(now.servers, early.servers)) and now.note:
        echo(now.note + " (their consumers wait for the servers not checked above)")
    # The fleet first: a job killed between the two writes leaves the run record naming the
    # previous command, so the same new command run again still replaces the fleet.
    if now.record is not None:
        await publish_fleet(settings, now.record)
    await publish_run_record(settings, parent=settings.replay_of, servers=command, by=by)
    return now.servers


async def publish_fleet(settings: Settings, record: FleetRecord) -> None:
    """Write ``record`` on run ``settings.run_id``'s control topic (the main job's fleet at start:
    :func:`launch.scale.policy.fleet_at_start`).

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within :data:`TIMEOUT_S` s.
    """
    control = ControlLog(settings)
    try:
        await control.start(timeout_s=TIMEOUT_S)
        async with asyncio.timeout(TIMEOUT_S):
            await control.publish(record)
    finally:
        await control.stop()


async def scale_fleet(
    settings: Settings,
    *,
    add: Sequence[str] = (),
    remove: Sequence[str] = (),
    servers: Sequence[str] | None = None,
    by: str,
    server_timeout_s: float = 30.0,
    echo: Callable[[str], None] = print,
) -> FleetRecord | None:
    """Write run ``settings.run_id``'s next fleet record: its fleet with ``remove`` taken out and
    ``add`` appended, or ``servers`` (:func:`launch.scale.policy.scaled_servers`), after the servers
    it adds answered (:func:`launch.run.servers.wait_for_servers`, up to ``server_timeout_s``
    seconds, asked with the run's generation settings). Prints one line per server added or
    removed; returns the record written, or None when the fleet is unchanged (nothing written).

    Raises:
        ConfigError: the run does not exist or has no fleet (:func:`check_run`); the change is
            refused (:func:`launch.scale.policy.scaled_servers`: a bad URL, a server not in the fleet,
            no server left).
        UnavailableError: a server to add did not answer within ``server_timeout_s``.
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within :data:`TIMEOUT_S` s.
    """
    run, fleet = await check_run(settings)
    after = scaled_servers(fleet.servers, add=add, remove=remove, servers=servers)
    change = fleet_change(fleet.servers, after)
    if change.empty:
        echo(f"run {settings.run_id}: fleet unchanged (version {fleet.version}: {', '.join(fleet.servers)})")
        return None
    if change.added:
        generation = settings.generation
        if run is not None:
            with contextlib.suppress(ValueError):  # a record of another version: ask as this one would
                generation = GenerationSettings.model_validate(run.generation)
        hint = "check that the server runs at that address, or wait longer with --server-timeout"
        for info in await wait_for_servers(change.added, generation, timeout_s=server_timeout_s, hint=hint):
            echo(describe_server(info))
    control = ControlLog(settings)
    try:
        state = await control.start(timeout_s=TIMEOUT_S)
        latest = state.fleet or fleet
        if latest.version != fleet.version:  # another scale meanwhile: apply ours to its result
            after = scaled_servers(latest.servers, add=add, remove=remove, servers=servers)
            change = fleet_change(latest.servers, after)
        record = FleetRecord(
            run_id=settings.run_id, servers=after, version=latest.version + 1, at=time.time(), by=by
        )
        async with asyncio.timeout(TIMEOUT_S):
            await control.publish(record)
    finally:
        await control.stop()
    for url in change.added:
        echo(f"+ {url}")
    for url in change.removed:
        echo(f"- {url}")
    partitions = len(await topic_partitions(settings.kafka, settings.topics.prompts, timeout_s=TIMEOUT_S))
    echo(
        f"run {settings.run_id}: fleet version {record.version}, {len(after)} servers; the running main job "
        "starts and stops their consumers within seconds (a main job started later starts this fleet)"
    )
    if partitions and len(after) > partitions:
        echo(
            f"warning: {len(after)} servers but {settings.topics.prompts} has {partitions} partitions: "
            f"{len(after) - partitions} consumers get none and stay idle (a partition has one consumer); "
            f"kafkagen scale --run-id {settings.run_id} --partitions N raises the count for prompts "
            "published from then on (docs/runs.md)"
        )
    return record


async def check_partitions(settings: Settings, partitions: int) -> int:
    """The prompts topic's partition count now, when it can become ``partitions``.

    Raises:
        ConfigError: the prompts topic does not exist, or has more than ``partitions``.
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within :data:`TIMEOUT_S` s.
    """
    topic = settings.topics.prompts
    before = len(await topic_partitions(settings.kafka, topic, timeout_s=TIMEOUT_S))
    if not before:
        raise ConfigError(f"run {settings.run_id}: prompts topic {topic} does not exist; nothing was changed")
    if partitions < before:
        raise ConfigError(
            f"--partitions {partitions}: {topic} has {before} partitions, and Kafka cannot lower a topic's "
            "partition count (the records in the others would be lost); nothing was changed"
        )
    return before


async def raise_partitions(settings: Settings, partitions: int, *, by: str) -> tuple[int, int]:
    """Raise run ``settings.run_id``'s prompts topic to ``partitions`` partitions (Kafka
    CreatePartitions); ``(before, after)``. Records already published stay where they are; the
    consumer group takes the new partitions at its next rebalance (docs/runs.md). The run record's
    ``partitions`` is updated.

    Raises:
        ConfigError: the prompts topic does not exist, or has more partitions than ``partitions``
            (Kafka cannot lower a count), or the broker refused.
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within :data:`TIMEOUT_S` s.
    """
    topic = settings.topics.prompts
    before = await check_partitions(settings, partitions)
    if partitions == before:
        return before, before

    async def add(admin: AIOKafkaAdminClient) -> int:
        # asked again on a retriable error (admin_call), and CreatePartitions is not idempotent (a
        # second one is refused): a request whose answer was lost may have been carried out, so
        # look first
        described = await admin.describe_topics([topic])
        now = sum(len(t["partitions"]) for t in described if not t.get("error_code"))
        if now >= partitions:
            return now
        try:
            await admin.create_partitions({topic: NewPartitions(total_count=partitions)})
        except InvalidPartitionsError as exc:  # aiokafka 0.14 raises the topic's error
            raise ConfigError(f"{topic}: Kafka refused {partitions} partitions: {exc}") from None
        return partitions

    after = await admin_call(settings.kafka, f"adding partitions to {topic}", add, timeout_s=TIMEOUT_S)
    await note_partitions(settings, after, by=by)
    return before, after
