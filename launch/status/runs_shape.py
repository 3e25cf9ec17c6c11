"""The runs Kafka and S3 know, shaped from what was read (pure: no I/O; :mod:`launch.status.runs` reads).

:func:`runs_of_topics` finds the runs in the topic names, the S3 run folders add those whose topics
are gone; :func:`shape_run` turns each run's :class:`RunFacts` into a :class:`RunRow` (counts as
``kafkagen status``'s) and :meth:`RunsListing.to_dict` is the ``kafkagen runs --json`` document
(schema version 1). Times are Unix seconds, ``lag`` offsets. The schema and the state rule
(:func:`run_state`): docs/status.md.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from launch.status.shape import (
    GateView,
    Observation,
    PromptCounts,
    export_view,
    gate_view,
    report_is_live,
    shape,
)
from streams.config import GenerationSettings
from streams.control import ControlState, RunRecord
from streams.runs import naming

DEFAULT_MODEL = GenerationSettings.model_fields["model"].default
"""the request's ``model`` when none is set: the server answers with the model it serves."""

__all__ = [
    "LIVE_INTERVALS",
    "MIN_LIVE_S",
    "SCHEMA_VERSION",
    "LagSummary",
    "RunFacts",
    "RunRow",
    "RunState",
    "RunsListing",
    "finished",
    "live_seconds",
    "order_rows",
    "parent_of",
    "resolve_prompts_topic",
    "run_state",
    "runs_of_topics",
    "select_runs",
    "shape_run",
]

SCHEMA_VERSION = 1
LIVE_INTERVALS = 3
"""a member report counts as live for this many report intervals (``gate.report_interval_s``)."""
MIN_LIVE_S = 10.0
"""... and for at least this many seconds: reports carry the reporter's clock, not ours."""

RunState = Literal["running", "halted", "done", "idle"]


def live_seconds(report_interval_s: float) -> float:
    """Seconds a member report stays live: :data:`LIVE_INTERVALS` report intervals, at least
    :data:`MIN_LIVE_S`."""
    return max(MIN_LIVE_S, LIVE_INTERVALS * report_interval_s)


# -- finding runs ---------------------------------------------------------------------------------
def runs_of_topics(topics: Iterable[str]) -> dict[str, set[str]]:
    """Run id -> the roles (``prompts``, ``completions``, ``errors``, ``control``) of its own topics
    found in ``topics``: every name :func:`streams.runs.naming.derived_topics` gives some run (a valid
    run id, :func:`streams.runs.naming.check_run_id`). Other topics (the producer-progress topic,
    Kafka's and faust's own) are left out."""
    runs: dict[str, set[str]] = {}
    for topic in topics:
        for role in naming.TOPIC_ROLES:
            suffix = f".{role}"
            if not topic.endswith(suffix) or len(topic) == len(suffix):
                continue
            run_id = topic[: -len(suffix)]
            try:
                naming.check_run_id(run_id)
            except ValueError:
                continue
            if naming.derived_topics(run_id)[role] == topic:
                runs.setdefault(run_id, set()).add(role)
    return runs


def select_runs(known: Iterable[str], patterns: Sequence[str]) -> tuple[list[str], list[str]]:
    """The run ids of ``known`` that ``patterns`` name (all of them when there is none), sorted, and
    the patterns that name none. A pattern is a run id or a shell pattern (``*``, ``?``,
    ``[seq]``, :mod:`fnmatch`, case-sensitive)."""
    names = sorted(set(known))
    if not patterns:
        return names, []
    chosen: set[str] = set()
    unmatched: list[str] = []
    for pattern in patterns:
        hits = [n for n in names if n == pattern or fnmatch.fnmatchcase(n, pattern)]
        chosen.update(hits)
        if not hits:
            unmatched.append(pattern)
    return sorted(chosen), unmatched


def resolve_prompts_topic(
    run_id: str, record: RunRecord | None, own_prompts: bool, group_topics: Iterable[str]
) -> str | None:
    """The prompts topic run ``run_id`` reads: its :class:`~streams.control.RunRecord`'s; else its
    own ``<run>.prompts`` when that exists (``own_prompts``); else the one prompts topic
    (``<A>.prompts``) its generation group committed offsets on (``group_topics``: a replay of
    ``A`` without a run record); else None (unknown)."""
    if record is not None:
        return record.prompts_topic
    if own_prompts:
        return naming.prompts_topic(run_id)
    prompts = {t for t in group_topics if any("prompts" in r for r in runs_of_topics([t]).values())}
    return prompts.pop() if len(prompts) == 1 else None


def parent_of(run_id: str, record: RunRecord | None, prompts_topic: str | None) -> str | None:
    """The run ``run_id`` replays: its run record's ``parent``; without a record, the run whose
    prompts topic it reads when that is not its own; else None."""
    if record is not None:
        return record.parent
    if prompts_topic is None:
        return None
    owner = next(iter(runs_of_topics([prompts_topic])), None)
    return owner if owner is not None and owner != run_id else None


