"""The generation consumer's part in the run's fleet-wide quality gate.

:class:`FleetGate` counts the quality classes of the results this consumer wrote, reports them on
the run's control topic and reads the other members' reports, judges the fleet's counts of the
current epoch (:class:`consumers.quality.gate.QualityGate`), writes the halt when a class passes its
threshold, and says whether the run is halted. Its loop never raises on a Kafka error.

Design: docs/gate.md ("What a halt does", "In each consumer", "Epochs and resume").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec
from aiokafka.errors import KafkaError

from consumers.metrics import ConsumerMetrics
from consumers.quality.budget import BUDGET_PARAM, budget_halt, deadline_halt
from consumers.quality.gate import QualityGate, halt_message, tally
from streams.config import Settings
from streams.control import (
    RATE_WINDOW_S,
    Breach,
    ClassCounts,
    ControlLog,
    GateRecord,
    MemberLoad,
    MemberReport,
    window_rates,
)
from streams.kafka import KafkaOutage
from streams.quality import result_classes
from streams.records import Usage

__all__ = ["FleetGate", "MemberState"]

log = logging.getLogger("kafkagen.generate")

MemberState = Literal["starting", "running", "halted", "server_down", "stopped"]
"""A member's state as its reports show it (:attr:`streams.control.MemberReport.state`)."""


_POLL_SLICE_S = 0.2
"""Longest wait for control records between checks of the report clock and of this consumer's
own trip, seconds."""


