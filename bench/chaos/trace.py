"""The product's own record of what it did (:mod:`streams.audit_trace`), read back for the audit.

The generation consumers and the sink write, for the audit only, when each result was
acknowledged by Kafka, each object's upload completed, each commit was sent, and each partition
was given up. The audit judges every commit against those moments (none is sampled or skipped)
and names the cause of every duplicate generation. All times are ``time.monotonic()`` seconds,
one clock for every process of the host. Pure, except :func:`read_traces`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Source = tuple[int, int]
"""(partition, offset) of a prompt record."""


@dataclass
class ProcessTrace:
    """One process's trace: ``role`` (``generate`` or ``sink``), its pid, its events in order
    (dicts with ``t``, ``e`` and the event's fields, docs/chaos.md), and the ``time.monotonic_ns()``
    it started at (a pid can be reused; ``key`` cannot)."""

    role: str
    pid: int
    events: list[dict[str, Any]] = field(default_factory=list)
    start: int = 0

    @property
    def key(self) -> str:
        """The process: its pid and start."""
        return f"{self.pid}.{self.start}"


def read_traces(folder: Path) -> list[ProcessTrace]:
    """Every ``<role>-<pid>-<start>.jsonl`` of ``folder``; a torn last line (a SIGKILL inside the
    write) is dropped.

    Raises:
        ValueError: a line before the last one is not JSON (names the file and line).
    """
    out = []
    for path in sorted(folder.glob("*-*-*.jsonl")):
        role, pid, start = path.stem.rsplit("-", 2)
        trace = ProcessTrace(role, int(pid), start=int(start))
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, start=1):
            try:
                trace.events.append(json.loads(line))
            except ValueError:
                if number < len(lines):
                    raise ValueError(f"{path}:{number}: not a trace event: {line[:200]!r}") from None
        out.append(trace)
    return out


def _of(traces: list[ProcessTrace], role: str) -> list[ProcessTrace]:
    return [t for t in traces if t.role == role]


def first_acks(traces: list[ProcessTrace]) -> dict[Source, float]:
    """Prompt -> the first moment a consumer knew a result of it was in Kafka: it was acknowledged
    (``ack``), or a consumer recovering from lost offsets read it there (``answered``)."""
    first: dict[Source, float] = {}
    for trace in _of(traces, "generate"):
        for ev in trace.events:
            if ev["e"] in ("ack", "answered"):
                src = (int(ev["src"][0]), int(ev["src"][1]))
                first[src] = min(first.get(src, ev["t"]), ev["t"])
    return first


@dataclass(frozen=True)
class Commit:
    """A commit as sent (traced just before the request): when, by whom, where, up to which offset."""

    t: float
    pid: int
    topic: str | None
    partition: int
    offset: int


def generate_commits(traces: list[ProcessTrace]) -> list[Commit]:
    """Every commit a generation consumer sent, per partition (topic None: the prompts topic)."""
    return [
        Commit(ev["t"], trace.pid, None, int(p), int(o))
        for trace in _of(traces, "generate")
        for ev in trace.events
        if ev["e"] == "commit"
        for p, o in ev["offsets"].items()
    ]


def sink_commits(traces: list[ProcessTrace]) -> list[Commit]:
    """Every commit the sink sent."""
    return [
        Commit(ev["t"], trace.pid, str(ev["tp"][0]), int(ev["tp"][1]), int(ev["offset"]))
        for trace in _of(traces, "sink")
        for ev in trace.events
        if ev["e"] == "commit"
    ]


@dataclass(frozen=True)
class Ack:
    """A result record's acknowledgement: the consumer (:attr:`ProcessTrace.key`, pid) and when."""

    proc: str
    pid: int
    t: float


def acks_by_record(traces: list[ProcessTrace]) -> dict[tuple[str, int, int], Ack]:
    """(topic, partition, offset) of a result record -> its acknowledgement."""
    return {
        (str(ev["to"][0]), int(ev["to"][1]), int(ev["to"][2])): Ack(trace.key, trace.pid, ev["t"])
        for trace in _of(traces, "generate")
        for ev in trace.events
        if ev["e"] == "ack"
    }


def stored_spans(traces: list[ProcessTrace]) -> list[tuple[str, int, int, int, float]]:
    """(topic, partition, first offset, last offset, t): an object known to be in S3 at ``t``:
    its upload returned (``put``), or a sink's recovery listed it (``found``)."""
    return [
        (str(ev["tp"][0]), int(ev["tp"][1]), int(ev["span"][0]), int(ev["span"][1]), ev["t"])
        for trace in _of(traces, "sink")
        for ev in trace.events
        if ev["e"] in ("put", "found")
    ]


@dataclass(frozen=True)
class Cause:
    """Why a prompt may be generated once more.

    Attributes:
        kind: ``handover``: a consumer wrote a result and lost the partition before committing
            past it (a SIGKILL, a stop, a rebalance, leaving the group); ``retry``: a write whose
            acknowledgement failed was sent again (the first may have landed).
        proc: the consumer (:attr:`ProcessTrace.key`); pid: its pid.
        at: when (the loss of the partition, or the failed write).
        how: ``revoked``, ``moved`` (an assignment without the partition), ``left``, ``ended``
            (the trace stops: killed or exited), ``retry``.
    """

    kind: Literal["handover", "retry"]
    proc: str
    pid: int
    at: float
    how: str


@dataclass
class Causes:
    """What every consumer's trace says about duplicates.

    Attributes:
        by_source: prompt -> causes of a further generation, in time order.
        in_flight: (process key, partition, at) of each handover -> written-but-uncommitted
            prompts then.
    """

    by_source: dict[Source, list[Cause]] = field(default_factory=lambda: defaultdict(list))
    in_flight: dict[tuple[str, int, float], int] = field(default_factory=dict)


def duplicate_causes(traces: list[ProcessTrace]) -> Causes:
    """The causes of duplicates in the generation consumers' traces (see :class:`Cause`).

    A written result (``send``) stays pending until its consumer commits past it (``committed``);
    when the consumer loses the partition with results pending (``revoked``, an ``assigned``
    without it, ``left``, or the end of its trace), each pending result is a handover cause.
    """
    causes = Causes()
    for trace in _of(traces, "generate"):
        pending: dict[int, dict[int, float]] = defaultdict(dict)
        last_t = 0.0
        for ev in trace.events:
            e, t = ev["e"], ev["t"]
            last_t = t
            if e == "send":
                pending[int(ev["src"][0])][int(ev["src"][1])] = t
            elif e == "retry" and ev.get("src") is not None:
                src = (int(ev["src"][0]), int(ev["src"][1]))
                causes.by_source[src].append(Cause("retry", trace.key, trace.pid, t, "retry"))
            elif e == "committed":
                for p, o in ev["offsets"].items():
                    pending[int(p)] = {k: v for k, v in pending.get(int(p), {}).items() if k >= int(o)}
            elif e == "revoked":
                _lose(causes, pending, trace, [int(p) for p in ev["parts"]], t, "revoked")
            elif e == "assigned":
                kept = {int(p) for p in ev["parts"]}
                _lose(causes, pending, trace, [p for p in pending if p not in kept], t, "moved")
            elif e == "left":
                _lose(causes, pending, trace, list(pending), t, "left")
        _lose(causes, pending, trace, list(pending), last_t, "ended")
    return causes


def _lose(
    causes: Causes,
    pending: dict[int, dict[int, float]],
    trace: ProcessTrace,
    partitions: list[int],
    at: float,
    how: str,
) -> None:
    """``trace``'s process gave up ``partitions`` at ``at``: each result it wrote there and did not
    commit is a handover cause."""
    for partition in partitions:
        sent = pending.pop(partition, {})
        if not sent:
            continue
        causes.in_flight[(trace.key, partition, at)] = len(sent)
        for offset in sent:
            causes.by_source[(partition, offset)].append(Cause("handover", trace.key, trace.pid, at, how))
