"""A run's control topic, ``<run>.control``: the fleet-wide state every process of the run can read.

One partition, compacted (:mod:`streams.topics`): the latest record of each key wins, and a process
that starts reads it from the beginning. Keys (:func:`key_of_control`): ``gate``, ``member:<id>``,
``export``, ``run``, ``fleet``, ``regenerate:<digest>``. Values are msgspec JSON with a ``kind``
tag; one that does not decode is skipped with a warning. Who writes each key: ``docs/gate.md``,
"The control topic"; the gate's epochs: its "Epochs and resume".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from streams.bounded import within
from streams.config import Settings
from streams.kafka import consumer_kwargs, producer_kwargs, topic_partitions

__all__ = [
    "GATE_KEY",
    "RATE_WINDOW_S",
    "Breach",
    "ClassCounts",
    "ControlLog",
    "ControlRecord",
    "ControlState",
    "ExportReport",
    "FleetRecord",
    "GateRecord",
    "MemberLoad",
    "MemberReport",
    "RegenerateRecord",
    "RunRecord",
    "decode_control",
    "encode_control",
    "key_of_control",
    "read_control",
    "window_rates",
]

log = logging.getLogger("kafkagen.control")

RATE_WINDOW_S = 120.0
"""Seconds over which a :class:`MemberReport`'s ``tokens_per_s`` and ``completions_per_s`` are
measured (since its first result, when shorter: :func:`window_rates`), and over which a status
reader measures the results rate itself while no member reports one."""


def window_rates(
    acks: Iterable[tuple[float, int]], first: float | None, now: float, window_s: float = RATE_WINDOW_S
) -> tuple[float, float, float]:
    """``(completion tokens/s, results/s, since)`` of the results acknowledged at ``acks``
    (``(seconds, completion tokens)``, any clock), measured from ``since``, the later of
    ``now - window_s`` and ``first`` (the time of the process's first result), to ``now``.

    Only results after ``since`` count: the first result is the window's start, not in it (it and
    the ramp-up before it, server discovery and a whole request lifetime with nothing answered, are
    not the steady state the rest of the run goes at; docs/budgets.md, "Projection"). ``(0, 0,
    now)`` before the first result; ``(0, 0, since)`` at ``since``."""
    if first is None:
        return 0.0, 0.0, now
    since = max(now - window_s, first)
    span = now - since
    if span <= 0:
        return 0.0, 0.0, since
    counted = [tokens for t, tokens in acks if since < t <= now]
    return sum(counted) / span, len(counted) / span, since


GATE_KEY = b"gate"
EXPORT_KEY = b"export"
RUN_KEY = b"run"
FLEET_KEY = b"fleet"
MEMBER_PREFIX = "member:"
REGENERATE_PREFIX = "regenerate:"


class ClassCounts(msgspec.Struct, frozen=True, kw_only=True):
    """Results counted (completions plus dead letters) and, per quality class, how many of them
    had it (:mod:`consumers.quality.gate`: the quality flags, ``error``, ``degenerate``)."""

    results: int = 0
    classes: dict[str, int] = {}

    def __add__(self, other: ClassCounts) -> ClassCounts:
        merged = dict(self.classes)
        for name, n in other.classes.items():
            merged[name] = merged.get(name, 0) + n
        return ClassCounts(results=self.results + other.results, classes=merged)

    def __sub__(self, other: ClassCounts) -> ClassCounts:
        names = set(self.classes) | set(other.classes)
        return ClassCounts(
            results=self.results - other.results,
            classes={n: self.classes.get(n, 0) - other.classes.get(n, 0) for n in sorted(names)},
        )


class Breach(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A quality class whose share passed its threshold: ``count`` of ``results`` (the share) against
    ``threshold`` (``gate.max_<class>``), judged over ``phase``: ``warmup`` (the first results),
    ``window`` (the rolling window) or ``preflight`` (the sample). ``bound``: for a sample, the
    one-sided lower confidence bound on the class's rate that passed the threshold
    (``launch.preflight.verdict``); None for the run's own results, whose share is the rate (and
    then left out of the encoding: a halt record reads as before)."""

    cls: str
    count: int
    results: int
    share: float
    threshold: float
    phase: Literal["warmup", "window", "preflight"]
    bound: float | None = None


class MemberLoad(msgspec.Struct, frozen=True, kw_only=True):
    """What a generation consumer knows of its work and its server now: a report's load fields.

    Counts are requests; ``slots`` is the server's running-request limit (SGLang
    ``max_running_requests``), ``running``/``queued`` its last ``/metrics`` reading (None when it
    does not tell).
    """

    in_flight: int = 0
    window: int = 0
    waiting: int = 0
    slots: int | None = None
    running: int | None = None
    queued: int | None = None
    server_up: bool = True
    partitions: list[int] = []
    model: str | None = None