# -- what was read --------------------------------------------------------------------------------
@dataclass
class RunFacts:
    """What one collection read about one run (offsets by partition number; times Unix seconds).

    ``own_topics``: the roles of the run's own topics that exist (:func:`runs_of_topics`);
    ``prompts_topic``: the topic it reads (:func:`resolve_prompts_topic`), None when unknown;
    ``published``: the producer's resume points of that topic under the run (or its parent), None
    when there is none; ``parent_regenerated``: a replay's, the prompts its parent's regenerations
    re-published into that topic; ``first_record_at``: the earliest first-record timestamp of the run's own
    topics; ``s3_folder``: its S3 run folder when it has one, ``s3_first_at`` the earliest
    ``LastModified`` of its first listed objects (read only when the run has no topic)."""

    run_id: str
    own_topics: frozenset[str] = frozenset()
    prompts_topic: str | None = None
    prompts_end: Mapping[int, int] = field(default_factory=dict)
    generate_committed: Mapping[int, int] = field(default_factory=dict)
    completions_end: Mapping[int, int] = field(default_factory=dict)
    errors_end: Mapping[int, int] = field(default_factory=dict)
    sink_committed: Mapping[tuple[str, int], int] = field(default_factory=dict)
    published: int | None = None
    parent_regenerated: int = 0
    control: ControlState = field(default_factory=ControlState)
    first_record_at: float | None = None
    s3_folder: str | None = None
    s3_first_at: float | None = None


# -- the listing ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LagSummary:
    """Offsets not yet committed: by the generation group on the prompts topic (``prompts``) and by
    the sink on the results topics (``sink``)."""

    prompts: int
    sink: int


@dataclass(frozen=True)
class RunRow:
    """One run of the listing (the schema: docs/status.md). ``counts`` and ``lag`` are None for a
    run with neither a prompts topic nor a results topic (known from its control topic or S3 only)."""

    run_id: str
    state: RunState
    parent: str | None
    created_at: float | None
    created_from: Literal["run_record", "first_record", "s3"] | None
    last_activity_at: float | None
    known_from: list[str]
    by: str | None
    prompts_topic: str | None
    partitions: int | None
    params: dict[str, Any]
    params_from: Literal["run_record", "member_report"] | None
    servers: list[str]
    counts: PromptCounts | None
    lag: LagSummary | None
    members: dict[str, int]
    gate: GateView
    export: dict[str, Any] | None
    regenerations: int
    regenerated_prompts: int
    s3_folder: str | None


@dataclass(frozen=True)
class RunsListing:
    """Every run listed at ``at`` (Unix seconds), oldest first; :meth:`to_dict` is the JSON document.
    ``s3_error``: why the S3 run folders could not be listed (then only Kafka's runs are there);
    ``not_found``: the run ids or patterns asked for that name no run; ``s3_listed``: whether the
    S3 run folders were listed (False: they could not be, or were not asked, ``--no-s3``)."""

    at: float
    kafka: str
    s3_bucket: str
    s3_prefix: str
    s3_error: str | None
    runs: list[RunRow]
    not_found: list[str] = field(default_factory=list)
    s3_listed: bool = True
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The listing as plain JSON-able data, in the schema's key order."""
        return {
            "schema_version": self.schema_version,
            "at": self.at,
            "kafka": self.kafka,
            "s3": {
                "bucket": self.s3_bucket,
                "prefix": self.s3_prefix,
                "listed": self.s3_listed,
                "error": self.s3_error,
            },
            "runs": [dataclasses.asdict(r) for r in self.runs],
            "not_found": list(self.not_found),
        }


# -- shaping --------------------------------------------------------------------------------------
def finished(
    control: ControlState, counts: PromptCounts | None, lag: LagSummary | None, prompts_topic: str | None
) -> bool:
    """The ``done`` rule (docs/status.md, "A run's state"): exported after the last regeneration,
    and nothing remains to generate or to sink."""
    export = control.export
    if export is None or counts is None or lag is None or prompts_topic is None:
        return False
    if any(r.at > export.at for r in control.regenerations.values()):
        return False
    if lag.prompts or lag.sink:
        return False
    return not counts.published_exact or counts.results >= counts.published


def run_state(
    control: ControlState,
    counts: PromptCounts | None,
    lag: LagSummary | None,
    prompts_topic: str | None,
    *,
    at: float,
    live_s: float,
) -> RunState:
    """The run's state at ``at`` (Unix seconds): the first of halted, running, done that holds,
    else idle (docs/status.md); a member report is live for ``live_s`` seconds."""
    if control.halted:
        return "halted"
    if any(report_is_live(r, at, live_s) for r in control.members.values()):
        return "running"
    if finished(control, counts, lag, prompts_topic):
        return "done"
    return "idle"


