"""A run's status, shaped from what was read (pure: no I/O; :mod:`launch.status.collect` reads).

:class:`Observation` holds the raw facts of one collection; :func:`shape` turns it into a
:class:`RunStatus`, whose :meth:`RunStatus.to_dict` is the ``kafkagen status --json`` document
(schema version 1). Counts are prompts or records, never Kafka offsets, except the ``*_offset``
fields and the lags. The rules and the schema: docs/status.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec

from launch.status.calibration import load_calibration
from launch.status.projection import Budgets, Projection, budgets_of, project
from streams.control import RATE_WINDOW_S, ClassCounts, ControlState, ExportReport, MemberReport
from streams.quality import counted_classes

__all__ = [
    "DASHBOARD_PORT",
    "SCHEMA_VERSION",
    "ConsumerLag",
    "GateView",
    "GroupMember",
    "Lag",
    "Observation",
    "PartitionLag",
    "PromptCounts",
    "Quality",
    "Rates",
    "RunState",
    "RunStatus",
    "ServerProbe",
    "ServerView",
    "SinkLag",
    "eta_range",
    "export_view",
    "gate_view",
    "occupancy",
    "rate_span",
    "report_is_live",
    "shape",
]

DASHBOARD_PORT: Final = 8765
"""The status dashboard's default port (``kafkagen status --dashboard``; docs/dashboard.md)."""

SCHEMA_VERSION = 1

RunState = Literal["running", "halted", "done", "idle", "not_found"]