class MemberReport(MemberLoad, frozen=True, kw_only=True, tag="member", tag_field="kind"):
    """One generation consumer's latest report (key ``member:<instance id>``): its
    :class:`MemberLoad` and what it did.

    Counts are cumulative for the instance id (a restarted consumer continues them from its last
    report); rates are over the consumer's recent window. ``gate`` counts only results of gate epoch
    ``epoch``. Times are Unix epoch seconds; tokens are completion tokens.
    """

    run_id: str
    instance: str
    incarnation: str
    """random per process start: tells a restart from a report of the same process."""
    host: str
    pid: int
    server: str
    state: Literal["starting", "running", "halted", "server_down", "stopped"] = "running"
    started_at: float = 0.0
    at: float = 0.0
    epoch: int = 0
    gate: ClassCounts = ClassCounts()
    totals: ClassCounts = ClassCounts()
    completions: int = 0
    errors: int = 0
    completion_tokens: int = 0
    completion_tokens_sq: int = 0
    """the completions' completion tokens squared, summed (tokens²): their spread, for a
    projection's interval (:mod:`launch.status.projection`)."""
    reasoning_tokens: int = 0
    tokens_per_s: float = 0.0
    """from ``rate_since`` to ``at`` (:func:`window_rates`)."""
    completions_per_s: float = 0.0
    """results (completions and dead letters) per second, likewise."""
    rate_since: float = 0.0
    """where the rates' window starts (Unix seconds): the later of :data:`RATE_WINDOW_S` before
    ``at`` and this process's first result. 0 in a report of an older consumer, whose rates are
    over the last :data:`RATE_WINDOW_S` since ``started_at``, when shorter."""
    earlier_s: float = 0.0
    """seconds this instance's earlier processes ran (each one's ``started_at`` to its last
    report's ``at``, summed): with ``at - started_at``, the time this member held its server, for
    the projection's GPU-hours (:mod:`launch.status.projection`)."""
    max_tokens: int | None = None
    thinking: bool | None = None
    lends: bool = False
    """whether this consumer sends the prompts it cannot start to idle members' servers
    (``consumer.lend``, docs/consumer.md "Tail lending"): then no server idles while another has a
    backlog, and the projection's finish takes the fleet's rate. False in an older consumer's report."""


class GateRecord(msgspec.Struct, frozen=True, kw_only=True, tag="gate", tag_field="kind"):
    """The run's gate state (key ``gate``): ``halted`` in ``epoch``, or ``resumed`` (``epoch`` is
    then the new one). A halt carries why (``reason``, one line), what to do (``fix``), the classes
    that passed their thresholds and the fleet's counts when it tripped; ``params`` are the
    generation parameters it judged (``max_tokens``, ``thinking``, ``model``). ``regeneration``:
    the digest of the :class:`RegenerateRecord` whose new attempts this resume's epoch judges
    (written by ``kafkagen regenerate``), else None."""

    run_id: str
    state: Literal["halted", "resumed"]
    epoch: int
    at: float
    by: str
    reason: str = ""
    fix: str = ""
    breaches: list[Breach] = []
    counts: ClassCounts = ClassCounts()
    params: dict[str, object] = {}
    regeneration: str | None = None


class ExportReport(msgspec.Struct, frozen=True, kw_only=True, tag="export", tag_field="kind"):
    """The latest export of the run (key ``export``): ids in the dataset, of them completions and
    errors, ids missing, duplicates dropped, where it went, when (Unix seconds) and from which host."""

    run_id: str
    at: float
    ids: int
    completions: int
    errors: int
    missing: int
    duplicates_dropped: int
    destination: str
    host: str


class RunRecord(msgspec.Struct, frozen=True, kw_only=True, tag="run", tag_field="kind"):
    """What a run is (key ``run``), written by the main job when it starts (``created_at`` kept
    from the first one): a plain run, or a replay of ``parent`` (``replay_of``). ``generation`` are
    the run's generation settings (``streams.config.GenerationSettings`` fields: ``model``,
    ``max_tokens`` in tokens, ``temperature``, ``top_p``, ``chat_template_kwargs``,
    ``separate_reasoning``) and ``gate`` its quality-gate settings (``streams.config.GateSettings``
    fields; empty in a record written before records held them), which a consumer started with
    the run id alone takes (:func:`streams.runs.record.join_settings`). Times are Unix epoch seconds."""

    run_id: str
    parent: str | None = None
    """the run this one replays (its ``replay_of``), or None."""
    created_at: float
    updated_at: float
    by: str
    """``<command>@<host>`` that wrote it last."""
    prompts_topic: str
    partitions: int
    """the prompts topic's partitions when the record was written."""
    generation: dict[str, object] = {}
    gate: dict[str, object] = {}
    servers: list[str] = []
    """the servers the run was started with (informative; :class:`FleetRecord` is the live list)."""


