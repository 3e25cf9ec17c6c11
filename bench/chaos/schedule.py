"""The seeded fault schedule of the chaos audit. Pure: no processes, no clock, no I/O.

:func:`make_schedule` turns ``(seed, faults, shape)`` into a list of :class:`Fault`, always the
same list for the same arguments (``random.Random(seed)``, nothing else). Faults are spaced over
the fault window: the window of ``window_s`` seconds is cut into ``faults`` equal slots, fault
``i`` starts in the first quarter of slot ``i`` and is undone (process restarted, fault cleared)
within 70 % of a slot, so a fault's recovery never runs into the next fault's start
(:data:`MAX_HOLD_SHARE`). Times are wall seconds after the window opens (the producer's start).

With at least as many faults as there are kinds (:data:`KINDS`), every kind occurs at least once;
with fewer, the kinds are drawn without repetition. A ``producer_kill`` is only placed in a slot
that starts while the producer is still publishing (before ``publish_s``): killing a finished
producer would test nothing.

With ``overlap``, the schedule is harsher: a fault may last up to :data:`OVERLAP_SLOTS` slots, so
it is still on when the next ones start; kinds come from :data:`OVERLAP_KINDS` (a broker and a
consumer SIGKILLed together, all of Kafka down for longer than the consumers' session
timeout, and a fleet-wide halt, as well); the first S3 outage lasts :data:`LONG_S3_DOWN_S` when
the window is four times longer. Two faults never hold the same target at once, and brokers go
down one at a time (or all of them, in a ``kafka_down``).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

FaultKind = Literal[
    "producer_kill",
    "consumer_kill",
    "consumer_stop",
    "scale_out",
    "sink_kill",
    "server_crash",
    "server_hang",
    "server_slow",
    "server_503",
    "broker_kill",
    "s3_down",
    "broker_consumer_kill",
    "kafka_down",
    "gate_halt",
]
"""What a fault does (the target is in :attr:`Fault.target`):

* ``producer_kill``: SIGKILL the producer mid-file, start it again after ``hold_s`` (it resumes);
* ``consumer_kill``: SIGKILL a generation consumer, start it again after ``hold_s``;
* ``consumer_stop``: SIGTERM a consumer (a graceful stop: a rebalance), start it after ``hold_s``;
* ``scale_out``: start ``params["extra"]`` more consumers (more consumers than partitions),
  SIGTERM them after ``hold_s``;
* ``sink_kill``: SIGKILL the S3 sink, start it again after ``hold_s``;
* ``server_crash``: a simulator goes down (``params["mode"]`` 0: SIGKILL, 1: the simulator's
  ``crash`` fault), started again after ``hold_s``;
* ``server_hang``: the simulator's ``hang`` fault for ``hold_s``;
* ``server_slow``: the simulator's ``slow_factor`` (``params["slow_factor"]``) for ``hold_s``: a
  throughput collapse;
* ``server_503``: the simulator answers 503 to every generation request for ``hold_s``;
* ``broker_kill``: SIGKILL a Kafka broker, start it again after ``hold_s``;
* ``s3_down``: stop SeaweedFS (S3 unreachable), start it again after ``hold_s`` (at most
  :data:`MAX_S3_DOWN_S`, or :data:`LONG_S3_DOWN_S` once in an overlapping schedule);
* ``broker_consumer_kill`` (overlapping schedules only): SIGKILL a broker (``target``) and a
  consumer (``params["consumer"]``) at once, start both again after ``hold_s``;
* ``kafka_down`` (overlapping schedules only): SIGKILL every broker, start them again after
  ``hold_s``, longer than the consumers' session timeout (:data:`LONG_KAFKA_DOWN_S`);
* ``gate_halt`` (overlapping schedules only): halt the run fleet-wide on its control topic (the
  record the quality gate writes when it trips, docs/gate.md) while other faults are on, resume
  it after ``hold_s``.