# -- what was read ------------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupMember:
    """One member of a consumer group as DescribeGroups tells it: its name (the group instance id
    our assignor puts in the JoinGroup metadata, else the member id), the host it connects from
    (``/127.0.0.1``) and its assigned partitions of each topic."""

    member: str
    client_host: str
    partitions: Mapping[str, Sequence[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerProbe:
    """What one server answered from here: ``up`` (it answered ``/metrics`` or discovery within
    the short timeout), its model and running-request limit (``slots``) from discovery, and its
    running and queued requests from ``/metrics`` (None when it does not export them)."""

    url: str
    up: bool
    model: str | None = None
    slots: int | None = None
    running: int | None = None
    queued: int | None = None


@dataclass
class Observation:
    """The raw facts of one collection (offsets are Kafka offsets, by partition number).

    ``published`` is None when the producer's progress topic holds no resume point of the run.
    ``probes`` are keyed by server URL (without a trailing ``/``); ``extra_servers`` are URLs to
    list even without a member report (the main job's). ``observed_rate`` is results per second
    measured by the caller between collections over ``observed_span_s`` seconds (a fallback while
    no member reports a rate)."""

    run_id: str
    at: float
    prompts_topic_exists: bool
    completions_topic_exists: bool = False
    prompts_end: Mapping[int, int] = field(default_factory=dict)
    generate_committed: Mapping[int, int] = field(default_factory=dict)
    completions_end: Mapping[int, int] = field(default_factory=dict)
    errors_end: Mapping[int, int] = field(default_factory=dict)
    sink_committed: Mapping[tuple[str, int], int] = field(default_factory=dict)
    """(topic, partition) -> offset, topics the completions and errors topics."""
    completions_topic: str = ""
    errors_topic: str = ""
    prompts_topic: str = ""
    published: int | None = None
    parent_regenerated: int = 0
    """a replay's: the prompts its parent's regenerations re-published into the prompts topic the
    replay reads (its own control topic has none: a replay cannot be regenerated)."""
    generate_members: Sequence[GroupMember] = ()
    sink_members: int = 0
    control: ControlState = field(default_factory=ControlState)
    probes: Mapping[str, ServerProbe] = field(default_factory=dict)
    extra_servers: Sequence[str] = ()
    report_stale_s: float = 10.0
    """a member report older than this many seconds is not live (its process stopped or hangs)."""
    observed_rate: float | None = None
    observed_span_s: float = RATE_WINDOW_S


# -- the status ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PromptCounts:
    """Prompts and records (not offsets): docs/status.md, "How the status is shaped"."""

    published: int
    published_exact: bool
    results: int
    completions: int
    errors: int
    in_s3: int
    exported: int | None
    remaining: int
    regenerated: int = 0
    """prompts re-published by ``kafkagen regenerate`` (counted in ``published`` too)."""


@dataclass(frozen=True)
class Rates:
    """Summed over the live members' reports: completions (and dead letters) per second and
    completion tokens per second."""

    completions_per_s: float
    tokens_per_s: float


@dataclass(frozen=True)
class PartitionLag:
    """One partition of the prompts topic: its end offset (last stable), the generation group's
    committed offset (0 when none), the lag (offsets) and the member it is assigned to."""

    partition: int
    end_offset: int
    committed_offset: int
    lag: int
    owner: str | None


@dataclass(frozen=True)
class ConsumerLag:
    """One member of the generation group: its partitions of the prompts topic and their lag."""

    member: str
    client_host: str
    partitions: list[int]
    lag: int


@dataclass(frozen=True)
class SinkLag:
    """The sink: results written but not yet committed to S3 (offsets), and its group's members."""

    lag: int
    members: int


@dataclass(frozen=True)
class Lag:
    total: int
    partitions: list[PartitionLag]
    consumers: list[ConsumerLag]
    sink: SinkLag


@dataclass(frozen=True)
class ServerView:
    """One generation consumer and its server: see the schema (docs/status.md). ``report_age_s`` is
    None when the server is known by URL only (no member report yet)."""

    instance: str
    server: str
    model: str | None
    host: str | None
    state: str
    server_up: bool
    report_age_s: float | None
    tokens_per_s: float
    completions_per_s: float
    completions: int
    errors: int
    in_flight: int
    window: int
    running: int | None
    queued: int | None
    slots: int | None
    occupancy: float | None


@dataclass(frozen=True)
class Quality:
    """Results counted by the members (completions and dead letters, all gate epochs) and how many
    had each quality class (:data:`streams.quality.QUALITY_CLASSES`; those counted, by name:
    :func:`streams.quality.counted_classes`)."""

    results: int
    classes: dict[str, int]


@dataclass(frozen=True)
class GateView:
    """The quality gate: ``running`` (never halted, or resumed) or ``halted`` with why and the fix."""

    state: Literal["running", "halted"]
    epoch: int
    reason: str
    fix: str
    at: float | None
    breaches: list[dict[str, Any]]


@dataclass(frozen=True)
class RunStatus:
    """A run's status at ``at`` (Unix seconds); :meth:`to_dict` is the JSON document."""

    run_id: str
    at: float
    state: RunState
    prompts: PromptCounts
    rates: Rates
    eta_s: float | None
    lag: Lag
    servers: list[ServerView]
    quality: Quality
    gate: GateView
    export: dict[str, Any] | None
    eta_range_s: tuple[float, float | None] | None = None
    """the ETA's interval (:func:`eta_range`): low and high seconds, high None when unbounded."""
    projection: Projection | None = None
    """the run at its end, projected (:mod:`launch.status.projection`); None before a completion."""
    budgets: Budgets | None = None
    """the run's output token budget and deadline (its run record's); None when it has neither."""
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The status as plain JSON-able data, in the schema's key order."""
        data = dataclasses.asdict(self)
        return {"schema_version": data.pop("schema_version"), **data}

    @property
    def done(self) -> bool:
        """Every prompt's offset committed and every result in S3 (exact: offsets, markers included)."""
        return self.state == "done"


# -- shaping ------------------------------------------------------------------------------------
def occupancy(running: int | None, queued: int | None, slots: int | None) -> float | None:
    """1.0 when requests wait on the server (it runs all its running limit or KV cache allows),
    else ``running / slots`` (capped at 1); None when either is unknown."""
    if queued:
        return 1.0
    if running is None or not slots:
        return None
    return min(1.0, running / slots)


def eta_range(remaining: int, rate: float, counted: float) -> tuple[float, float | None] | None:
    """The interval of the time (seconds) ``remaining`` results take at ``rate`` results per
    second, a rate measured by counting ``counted`` results (over :data:`RATE_WINDOW_S`): a count
    of n is taken as Poisson, its standard error sqrt(n), so the rate is within ±2/sqrt(n) of
    itself at about 95% and the ETA within ``remaining / (rate × (1 ± 2/sqrt(n)))``. The high end
    is None (no bound) when n ≤ 4; None when ``rate`` ≤ 0. It tells the counting noise of the
    window, not a change of pace to come (a slower tail, servers added): docs/status.md, "ETA"."""
    if rate <= 0:
        return None
    spread = 2.0 / math.sqrt(counted) if counted > 0 else math.inf
    low = round(remaining / (rate * (1.0 + spread)), 1) if math.isfinite(spread) else 0.0
    high = round(remaining / (rate * (1.0 - spread)), 1) if spread < 1.0 else None
    return low, high


def rate_span(report: MemberReport) -> float:
    """Seconds ``report``'s rates were measured over: from its ``rate_since`` to its ``at``, or
    for a report without one (an older consumer's) the last :data:`RATE_WINDOW_S` since its start."""
    if report.rate_since > 0:
        return max(0.0, report.at - report.rate_since)
    return min(RATE_WINDOW_S, max(0.0, report.at - report.started_at))


def _drain(
    consumers: Sequence[ConsumerLag], live: Sequence[MemberReport]
) -> dict[str, tuple[int, float]] | None:
    """Per member of the generation group: its partitions' lag and its live report's tokens/s (0
    without one); None when the group has no member, or every live member lends (``lends``: an
    idle server takes the others' backlog, so none waits for its own partitions alone): the
    projection then takes the fleet's rate."""
    if live and all(r.lends for r in live):
        return None
    rates = {r.instance: r.tokens_per_s for r in live}
    return {c.member: (c.lag, rates.get(c.member, 0.0)) for c in consumers} or None


def report_is_live(report: MemberReport, at: float, stale_s: float) -> bool:
    """Whether ``report`` is from a consumer that runs now: recent (``stale_s`` seconds) and not
    ``stopped``."""
    return report.state != "stopped" and at - report.at <= stale_s


def _server_view(
    report: MemberReport | None, url: str, probe: ServerProbe | None, at: float, stale_s: float
) -> ServerView:
    live = report is not None and report_is_live(report, at, stale_s)
    answered = probe is not None and probe.up
    running = probe.running if answered and probe and probe.running is not None else None
    queued = probe.queued if answered and probe and probe.queued is not None else None
    slots = probe.slots if probe and probe.slots else None
    if report is not None:
        running = running if running is not None else report.running
        queued = queued if queued is not None else report.queued
        slots = slots or report.slots
    if probe is not None and probe.up:
        server_up = True
    elif report is not None and probe is None:
        server_up = report.server_up  # not asked from here (another host's loopback URL)
    else:
        server_up = False
    state: str = report.state if report is not None else ("unreported" if server_up else "server_down")
    if report is not None and not live and report.state != "stopped":
        state = "stale"
    return ServerView(
        instance=report.instance if report else url,
        server=url,
        model=(probe.model if probe and probe.model else None) or (report.model if report else None),
        host=report.host if report else None,
        state=state,
        server_up=server_up,
        report_age_s=round(max(0.0, at - report.at), 3) if report else None,
        tokens_per_s=round(report.tokens_per_s, 3) if live and report else 0.0,
        completions_per_s=round(report.completions_per_s, 3) if live and report else 0.0,
        completions=report.completions if report else 0,
        errors=report.errors if report else 0,
        in_flight=report.in_flight if report else 0,
        window=report.window if report else 0,
        running=running,
        queued=queued,
        slots=slots,
        occupancy=occupancy(running, queued, slots),
    )


def gate_view(control: ControlState) -> GateView:
    """The gate as the control topic's latest gate record says (``running`` when there is none)."""
    gate = control.gate
    if gate is None:
        return GateView("running", 0, "", "", None, [])
    return GateView(
        state="halted" if gate.state == "halted" else "running",
        epoch=gate.epoch,
        reason=gate.reason,
        fix=gate.fix,
        at=gate.at,
        breaches=[msgspec.to_builtins(b) for b in gate.breaches],
    )


def export_view(report: ExportReport | None) -> dict[str, Any] | None:
    """The run's latest export report as plain data (without its record tag), or None."""
    if report is None:
        return None
    data = msgspec.to_builtins(report)
    assert isinstance(data, dict)
    data.pop("kind", None)
    return data


def shape(obs: Observation) -> RunStatus:
    """The :class:`RunStatus` of ``obs`` (the rules: docs/status.md)."""
    control = obs.control
    owner: dict[int, str] = {}
    consumers: list[ConsumerLag] = []
    part_lag: dict[int, int] = {}
    partitions: list[PartitionLag] = []
    for p in sorted(obs.prompts_end):
        end = obs.prompts_end[p]
        committed = obs.generate_committed.get(p, 0)
        part_lag[p] = max(0, end - committed)
    for member in sorted(obs.generate_members, key=lambda m: m.member):
        mine = sorted(member.partitions.get(obs.prompts_topic, ()))
        for p in mine:
            owner[p] = member.member
        consumers.append(
            ConsumerLag(member.member, member.client_host, list(mine), sum(part_lag.get(p, 0) for p in mine))
        )
    for p in sorted(obs.prompts_end):
        end = obs.prompts_end[p]
        partitions.append(PartitionLag(p, end, obs.generate_committed.get(p, 0), part_lag[p], owner.get(p)))
    prompts_end = sum(obs.prompts_end.values())
    completions = sum(obs.completions_end.values())
    errors = sum(obs.errors_end.values())
    results = completions + errors
    results_ends = {(obs.completions_topic, p): e for p, e in obs.completions_end.items()}
    results_ends.update({(obs.errors_topic, p): e for p, e in obs.errors_end.items()})
    in_s3 = sum(min(obs.sink_committed.get(tp, 0), end) for tp, end in results_ends.items())
    sink_lag = sum(max(0, end - obs.sink_committed.get(tp, 0)) for tp, end in results_ends.items())
    regenerated = sum(r.ids for r in control.regenerations.values()) + obs.parent_regenerated
    published = obs.published + regenerated if obs.published is not None else prompts_end
    export = control.export
    counts = PromptCounts(
        published=published,
        published_exact=obs.published is not None,
        results=results,
        completions=completions,
        errors=errors,
        in_s3=in_s3,
        exported=export.ids if export is not None else None,
        remaining=max(0, published - results),
        regenerated=regenerated,
    )

    # servers: one per member report, then the URLs known without one
    views: list[ServerView] = []
    reported: set[str] = set()
    for instance in sorted(control.members):
        report = control.members[instance]
        url = report.server.rstrip("/")
        reported.add(url)
        views.append(_server_view(report, url, obs.probes.get(url), obs.at, obs.report_stale_s))
    for raw in obs.extra_servers:
        url = raw.rstrip("/")
        if url not in reported:
            reported.add(url)
            views.append(_server_view(None, url, obs.probes.get(url), obs.at, obs.report_stale_s))
    live = [r for r in control.members.values() if report_is_live(r, obs.at, obs.report_stale_s)]
    rate = sum(r.completions_per_s for r in live)
    # results each rate was counted from: its rate times its window (shorter after a first result)
    counted = sum(r.completions_per_s * rate_span(r) for r in live)
    if not live and obs.observed_rate is not None:
        rate = obs.observed_rate
        counted = rate * obs.observed_span_s
    rates = Rates(round(float(rate), 3), round(float(sum(r.tokens_per_s for r in live)), 3))

    total = ClassCounts()
    for report in control.members.values():
        total = total + report.totals
    quality = Quality(total.results, counted_classes(total.classes))

    state: RunState
    done = prompts_end > 0 and all(lag == 0 for lag in part_lag.values()) and sink_lag == 0
    if not obs.prompts_topic_exists and not obs.completions_topic_exists:
        state = "not_found"
    elif done:
        state = "done"
    elif control.halted:
        state = "halted"
    elif not obs.generate_members and not live:
        state = "idle"
    else:
        state = "running"
    eta = None if state in ("done", "halted") or rate <= 0 else round(counts.remaining / rate, 1)
    interval = None if eta is None else eta_range(counts.remaining, rate, counted)
    return RunStatus(
        run_id=obs.run_id,
        at=obs.at,
        state=state,
        prompts=counts,
        rates=rates,
        eta_s=eta,
        lag=Lag(sum(part_lag.values()), partitions, consumers, SinkLag(sink_lag, obs.sink_members)),
        servers=views,
        quality=quality,
        gate=gate_view(control),
        export=export_view(export),
        eta_range_s=interval,
        projection=project(
            control.members.values(),
            at=obs.at,
            total=counts.published,
            results=results,
            tokens_per_s=rates.tokens_per_s,
            live_servers=len(live),
            started_at=control.run.created_at if control.run is not None else None,
            calibration=load_calibration(),
            drain=_drain(consumers, live),
        ),
        budgets=budgets_of(control.run.gate) if control.run is not None else None,
    )