class FleetRecord(msgspec.Struct, frozen=True, kw_only=True, tag="fleet", tag_field="kind"):
    """The servers a run's main job keeps one generation consumer for (key ``fleet``); ``kafkagen
    scale`` writes a new one and the main job starts or stops consumers to match within seconds.
    ``version`` counts the changes (0: the main job's own at start)."""

    run_id: str
    servers: list[str]
    version: int
    at: float
    by: str


class RegenerateRecord(msgspec.Struct, frozen=True, kw_only=True, tag="regenerate", tag_field="kind"):
    """One ``kafkagen regenerate`` of the run (key ``regenerate:<digest>``), written in the Kafka
    transaction that re-publishes its selection, so it exists exactly when the prompts do.
    ``digest`` identifies the regeneration (the command's conditions, overrides and selection:
    ``launch.regenerate.select.command_digest``). ``attempts`` counts the re-published prompts by
    their new ``attempt``."""

    run_id: str
    digest: str
    where: dict[str, object]
    overrides: dict[str, object]
    ids: int
    attempts: dict[str, int]
    at: float
    by: str


ControlRecord = MemberReport | GateRecord | ExportReport | RunRecord | FleetRecord | RegenerateRecord

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ControlRecord)


def key_of_control(record: ControlRecord) -> bytes:
    """The key a control record is written under (``docs/gate.md``, "The control topic")."""
    if isinstance(record, MemberReport):
        return f"{MEMBER_PREFIX}{record.instance}".encode()
    if isinstance(record, GateRecord):
        return GATE_KEY
    if isinstance(record, RunRecord):
        return RUN_KEY
    if isinstance(record, FleetRecord):
        return FLEET_KEY
    if isinstance(record, RegenerateRecord):
        return f"{REGENERATE_PREFIX}{record.digest}".encode()
    return EXPORT_KEY


def encode_control(record: ControlRecord) -> bytes:
    """``record`` as JSON bytes with its ``kind`` tag."""
    return _encoder.encode(record)


def decode_control(data: bytes) -> ControlRecord:
    """A control record from JSON bytes.

    Raises:
        msgspec.DecodeError: not a control record (the message names the field).
    """
    return _decoder.decode(data)


@dataclass
class ControlState:
    """What the control topic says now: the gate (None: never halted), each member's latest
    report by instance id, the latest export, the run record, the fleet, the regenerations by
    digest. ``offset``: the next offset to read."""

    gate: GateRecord | None = None
    members: dict[str, MemberReport] = field(default_factory=dict)
    export: ExportReport | None = None
    run: RunRecord | None = None
    fleet: FleetRecord | None = None
    regenerations: dict[str, RegenerateRecord] = field(default_factory=dict)
    offset: int = 0

    @property
    def halted(self) -> bool:
        """Whether the run is halted by its quality gate."""
        return self.gate is not None and self.gate.state == "halted"

    @property
    def epoch(self) -> int:
        """The gate epoch results count in now: 0 until a resume, then the resume's."""
        return 0 if self.gate is None else self.gate.epoch

    def apply(self, record: ControlRecord) -> None:
        """Take ``record`` in (the latest of a key wins), except a gate record older than the
        current one: a halt of epoch ``e`` written after the resume that started ``e + 1`` (a
        consumer whose trip could not be written for a while), or a resume to ``e`` after the
        halt of ``e``, is stale and ignored (:func:`_gate_order`)."""
        if isinstance(record, MemberReport):
            self.members[record.instance] = record
        elif isinstance(record, GateRecord):
            if self.gate is not None and _gate_order(record) < _gate_order(self.gate):
                log.warning(
                    "stale gate record ignored: %s of epoch %d (by %s) after %s of epoch %d",
                    record.state,
                    record.epoch,
                    record.by,
                    self.gate.state,
                    self.gate.epoch,
                )
                return
            self.gate = record
        elif isinstance(record, RunRecord):
            self.run = record
        elif isinstance(record, FleetRecord):
            self.fleet = record
        elif isinstance(record, RegenerateRecord):
            self.regenerations[record.digest] = record
        else:
            self.export = record

    def fleet_gate_counts(self) -> ClassCounts:
        """The members' gate counts of the current epoch, summed."""
        total = ClassCounts()
        for member in self.members.values():
            if member.epoch == self.epoch:
                total = total + member.gate
        return total