class FleetGate:
    """One consumer's participant in the run's quality gate (docs/gate.md, "In each consumer").

    Args:
        settings: ``run_id``, ``gate``, ``generation`` (the parameters a halt names) and the
            control topic (``topics.control``, which must exist: :func:`streams.topics.ensure_topics`).
        instance_id: the consumer's static member id (the report's key, ``member:<id>``).
        server_url: the consumer's server, for its reports.
        kafka: the consumer's outage tracker.
        load: the consumer's current :class:`streams.control.MemberLoad`.
        metrics: the consumer's metrics, whose ``gate_halted`` and ``gate_epoch`` gauges follow
            this gate.

    Use: ``await start()`` before joining the group, ``count(...)`` per acknowledged result,
    ``run()`` as a background task, ``await stop()`` at the end.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        instance_id: str,
        server_url: str,
        kafka: KafkaOutage,
        load: Callable[[], MemberLoad],
        metrics: ConsumerMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.instance_id = instance_id
        self.server_url = server_url
        self.kafka = kafka
        self.load = load
        self._sent: Mapping[str, Any] | None = None
        """the request params of the latest completion counted (:meth:`params`)."""
        self.control = ControlLog(settings)
        self.incarnation = uuid.uuid4().hex[:12]
        self.started_at = time.time()
        self.epoch = 0
        self.counts = ClassCounts()
        """this instance's counts of gate epoch :attr:`epoch`."""
        self.totals = ClassCounts()
        self.completions = 0
        self.errors = 0
        self.completion_tokens = 0
        self.completion_tokens_sq = 0
        self.reasoning_tokens = 0
        self.quality = QualityGate(settings.gate)
        self.trip: list[Breach] | None = None
        """the breaches this consumer found, until the halt record is written (or a resume)."""
        self.budget_trip: tuple[str, str, str] | None = None
        """(budget, reason, fix) of a budget this consumer found passed (docs/budgets.md), until
        the halt record is written (or a resume); ``budget``: ``output_tokens`` or ``deadline``."""
        self._trip_counts = ClassCounts()
        self._judged = -1
        """fleet results at the last judgement: the gate is fed only when the counts changed."""
        self._recent: deque[tuple[float, int]] = deque()
        """(monotonic seconds, completion tokens) of the results of the last :data:`RATE_WINDOW_S`."""
        self._first_result: float | None = None
        """monotonic seconds of this process's first result: where its rates' window starts."""
        self.earlier_s = 0.0
        """seconds this instance's earlier processes ran (:attr:`MemberReport.earlier_s`)."""
        self._announced: tuple[int, str] | None = None
        """(epoch, state) last logged, so a halt is one error line."""
        self._stopped = False
        if metrics is not None:
            metrics.gate_halted.set_function(lambda: float(self.halted))
            metrics.gate_epoch.set_function(lambda: float(self.epoch))

    # -- state ------------------------------------------------------------------------------------
    @property
    def halted(self) -> bool:
        """Whether the run is halted: a halt record of the current epoch, or this consumer's own
        trip not yet written. Nothing new may start while it is."""
        return self.tripped or self.control.state.halted

    @property
    def tripped(self) -> bool:
        """Whether this consumer found a breach or a passed budget whose halt is not written yet."""
        return self.trip is not None or self.budget_trip is not None

    def fleet_output_tokens(self) -> int:
        """The run's output tokens so far: completion tokens of every completion, this consumer's
        own count plus every other member's latest report, of every epoch."""
        return self.completion_tokens + sum(
            r.completion_tokens for i, r in self.control.state.members.items() if i != self.instance_id
        )

    def _check_budgets(self) -> None:
        """Trip when the run's output tokens reached ``gate.max_output_tokens`` or the clock
        ``gate.deadline`` (:mod:`consumers.quality.budget`); nothing while halted."""
        if self.halted:
            return
        gate = self.settings.gate
        tokens = budget_halt(gate, self.fleet_output_tokens())
        found = ("output_tokens", *tokens) if tokens else None
        late = deadline_halt(gate)
        found = found or (("deadline", *late) if late else None)
        if found is not None:
            self.budget_trip = found
            self._trip_counts = self.fleet_counts()
            self._announce()

    def params(self) -> dict[str, object]:
        """The generation parameters a halt record names: ``max_tokens`` (tokens), ``thinking``,
        ``model`` (the server's, when known)."""
        generation = self.settings.generation
        if self._sent is not None:  # what the latest completion was asked (a regenerated attempt's own)
            kwargs = self._sent.get("chat_template_kwargs") or {}
            return {
                "max_tokens": self._sent.get("max_tokens", generation.max_tokens),
                "thinking": bool(kwargs.get("enable_thinking")),
                "model": self.load().model,
            }
        return {
            "max_tokens": generation.max_tokens,
            "thinking": bool(generation.chat_template_kwargs.get("enable_thinking")),
            "model": self.load().model,
        }

    def fleet_counts(self) -> ClassCounts:
        """The fleet's counts of the current epoch: the other members' latest reports of it plus
        this consumer's own counts."""
        total = self.counts
        for instance, report in self.control.state.members.items():
            if instance != self.instance_id and report.epoch == self.epoch:
                total = total + report.gate
        return total

    # -- start --------------------------------------------------------------------------------------
    async def start(self, *, timeout_s: float = 30.0) -> None:
        """Read the control topic to its end, continue this instance's counts from its last
        report, and announce a halt already in force.

        Raises:
            aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` s.
        """
        state = await self.control.start(timeout_s=timeout_s)
        self.epoch = state.epoch
        own = state.members.get(self.instance_id)
        if own is not None:
            self.totals = own.totals
            self.completions, self.errors = own.completions, own.errors
            self.completion_tokens, self.reasoning_tokens = own.completion_tokens, own.reasoning_tokens
            self.completion_tokens_sq = own.completion_tokens_sq
            if own.started_at > 0:  # the process that wrote it held its server until its last report
                self.earlier_s = own.earlier_s + max(0.0, own.at - own.started_at)
            if own.epoch == self.epoch:
                self.counts = own.gate
            log.info(
                "quality gate: continuing %s's counts from its last report (%d results, %d this epoch)",
                self.instance_id,
                self.totals.results,
                self.counts.results,
            )
        self._announce()
        self._check_budgets()  # a budget passed already halts before the first prompt starts

    # -- counting -----------------------------------------------------------------------------------
    def count(
        self, flags: list[str] | None, usage: Usage | None = None, params: Mapping[str, Any] | None = None
    ) -> None:
        """One result acknowledged by Kafka: a completion with its quality ``flags``, ``usage``
        and request ``params`` (its attempt's ``max_tokens`` and thinking, which a halt names), or
        a dead letter (``flags`` None). Judges the fleet's counts at once."""
        if params is not None:
            self._sent = params
        classes = result_classes(flags)
        self.counts = tally(self.counts, classes)
        self.totals = tally(self.totals, classes)
        tokens = usage.completion_tokens if usage is not None else 0
        if flags is None:
            self.errors += 1
        else:
            self.completions += 1
            self.completion_tokens += tokens
            self.completion_tokens_sq += tokens * tokens
            self.reasoning_tokens += usage.reasoning_tokens if usage is not None else 0
        now = time.monotonic()
        if self._first_result is None:
            self._first_result = now
        self._recent.append((now, tokens))
        self._check_budgets()
        self._judge()

    def _judge(self) -> None:
        """Feed the gate the fleet's counts when they changed; on breaches, trip (once per epoch)
        which the loop writes as the halt record."""
        if self.halted:
            return
        fleet = self.fleet_counts()
        if fleet.results == self._judged:
            return
        self._judged = fleet.results
        found = self.quality.judge(fleet)
        if found:
            self.trip = found
            self._trip_counts = fleet
            self._announce()

    def rates(self, now: float | None = None) -> tuple[float, float, float]:
        """(completion tokens per second, results per second, the window's start in monotonic
        seconds) over the last :data:`RATE_WINDOW_S` seconds, or since this process's first result
        when shorter (:func:`streams.control.window_rates`: the ramp-up before it is not counted)."""
        now = time.monotonic() if now is None else now
        while self._recent and self._recent[0][0] < now - RATE_WINDOW_S:
            self._recent.popleft()
        return window_rates(self._recent, self._first_result, now)

    # -- the control loop --------------------------------------------------------------------------
    def report(self, state: MemberState | None = None) -> MemberReport:
        """This member's report now (``state`` overrides the derived one)."""
        load = self.load()
        if state is None:
            state = "halted" if self.halted else ("running" if load.server_up else "server_down")
        mono, wall = time.monotonic(), time.time()
        tokens_per_s, completions_per_s, since = self.rates(mono)
        generation = self.settings.generation
        return MemberReport(
            **msgspec.structs.asdict(load),
            run_id=self.settings.run_id,
            instance=self.instance_id,
            incarnation=self.incarnation,
            host=socket.gethostname(),
            pid=os.getpid(),
            server=self.server_url,
            state=state,
            started_at=self.started_at,
            at=wall,
            epoch=self.epoch,
            gate=self.counts,
            totals=self.totals,
            completions=self.completions,
            errors=self.errors,
            completion_tokens=self.completion_tokens,
            completion_tokens_sq=self.completion_tokens_sq,
            reasoning_tokens=self.reasoning_tokens,
            tokens_per_s=tokens_per_s,
            completions_per_s=completions_per_s,
            rate_since=wall - (mono - since),
            earlier_s=self.earlier_s,
            max_tokens=generation.max_tokens,
            thinking=bool(generation.chat_template_kwargs.get("enable_thinking")),
            lends=self.settings.consumer.lend,
        )

    async def run(self) -> None:
        """Until cancelled: read the control topic as records arrive (a halt or resume written by
        anyone is seen within about a second), publish this member's report every
        ``gate.report_interval_s``, judge the fleet, write the halt record when this consumer
        tripped (within :data:`_POLL_SLICE_S`). Kafka errors are reported to the outage tracker
        and retried; never raises."""
        interval = self.settings.gate.report_interval_s
        next_report = 0.0
        while True:
            try:
                now = time.monotonic()
                self._check_budgets()
                if self.tripped and not self.control.state.halted:
                    # Read what was written meanwhile first: a halt by another consumer, or a
                    # resume that made this trip's epoch past (its halt would be stale).
                    async with asyncio.timeout(max(5.0, 5 * interval)):
                        await self.control.catch_up()
                    self._after_records()
                if self.tripped and not self.control.state.halted:
                    await self._publish_halt()
                if now >= next_report:
                    await self._publish(self.report())
                    next_report = time.monotonic() + interval
                wait_s = max(0.0, min(_POLL_SLICE_S, next_report - time.monotonic()))
                if await self.control.poll(timeout_ms=int(wait_s * 1000)):
                    self._after_records()
            except (KafkaError, TimeoutError, OSError) as exc:
                self.kafka.failed(f"control topic {self.control.topic}: {exc}")
                await asyncio.sleep(min(5.0, interval))

    def _after_records(self) -> None:
        """Take in what the control topic said: a resume starts a new epoch; a halt is announced;
        the others' counts may trip the gate."""
        state = self.control.state
        if state.epoch > self.epoch:
            log.info(
                "quality gate of run %s resumed by %s: epoch %d starts, counts from zero; "
                "starting prompts again",
                self.settings.run_id,
                state.gate.by if state.gate else "?",
                state.epoch,
            )
            self.epoch = state.epoch
            self.counts = ClassCounts()
            self.quality = QualityGate(self.settings.gate)
            self.trip = self.budget_trip = None
            self._judged = -1
        if state.halted and self.tripped:
            self.trip = self.budget_trip = None  # someone's halt (ours or another's) is written
        self._announce()
        self._check_budgets()
        self._judge()

    async def _publish_halt(self) -> None:
        """Write this consumer's trip as the run's halt record (its epoch, cause, fix, counts)."""
        params = self.params()
        if self.budget_trip is not None:
            budget, reason, fix = self.budget_trip
            params = {**params, BUDGET_PARAM: budget, "output_tokens": self.fleet_output_tokens()}
        else:
            assert self.trip is not None
            reason, fix = halt_message(self.trip, params)
        record = GateRecord(
            run_id=self.settings.run_id,
            state="halted",
            epoch=self.epoch,
            at=time.time(),
            by=self.instance_id,
            reason=reason,
            fix=fix,
            breaches=self.trip or [],
            counts=self._trip_counts,
            params=params,
        )
        await self._publish(record)
        self.control.state.apply(record)
        self.trip = self.budget_trip = None
        self._announce()

    async def _publish(self, record: MemberReport | GateRecord) -> None:
        """Write ``record``, waiting at most a few report intervals (a fetch poll returns nothing
        while Kafka is away; only a write that the broker acknowledged says it answers).

        Raises:
            aiokafka.errors.KafkaError, TimeoutError: not acknowledged in time.
        """
        async with asyncio.timeout(max(5.0, 5 * self.settings.gate.report_interval_s)):
            await self.control.publish(record)
        self.kafka.ok()

    def _announce(self) -> None:
        """Log a change of the gate's state once: the halt as one error line (cause, fix, resume)."""
        state = self.control.state
        gate = state.gate
        if self.halted:
            key = (self.epoch, "halted")
            if self._announced == key:
                return
            self._announced = key
            if self.budget_trip is not None:
                _, reason, fix = self.budget_trip
                by = self.instance_id
            elif self.trip is not None:
                reason, fix = halt_message(self.trip, self.params())
                by = self.instance_id
            else:
                reason, fix = (gate.reason, gate.fix) if gate is not None else ("", "")
                by = gate.by if gate is not None else "?"
            log.error(
                "QUALITY GATE HALTED run %s (epoch %d, by %s): %s. Fix: %s. No new prompt starts; "
                "requests in flight finish and are written. After the fix, restart the consumers "
                "with the new settings and run: kafkagen gate resume --run-id %s",
                self.settings.run_id,
                self.epoch,
                by,
                reason or "halted by hand",
                fix or "see the halt's reason",
                self.settings.run_id,
            )
        else:
            self._announced = (self.epoch, "running")

    async def stop(self) -> None:
        """Publish a last report (``state="stopped"``, best effort within a few seconds) and
        close the control clients."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(KafkaError, TimeoutError, OSError, AssertionError):
            async with asyncio.timeout(5.0):
                await self.control.publish(self.report("stopped"))
        await self.control.stop()