"""

OVERLAP_KINDS: Final[tuple[FaultKind, ...]] = get_args(FaultKind)
KINDS: Final[tuple[FaultKind, ...]] = tuple(
    k for k in OVERLAP_KINDS if k not in ("broker_consumer_kill", "kafka_down", "gate_halt")
)
"""The kinds of a schedule without overlap (the CI seed's schedule depends on them: keep them)."""
OVERLAP_SLOTS: Final = 3.0
"""Longest fault of an overlapping schedule, in slots."""
LONG_KAFKA_DOWN_S: Final = 16.0
"""A ``kafka_down`` lasts this long and up to 8 s more (seconds): past the audit consumers' 10 s
session timeout, so every member's session expires while Kafka is away."""
SETTLE_S: Final[dict[str, float]] = {
    "kafka_down": 25.0,
    "broker_kill": 15.0,
    "broker_consumer_kill": 15.0,
    "s3_down": 10.0,
}
"""Seconds after a fault's undo during which its targets stay held in an overlapping schedule
(brokers and S3 take that long to be ready again); other kinds 2 s."""
LONG_S3_DOWN_S: Final = 300.0
"""The first S3 outage of an overlapping schedule, seconds, when the window is 4 times longer."""
MAX_HOLD_SHARE: Final = 0.7
"""A fault is undone at the latest this share of a slot after the slot starts, minus its start."""
MAX_S3_DOWN_S: Final = 60.0
"""Longest S3 outage, seconds (the audit's stated bound for "S3 unreachable")."""
MIN_SLOT_S: Final = 6.0
"""Shortest slot, seconds: a fault and its recovery need a few seconds of wall time."""


@dataclass(frozen=True)
class Shape:
    """What the schedule may target.

    Attributes:
        consumers: base generation consumers, named ``generate-0`` .. ``generate-<n-1>``.
        servers: simulators, ``sim-0`` .. ``sim-<n-1>``.
        brokers: Kafka nodes, ``kafka-1`` .. ``kafka-<n>``.
        partitions: partitions of the prompts topic (a scale-out goes one consumer beyond them).
    """

    consumers: int = 3
    servers: int = 3
    brokers: int = 3
    partitions: int = 7


@dataclass(frozen=True)
class Fault:
    """One fault of the schedule.

    Attributes:
        index: position in the schedule, from 0.
        at_s: wall seconds after the fault window opens when it is injected.
        kind: what it does (:data:`FaultKind`).
        target: the process or service it hits (``producer``, ``generate-1``, ``sink``,
            ``sim-2``, ``kafka-3``, ``s3``, ``extra`` for a scale-out).
        hold_s: wall seconds from injection to recovery (restart, clear, stop of the extras).
        params: kind-specific numbers (see :data:`FaultKind`).
    """

    index: int
    at_s: float
    kind: FaultKind
    target: str
    hold_s: float
    params: dict[str, float] = field(default_factory=dict)

    @property
    def end_s(self) -> float:
        """Wall seconds after the window opens when the fault is undone."""
        return self.at_s + self.hold_s


def make_schedule(
    seed: int, faults: int, *, window_s: float, publish_s: float, shape: Shape, overlap: bool = False
) -> list[Fault]:
    """The schedule of ``faults`` faults for ``seed`` over a window of ``window_s`` seconds.

    Args:
        seed: the only source of randomness.
        faults: how many faults (0: none).
        window_s: seconds of the fault window.
        publish_s: seconds after the window opens during which the producer is publishing.
        shape: what the faults may target.
        overlap: the harsher schedule of the module docstring.

    Returns:
        the faults in time order; without ``overlap``, each undone before the next one starts.

    Raises:
        ValueError: fewer than 0 faults, slots shorter than :data:`MIN_SLOT_S` seconds, or a
            shape without consumers, servers or brokers.
    """
    if faults < 0:
        raise ValueError(f"the schedule needs 0 faults or more, not {faults}")
    if faults == 0:
        return []  # a run without faults: e.g. to see a planted violation caught
    slot = window_s / faults
    if slot < MIN_SLOT_S:
        raise ValueError(
            f"{faults} faults in {window_s:.0f} s leave {slot:.1f} s each; give at least {MIN_SLOT_S:.0f} s "
            "a fault (a longer --duration or fewer --faults)"
        )
    if min(shape.consumers, shape.servers, shape.brokers) < 1:
        raise ValueError(f"a schedule needs consumers, servers and brokers: {shape}")
    rng = random.Random(seed)
    if overlap:
        return _overlapping(rng, faults, slot, publish_s, shape)
    if faults >= len(KINDS):
        kinds = [*KINDS, *rng.choices(KINDS, k=faults - len(KINDS))]
    else:
        kinds = rng.sample(KINDS, faults)
    rng.shuffle(kinds)
    starts = [i * slot + rng.uniform(0.0, 0.25) * slot for i in range(faults)]
    kinds = _place_producer_kills(kinds, starts, publish_s, rng)
    out = []
    for index, (kind, at_s) in enumerate(zip(kinds, starts, strict=True)):
        latest = (index * slot + MAX_HOLD_SHARE * slot) - at_s  # undone before the next slot starts
        target, hold_s, params = _details(kind, latest, shape, rng)
        out.append(Fault(index, round(at_s, 2), kind, target, round(hold_s, 2), params))
    return out


def holds(fault: Fault) -> set[str]:
    """What ``fault`` holds while it is on (a broker kill also holds ``broker``: one at a time)."""
    held = {fault.target}
    if fault.kind in ("broker_kill", "broker_consumer_kill", "kafka_down"):
        held.add("broker")
    if fault.kind == "broker_consumer_kill":
        held.add(f"generate-{int(fault.params['consumer'])}")
    return held


def _overlapping(rng: random.Random, faults: int, slot: float, publish_s: float, shape: Shape) -> list[Fault]:
    """The overlapping schedule (module docstring)."""
    kinds = [*OVERLAP_KINDS, *rng.choices(OVERLAP_KINDS, k=max(0, faults - len(OVERLAP_KINDS)))]
    rng.shuffle(kinds)
    kinds = kinds[:faults]
    starts = [i * slot + rng.uniform(0.0, 0.25) * slot for i in range(faults)]
    kinds = _place_producer_kills(kinds, starts, publish_s, rng)
    window_s = slot * faults
    long_s3 = window_s >= 4 * LONG_S3_DOWN_S
    out: list[Fault] = []
    for index, at_s in enumerate(starts):
        busy = set().union(*(holds(f) for f in out if f.end_s + SETTLE_S.get(f.kind, 2.0) > at_s))
        latest = min(OVERLAP_SLOTS * slot, window_s - at_s)
        for kind in [kinds[index], *rng.sample(OVERLAP_KINDS, len(OVERLAP_KINDS))]:
            target, hold_s, params = _details(kind, latest, shape, rng)
            if kind == "producer_kill" and at_s >= 0.8 * publish_s:
                continue
            if kind == "kafka_down":
                hold_s = LONG_KAFKA_DOWN_S + rng.uniform(0.0, 8.0)
            if kind == "s3_down" and long_s3 and at_s + LONG_S3_DOWN_S <= window_s:
                hold_s = LONG_S3_DOWN_S
            fault = Fault(index, round(at_s, 2), kind, target, round(hold_s, 2), params)
            if fault.end_s <= window_s and not holds(fault) & busy:
                long_s3 = long_s3 and hold_s != LONG_S3_DOWN_S
                out.append(fault)
                break
        else:  # every kind's target is held: no fault in this slot
            continue
    return [dataclasses.replace(f, index=i) for i, f in enumerate(out)]


def _place_producer_kills(
    kinds: list[FaultKind], starts: list[float], publish_s: float, rng: random.Random
) -> list[FaultKind]:
    """``kinds`` with every ``producer_kill`` moved to a slot that starts while the producer
    publishes; kills that find no such slot become another kind."""
    early = [i for i, t in enumerate(starts) if t < 0.8 * publish_s]
    others: list[FaultKind] = [k for k in kinds if k != "producer_kill"]
    kills = len(kinds) - len(others)
    slots = sorted(rng.sample(early, min(kills, len(early))))
    spare: tuple[FaultKind, ...] = tuple(k for k in KINDS if k != "producer_kill")
    others += [rng.choice(spare) for _ in range(kills - len(slots))]
    placed: list[FaultKind] = []
    rest = iter(others)
    for i in range(len(kinds)):
        placed.append("producer_kill" if i in slots else next(rest))
    return placed


def _details(
    kind: FaultKind, latest_s: float, shape: Shape, rng: random.Random
) -> tuple[str, float, dict[str, float]]:
    """(target, hold seconds, params) of one fault that must be undone within ``latest_s``."""

    def hold(lo: float, hi: float) -> float:
        return max(0.5, rng.uniform(lo, hi) * latest_s)

    if kind == "producer_kill":
        return "producer", hold(0.1, 0.4), {}
    if kind in ("consumer_kill", "consumer_stop"):
        return f"generate-{rng.randrange(shape.consumers)}", hold(0.05, 1.0), {}
    if kind == "scale_out":
        extra = max(1, shape.partitions + 1 - shape.consumers)
        return "extra", hold(0.5, 1.0), {"extra": float(extra)}
    if kind == "sink_kill":
        return "sink", hold(0.05, 0.8), {}
    if kind == "broker_kill":
        return f"kafka-{rng.randint(1, shape.brokers)}", hold(0.2, 0.6), {}
    if kind == "kafka_down":
        return "kafka", 0.0, {}  # the hold is set by the caller
    if kind == "gate_halt":
        return "gate", hold(0.2, 0.6), {}
    if kind == "broker_consumer_kill":
        consumer = float(rng.randrange(shape.consumers))
        return f"kafka-{rng.randint(1, shape.brokers)}", hold(0.2, 0.6), {"consumer": consumer}
    if kind == "s3_down":
        return "s3", min(MAX_S3_DOWN_S, hold(0.4, 1.0)), {}
    server = f"sim-{rng.randrange(shape.servers)}"
    if kind == "server_crash":
        return server, hold(0.3, 1.0), {"mode": float(rng.randrange(2))}
    if kind == "server_slow":
        return server, hold(0.6, 1.0), {"slow_factor": float(rng.choice([8, 10, 20]))}
    return server, hold(0.3, 1.0), {}  # server_hang, server_503