def _gate_order(record: GateRecord) -> int:
    """Where ``record`` stands in a run's gate history: the resume to epoch ``e`` (``2e``) comes
    before the halt of ``e`` (``2e + 1``), which comes before the resume to ``e + 1``."""
    return 2 * record.epoch + (1 if record.state == "halted" else 0)


class ControlLog:
    """Reads a run's control topic into a :class:`ControlState` and writes records to it.

    Args:
        settings: ``kafka`` and ``topics.control`` (the topic must exist: :func:`streams.topics.ensure_topics`
            with the ``control`` spec).
        write: also start a producer (acks=all, idempotent) for :meth:`publish`.

    Use: ``await log.start()`` (reads the topic to its end), then ``await log.poll()`` as often as
    the state must be fresh, ``await log.publish(record)``, and ``await log.stop()``.
    """

    def __init__(self, settings: Settings, *, write: bool = True) -> None:
        self.settings = settings
        self.topic = settings.topics.control
        self.state = ControlState()
        self._tp = TopicPartition(self.topic, 0)
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._write = write

    async def start(self, *, timeout_s: float = 30.0) -> ControlState:
        """Connect and read the topic from its beginning to its end.

        Raises:
            aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` s.
        """
        async with asyncio.timeout(timeout_s):
            consumer = AIOKafkaConsumer(**consumer_kwargs(self.settings.kafka, group_id=None))
            await consumer.start()
            self._consumer = consumer
            consumer.assign([self._tp])
            await consumer.seek_to_beginning(self._tp)
            await self.catch_up()
            if self._write:
                self._producer = AIOKafkaProducer(**producer_kwargs(self.settings.kafka))
                await self._producer.start()
        return self.state

    async def catch_up(self) -> list[ControlRecord]:
        """Read the topic up to its end offset now (not only what the fetcher has buffered) and
        apply it; returns the records read. The caller bounds the time (``asyncio.timeout``).

        Raises:
            aiokafka.errors.KafkaError: Kafka did not answer.
        """
        consumer = self._consumer
        assert consumer is not None, "start() first"
        end = (await consumer.end_offsets([self._tp]))[self._tp]
        records: list[ControlRecord] = []
        while self.state.offset < end:
            records += await self.poll(timeout_ms=500)
            self.state.offset = max(self.state.offset, await consumer.position(self._tp))
        return records

    async def poll(self, *, timeout_ms: int = 0) -> list[ControlRecord]:
        """Read what was written since the last call (waiting up to ``timeout_ms`` for the first
        record) and apply it to :attr:`state`; returns the records read, in order."""
        assert self._consumer is not None, "start() first"
        records: list[ControlRecord] = []
        batch = await self._consumer.getmany(self._tp, timeout_ms=timeout_ms)
        for message in batch.get(self._tp, []):
            self.state.offset = message.offset + 1
            if message.value is None:  # a tombstone
                continue
            try:
                record = decode_control(message.value)
            except msgspec.DecodeError as exc:
                log.warning(
                    "%s offset %d: not a control record (%s): skipped", self.topic, message.offset, exc
                )
                continue
            self.state.apply(record)
            records.append(record)
        return records

    async def publish(self, record: ControlRecord) -> None:
        """Write ``record`` under its key and wait for the broker's acknowledgement (acks=all).

        Raises:
            aiokafka.errors.KafkaError: the write failed.
        """
        assert self._producer is not None, "start() a writing ControlLog first"
        await self._producer.send_and_wait(self.topic, encode_control(record), key=key_of_control(record))

    async def stop(self) -> None:
        """Close the clients (errors while closing are ignored), each within 5 s: with all of
        Kafka down, a producer's stop would wait for its records' delivery timeout."""
        for client in (self._producer, self._consumer):
            if client is not None:
                with contextlib.suppress(KafkaError, OSError, asyncio.CancelledError):
                    await within(5.0, client.stop())
        self._producer = self._consumer = None


async def read_control(settings: Settings, *, timeout_s: float = 30.0) -> ControlState:
    """The run's control state now, read once (an empty state when the topic does not exist yet).

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` seconds.
    """
    if not await topic_partitions(settings.kafka, settings.topics.control, timeout_s=timeout_s):
        return ControlState()
    control = ControlLog(settings, write=False)
    try:
        return await control.start(timeout_s=timeout_s)
    finally:
        await control.stop()