def _params(control: ControlState) -> tuple[dict[str, Any], Literal["run_record", "member_report"] | None]:
    """The run's generation parameters: its run record's, else what its latest member report says
    (``model``, ``max_tokens``, ``thinking``), else none. A record's ``model`` left at its
    default (``"default"``: whatever the server serves) is the latest report's served model."""
    latest = max(control.members.values(), key=lambda r: r.at) if control.members else None
    if control.run is not None:
        params = dict(control.run.generation)
        # The request's ``model`` left at its default lets each server answer with its own model:
        # the model a consumer found its server serving says more.
        if params.get("model") in (None, "", DEFAULT_MODEL) and latest is not None and latest.model:
            params["model"] = latest.model
        return params, "run_record"
    if latest is None:
        return {}, None
    said = {"model": latest.model, "max_tokens": latest.max_tokens, "thinking": latest.thinking}
    params = {k: v for k, v in said.items() if v is not None}
    return params, ("member_report" if params else None)


def _servers(control: ControlState) -> list[str]:
    """The fleet's servers, else the run record's, else those the members reported."""
    if control.fleet is not None:
        return list(control.fleet.servers)
    if control.run is not None and control.run.servers:
        return list(control.run.servers)
    return sorted({r.server for r in control.members.values()})


def _last_activity(control: ControlState) -> float | None:
    times = [r.at for r in control.members.values()]
    times += [r.at for r in control.regenerations.values()]
    times += [x.at for x in (control.gate, control.export, control.fleet) if x is not None]
    if control.run is not None:
        times.append(control.run.updated_at)
    return max(times) if times else None


def shape_run(facts: RunFacts, *, at: float, live_s: float) -> RunRow:
    """The :class:`RunRow` of ``facts`` at ``at`` (Unix seconds); member reports are live for
    ``live_s`` seconds (:func:`live_seconds`)."""
    control = facts.control
    record = control.run
    run_id = facts.run_id
    counts: PromptCounts | None = None
    lag: LagSummary | None = None
    results_topics = facts.own_topics & {"completions", "errors"}
    if facts.prompts_topic is not None or results_topics:
        status = shape(
            Observation(
                run_id=run_id,
                at=at,
                prompts_topic_exists=facts.prompts_topic is not None,
                completions_topic_exists=bool(results_topics),
                prompts_end=facts.prompts_end,
                generate_committed=facts.generate_committed,
                completions_end=facts.completions_end,
                errors_end=facts.errors_end,
                sink_committed=facts.sink_committed,
                completions_topic=naming.completions_topic(run_id),
                errors_topic=naming.errors_topic(run_id),
                prompts_topic=facts.prompts_topic or "",
                published=facts.published,
                parent_regenerated=facts.parent_regenerated,
                control=control,
            )
        )
        counts = status.prompts
        lag = LagSummary(status.lag.total, status.lag.sink.lag)
    created_at: float | None
    created_from: Literal["run_record", "first_record", "s3"] | None
    if record is not None:
        created_at, created_from = record.created_at, "run_record"
    elif facts.first_record_at is not None:
        created_at, created_from = facts.first_record_at, "first_record"
    elif facts.s3_first_at is not None:
        created_at, created_from = facts.s3_first_at, "s3"
    else:
        created_at, created_from = None, None
    known_from = (["run_record"] if record is not None else []) + (["topics"] if facts.own_topics else [])
    if facts.s3_folder is not None:
        known_from.append("s3")
    params, params_from = _params(control)
    live = sum(1 for r in control.members.values() if report_is_live(r, at, live_s))
    partitions = record.partitions if record is not None else (len(facts.prompts_end) or None)
    return RunRow(
        run_id=run_id,
        state=run_state(control, counts, lag, facts.prompts_topic, at=at, live_s=live_s),
        parent=parent_of(run_id, record, facts.prompts_topic),
        created_at=created_at,
        created_from=created_from,
        last_activity_at=_last_activity(control),
        known_from=known_from,
        by=record.by if record is not None else None,
        prompts_topic=facts.prompts_topic,
        partitions=partitions,
        params=params,
        params_from=params_from,
        servers=_servers(control),
        counts=counts,
        lag=lag,
        members={"reported": len(control.members), "live": live},
        gate=gate_view(control),
        export=export_view(control.export),
        regenerations=len(control.regenerations),
        regenerated_prompts=sum(r.ids for r in control.regenerations.values()),
        s3_folder=facts.s3_folder,
    )


def order_rows(rows: Iterable[RunRow]) -> list[RunRow]:
    """Oldest first (the newest run ends the table, next to the prompt); runs of unknown age last;
    ties by run id."""
    return sorted(rows, key=lambda r: (r.created_at is None, r.created_at or 0.0, r.run_id))
